"""What the Megatron gate reads from a test's ``model_config.yaml`` (Megatron-LM's
``tests/functional_tests/python_test_utils/common.py`` and the test cases' configs): ``METRICS`` (default ``lm loss``, ``num-zeros``), the nondeterministic flags that make the
gate skip exact checks, ``TEST_TYPE`` and ``--train-iters``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainaudit.errors import InputError
from trainaudit.safeio import load_yaml, read_text

DEFAULT_METRICS: tuple[str, ...] = ("lm loss", "num-zeros")
# run_ci_test.sh passes --allow-nondeterministic-algo when either of these is "1" (typo upstream).
NONDETERMINISTIC_FLAGS: tuple[str, ...] = ("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "NON_DETERMINSTIC_RESULTS")
RESUME_TEST_TYPES: frozenset[str] = frozenset({"ckpt-resume", "frozen-resume"})


@dataclass(slots=True)
class ModelConfig:
    path: str | None = None
    metrics: list[str] | None = None  # None: the key is absent, the gate uses DEFAULT_METRICS
    nondeterministic: bool = False
    nondeterministic_flag: str | None = None  # which key set it, for the report
    test_type: str = "regular"
    train_iters: int | None = None
    env: dict[str, Any] = field(default_factory=dict)
    line_of: dict[str, int] = field(default_factory=dict)  # key -> 1-based line in the YAML

    def effective_metrics(self, default: tuple[str, ...] = DEFAULT_METRICS) -> list[str]:
        return list(self.metrics) if self.metrics is not None else list(default)

    @property
    def is_resume(self) -> bool:
        return self.test_type in RESUME_TEST_TYPES



def load_model_config(path: str) -> ModelConfig:
    text = read_text(path)
    data = load_yaml(text, path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a model_config.yaml (expected a mapping with ENV_VARS/MODEL_ARGS)")
    cfg = ModelConfig(path=path)
    env = data.get("ENV_VARS") or {}
    if not isinstance(env, dict):
        raise InputError(f"{path}: ENV_VARS is not a mapping")
    cfg.env = dict(env)
    for key in NONDETERMINISTIC_FLAGS:
        if key in env and str(env[key]).strip() == "1":
            cfg.nondeterministic, cfg.nondeterministic_flag = True, key
            break
    metrics = data.get("METRICS")
    if metrics is not None:
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise InputError(f"{path}: METRICS must be a list of metric names")
        cfg.metrics = list(metrics)
    cfg.test_type = str(data.get("TEST_TYPE", "regular"))
    args = data.get("MODEL_ARGS") or {}
    if isinstance(args, dict) and "--train-iters" in args:
        try:
            cfg.train_iters = int(args["--train-iters"])
        except (TypeError, ValueError):
            raise InputError(f"{path}: --train-iters {args['--train-iters']!r} is not an integer") from None
    for no, line in enumerate(text.splitlines(), 1):
        key = line.strip().split(":", 1)[0].strip()
        if key and key not in cfg.line_of:
            cfg.line_of[key] = no
    return cfg
