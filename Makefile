# Two entry points (see README.md): `make demo` and `make test`. Both create .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
OUT ?= trainaudit-out/demo

.PHONY: demo test bench accuracy fit clean browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Runtime install with PNG plots (no dev extras): enough for the demo.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[plots]'
	touch $@

# Dev install (about 1.8 GB): test tools, torch (CPU, pinned), tensorboard, pyarrow, matplotlib.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(BIN)/python examples/run_demo.py --out $(OUT)

# Headless Chromium for the HTML report tests (tests/html): Debian's package, installed when missing
# (as root directly, else through passwordless sudo); nothing happens when it is present.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else echo "chromium is missing and cannot be installed without root: apt-get install chromium" >&2; exit 1; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# Each test file on one worker (its module fixtures are built once), files spread over the cores.
test: $(VENV)/.installed-dev browser
	$(BIN)/python -m ruff check src tools tests benchmarks examples
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -n auto --dist loadfile

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/run.py

# Scores on the labelled corpora -> docs/accuracy.md (`python tools/accuracy.py logs` rescores one set).
accuracy: $(VENV)/.installed-dev
	$(BIN)/python tools/accuracy.py

# Refit the fitted decisions on every labelled case: the rules' fitted thresholds
# (src/trainaudit/rules/fitted.json, inside each evaluation fold and on every case), the diagnosis
# decision over their findings (src/trainaudit/diagnosis/model.json) and the commit ranking
# (src/trainaudit/history/ranking.json); then `make accuracy`.
fit: $(VENV)/.installed-dev
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  $(BIN)/python tools/fit_thresholds.py --cases "$$tmp/synth" && \
	  $(BIN)/python tools/fit_diagnosis.py --cases "$$tmp/synth"
	$(BIN)/python tools/fit_ranking.py

clean:
	rm -rf $(VENV) trainaudit-out
