"""The run corpus (tests/corpus/runs, written by ``python -m synth.corpus``): every case has a
valid label and parses, the corpus keeps its shape, and a sample of families regenerated here
shows its fault at the labelled printed step."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from shared_data import REPO

from synth import corpus, printers
from trainaudit.answer.schema import Category
from trainaudit.ingest import load_run

RUNS = REPO / "tests" / "corpus" / "runs"
ALL_CASES = sorted(p.parent for p in RUNS.glob("*/label.json"))
# beside them, the runs of an independent generator (tests/corpus/README.md), family "indep-...", and those
# answered and recorded that join the fitted corpus at the next refit (tests/corpus/pending)
PENDING = sorted(p.parent for p in (REPO / "tests" / "corpus" / "pending").glob("*/label.json"))
INDEPENDENT = [d for d in ALL_CASES if '"family": "indep-' in (d / "label.json").read_text(encoding="utf-8")] + PENDING
CASES = [d for d in ALL_CASES if d not in INDEPENDENT]
FIELDS = {"source", "where", "framework", "category", "first_bad_step", "first_bad_step_window", "cause",
          "label_basis", "label_confidence", "notes", "family"}


def _label(d: Path) -> dict:
    return json.loads((d / "label.json").read_text(encoding="utf-8"))


def _log(d: Path) -> Path:
    (f,) = [p for p in d.iterdir() if p.name != "label.json"]
    return f


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_case_has_a_valid_label_and_parses(case: Path) -> None:
    lab = _label(case)
    assert set(lab) >= FIELDS, FIELDS - set(lab)
    assert lab["category"] in {c.value for c in Category}
    assert lab["label_basis"] == "injected" and lab["label_confidence"] == "high"
    assert re.fullmatch(r"tools/synth [\w.-]+ seed \d+", lab["source"]) and lab["family"] in lab["source"]
    assert case.name.startswith(lab["family"] + "-s")
    if lab["category"] == "healthy":
        assert lab["first_bad_step"] is None and lab["first_bad_step_window"] is None
    else:
        lo, hi = lab["first_bad_step_window"]
        assert lo <= lab["first_bad_step"] <= hi
    log = _log(case)
    assert 200 <= log.stat().st_size <= 150_000
    run, _ = load_run([str(log)])
    assert any(len(s) >= 3 for s in run.series.values()), f"no metric read: {sorted(run.series)}"


@pytest.mark.parametrize("case", INDEPENDENT, ids=[c.name for c in INDEPENDENT])
def test_every_independent_run_has_a_valid_label_and_parses(case: Path) -> None:
    lab = _label(case)
    assert set(lab) >= FIELDS - {"first_bad_step_window", "notes"}, FIELDS - set(lab)
    # "log": relabelled from what the log shows where it is not what was injected (README)
    assert lab["category"] in {c.value for c in Category} and lab["label_basis"] in ("injected", "log")
    assert re.fullmatch(r"independent generator gen_\w+ [\w.-]+ seed \d+", lab["source"])
    if lab["category"] == "healthy":
        assert lab["first_bad_step"] is None
    else:
        lo, hi = lab.get("first_bad_step_window") or [lab["first_bad_step"]] * 2
        assert lo <= lab["first_bad_step"] <= hi
    log = _log(case)
    assert 200 <= log.stat().st_size <= 150_000
    # a TensorBoard event file is binary: its tags and any path in it are ASCII all the same
    text = log.read_bytes().decode("utf-8", errors="replace")
    assert not re.search(r"/work/|/root/|/home/|/tmp/", text)  # no path of the generating machine
    run, _ = load_run([str(log)])
    # (a run that died in its first epoch may print no metric: its error is what it holds)
    assert run.series or run.events, "nothing read"


def test_the_run_corpus_keeps_its_shape() -> None:
    labels = [_label(d) for d in CASES]
    assert len(labels) >= 150
    cats = Counter(lab["category"] for lab in labels)
    assert 3 * cats["healthy"] >= len(labels)
    faults = {"nan_inf", "divergence", "loss_spike", "loss_scale_collapse", "plateau", "overfitting",
              "grad_explosion", "grad_vanishing", "memory_growth", "throughput_regression", "data_pipeline",
              "crash", "oom"}
    assert {c for c in faults if cats[c] < 8} == set(), cats
    renderings = {lab["family"].split("-")[0] for lab in labels}
    assert {"hf", "lightning", "keras2", "keras3", "plain", "deepspeed", "megatron"} <= renderings
    assert len({lab["family"] for lab in labels}) >= 40
    total = sum(p.stat().st_size for p in RUNS.rglob("*") if p.is_file())
    assert total < 15 * 2**20
    for d in CASES:  # no path of the generating machine
        text = _log(d).read_text(encoding="utf-8")
        assert "site-packages" not in text or "/opt/venv/lib/python3/site-packages/" in text


def _printed(text: str, pattern: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in re.finditer(pattern, text)}


FAMILIES = ["megatron-loss-scale", "deepspeed-loss-scale-ds", "plain-pipe-nan-batch", "keras2-overfit-epochs", "deepspeed-healthy-fp16",
            "plain-kv-slow-loader"]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    corpus.generate(out, FAMILIES)
    return out


def test_regenerating_gives_the_committed_labels(regenerated: Path) -> None:
    made = sorted(p.name for p in regenerated.iterdir())
    fams = {f.name: f for f in corpus.all_families()}
    assert len(made) == sum(len(fams[n].seeds) * len(fams[n].all_variants) for n in FAMILIES) == 42
    for name in made:
        assert _label(regenerated / name) == _label(RUNS / name), name


def test_megatron_loss_scale_shows_at_the_label(regenerated: Path) -> None:
    d = regenerated / "megatron-loss-scale-s4-every5"
    lab, text = _label(d), _log(d).read_text(encoding="utf-8")
    lines = _printed(text, r"iteration\s+(\d+)/\s*\d+ \|[^\n]*")
    fb = lab["first_bad_step"]
    assert fb % 5 == 0 and "number of skipped iterations:   0 |" in lines[fb - 5]
    assert "number of skipped iterations:   0 |" not in lines[fb]
    *full, last = sorted(s for s in lines if s > fb)  # the last line is the aborted run's partial interval
    assert full and all("number of skipped iterations:   5 |" in lines[s] for s in full)
    assert "number of skipped iterations:   0 |" not in lines[last]
    assert text.rstrip().endswith("Minimum loss scale reached (0.0001). Your loss is probably exploding. Try "
                                  "lowering the learning rate, using gradient clipping or increasing the batch size.")


def test_deepspeed_loss_scale_halves_from_the_label(regenerated: Path) -> None:
    d = regenerated / "deepspeed-loss-scale-ds-s1-every10"
    lab, text = _label(d), _log(d).read_text(encoding="utf-8")
    fb = lab["first_bad_step"]
    progress = {int(s): int(k) for s, k in re.findall(r"\] step=(\d+), skipped=(\d+),", text)}
    assert all(k == 0 for s, k in progress.items() if s < fb)
    assert all(k == s - fb + 1 for s, k in progress.items() if s >= fb)  # every step from the fault is skipped
    scales = [(int(a), int(b)) for a, b in re.findall(r"Attempted loss scale: (\d+), reducing to (\d+)", text)]
    assert all(a == 2 * b for a, b in scales) and scales[-1][1] == 1
    assert text.rstrip().endswith("Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                                  "Exiting run.")


def test_nan_batch_shows_at_the_label_in_a_cut_paste(regenerated: Path) -> None:
    d = regenerated / "plain-pipe-nan-batch-s2-every10-head"
    lab, text = _label(d), _log(d).read_text(encoding="utf-8")
    lines = _printed(text, r"step\s+(\d+)/200 \| loss (\S+)")
    fb = lab["first_bad_step"]
    assert not text.startswith("Training ")  # the paste starts mid-run
    assert 6 <= sorted(lines).index(fb) <= 12  # with a few points before the fault
    assert "loss nan" in lines[fb] and all("loss nan" not in lines[s] for s in lines if s < fb)


def test_keras_overfit_labels_the_first_rising_epoch(regenerated: Path) -> None:
    d = regenerated / "keras2-overfit-epochs-s1-full"
    lab, text = _label(d), _log(d).read_text(encoding="utf-8")
    val = {int(e): float(v) for e, v in re.findall(r"Epoch (\d+)/30\n[^\n]*val_loss: ([\d.]+)", text)}
    assert len(val) == 30 and lab["step_unit"] == "epoch"
    fb = lab["first_bad_step"]
    best = min(val, key=lambda e: val[e])
    assert best < fb <= best + 3 and val[30] > 1.3 * val[best]
    train = [float(x) for x in re.findall(r" - loss: ([\d.]+)", text)]
    assert train[-1] < 0.5 * train[best - 1]


def test_deepspeed_healthy_fp16_scale_oscillates(regenerated: Path) -> None:
    d = regenerated / "deepspeed-healthy-fp16-s1-every10"
    text = _log(d).read_text(encoding="utf-8")
    overflows = re.findall(r"\[deepspeed\] OVERFLOW! Rank 0 Skipping step\. Attempted loss scale: (\d+), reducing "
                           r"to (\d+)", text)
    assert 0 < len(overflows) < 24 and all(int(a) == 2 * int(b) for a, b in overflows)
    losses = [float(x) for x in re.findall(r"steps: \d+ loss: (\S+) ", text)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < 0.8 * losses[0]
    assert _label(d)["category"] == "healthy"


def test_slow_loader_data_time_dominates_from_the_label(regenerated: Path) -> None:
    d = regenerated / "plain-kv-slow-loader-s3-every5"
    lab, text = _label(d), _log(d).read_text(encoding="utf-8")
    rows = {int(s): (float(dt), float(t)) for s, dt, t in
            re.findall(r"Iter (\d+): .*?data_time=([\d.]+), time=([\d.]+)", text)}
    fb = lab["first_bad_step"]
    assert all(dt / t > 0.8 for s, (dt, t) in rows.items() if s > fb)
    assert all(dt / t < 0.3 for s, (dt, t) in rows.items() if s < fb)


def test_printed_label_conventions() -> None:
    from synth.cases import Truth

    steps = [10, 20, 30, 40]
    assert corpus.printed_label(Truth(23, (21, 25)), "nan_inf", steps) == (30, [30, 30])
    assert corpus.printed_label(Truth(1, (1, 50)), "plateau", [20, 30, 40, 50]) == (20, [20, 30])
    assert corpus.printed_label(Truth(45, (44, 45)), "crash", steps) == (40, [40, 45])
    assert corpus.printed_label(Truth(None, None), "healthy", steps) == (None, None)
    assert corpus.Variant.parse("every10-head-rank") == corpus.Variant(10, "head", "[rank0]: ")
    with pytest.raises(ValueError):
        corpus.Variant.parse("every10-sideways")
    assert set(printers.EPOCH_PRINTERS) <= set(printers.PRINTERS)
