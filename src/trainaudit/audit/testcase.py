"""The failing test as the repository defines it at --good and at --bad: what its
``model_config.yaml`` makes it run (features, the last step it can reach) and what changed in it.

Megatron-LM's ``run_ci_test.sh`` sets ``--exit-interval`` to ``--train-iters`` for pretraining
tests and extracts values for steps ``1..TRAIN_ITERS`` (``--exit-interval`` for RL tests), so the
last step a run can log is the smaller of the two when both are given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainaudit.errors import InputError
from trainaudit.history.features import changed_args, defining, test_features
from trainaudit.history.git import Repo
from trainaudit.safeio import load_yaml


@dataclass
class TestProfile:
    folder: str | None = None  # repository-relative
    config_path: str | None = None
    config_bad: dict[str, Any] = field(default_factory=dict)
    config_good: dict[str, Any] | None = None  # None: not read (no --good) or absent at --good
    features: set[str] = field(default_factory=set)
    last_step: int | None = None
    last_step_from: str = ""
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # good -> bad

    @property
    def defining_changes(self) -> list[str]:
        return defining(self.changes)


def parse_config(text: str, where: str) -> dict[str, Any]:
    try:
        data = load_yaml(text, where)
    except InputError:
        return {}
    return data if isinstance(data, dict) else {}


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def last_step(config: dict[str, Any]) -> tuple[int | None, str]:
    args = config.get("MODEL_ARGS") or {}
    if not isinstance(args, dict):
        return None, ""
    found = [(v, k) for k in ("--exit-interval", "--train-iters") if (v := _int(args.get(k))) is not None and v > 0]
    if not found:
        return None, ""
    v, k = min(found)
    return v, f"{k} {v}"


def profile(repo: Repo | None, good_sha: str | None, bad_sha: str | None, folder: str | None,
            config_text: str | None, config_path: str | None) -> TestProfile:
    """``config_text``: the config at --bad (from the repository or --model-config);
    ``config_path``: its repository path, read at --good too when a repository is given."""
    out = TestProfile(folder=folder, config_path=config_path)
    if config_text:
        out.config_bad = parse_config(config_text, config_path or "model_config.yaml")
    out.features = test_features(folder, out.config_bad)
    out.last_step, out.last_step_from = last_step(out.config_bad)
    if repo is not None and good_sha and bad_sha and config_path:
        data = repo.show_file(good_sha, config_path)
        if data is None and (old := repo.renamed_from(good_sha, bad_sha, config_path)):
            data = repo.show_file(good_sha, old)
        if data is not None:
            out.config_good = parse_config(data.decode("utf-8", "replace"), f"{config_path} at --good")
            out.changes = changed_args(out.config_good, out.config_bad)
    return out
