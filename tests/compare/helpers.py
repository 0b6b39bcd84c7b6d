"""Shared helpers for the compare tests: fixture paths, perturbations, and the gate's pass rule
restated by hand (plain Python floats, independent of trainaudit.compare)."""

from __future__ import annotations

import copy
import json
import math
import statistics
from pathlib import Path
from typing import Any

from shared_data import MEGATRON

MIMO = MEGATRON / "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
MIMO_GOLDEN = MIMO / "golden_values_dev_dgx_h100.json"
MIMO_CONFIG = MIMO / "model_config.yaml"
RESUME = MEGATRON / "gpt3_mcore_te_tp1_pp1_resume_torch_dist_dist_optimizer"
NONDET = MEGATRON / "gpt3_mcore_te_tp1_pp2_cp4_a2a_p2p_nondeterministic"
SHORT = MEGATRON / "gpt3_7b_tp1_pp4_memory_speed"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def dump(data: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(data, indent=4), encoding="utf-8")
    return path


def perturbed(src: Path, tmp: Path, name: str, edit) -> Path:  # type: ignore[no-untyped-def]
    data = copy.deepcopy(load(src))
    edit(data)
    return dump(data, tmp / name)


def as_inf(v: Any) -> float:
    return math.inf if isinstance(v, str) else float(v)


def close(a: float, g: float, rtol: float) -> bool:
    if math.isinf(a) or math.isinf(g):
        return a == g
    return abs(a - g) <= rtol * abs(g)


def hand_check(golden: dict[str, Any], actual: dict[str, Any], rtol: float, exact: bool) -> tuple[bool, int]:
    """The comparator's rule (Megatron-LM common.py) for a per-step metric: golden drives the steps, missing
    -> "nan" -> inf, budget k = min(max(N // 100, 1), 50), pass if mean >= 1 - k/N."""
    steps = list(golden["values"])
    ok = [close(as_inf(actual["values"].get(s, "nan")), as_inf(golden["values"][s]), rtol) for s in steps]
    n = len(steps)
    failing = ok.count(False)
    if exact:
        return failing == 0, failing
    k = min(max(n // 100, 1), 50)
    return sum(ok) / n >= 1 - k / n, failing


def hand_iteration_time(golden: dict[str, Any], actual: dict[str, Any]) -> tuple[bool, float, float]:
    finite = sorted(int(s) for s, v in golden["values"].items() if not isinstance(v, str))
    lo, hi = (5, 20) if finite[-1] <= 25 else (30, 45)
    steps = [s for s in finite if lo <= s <= hi]
    g = statistics.median(float(golden["values"][str(s)]) for s in steps)
    a = statistics.median(as_inf(actual["values"].get(str(s), "nan")) for s in steps)
    return close(a, g, 0.05), g, a
