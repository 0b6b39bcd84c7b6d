"""Ground truth of every generated case, checked on the files it produced (not on the generator's
own bookkeeping), and the exact framework formats the rules will see."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from synth_fixture import SynthRuns, synth_runs  # noqa: F401

K = 120


def jsonl(path: Path, step_key: str = "step") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{metric: (steps, values)} from a metrics.jsonl, in file order."""
    cols: dict[str, list[tuple[int, float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        step = int(row.pop(step_key))
        for key, value in row.items():
            cols.setdefault(key, []).append((step, float(value)))
    return {k: (np.array([p[0] for p in v]), np.array([p[1] for p in v])) for k, v in cols.items()}


def values(series: dict, metric: str, lo: int, hi: int) -> np.ndarray:
    s, v = series[metric]
    return v[(s >= lo) & (s <= hi)]


def megatron_lines(path: Path) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.search(r"iteration\s+(\d+)/\s*\d+ \|", line)
        if m:
            out[int(m.group(1))] = line
    return out


def hf_dicts(path: Path) -> list[str]:
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("{'loss'")]


def test_nan_after_lr_jump(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("nan-after-lr-jump")
    m = jsonl(case.file("metrics.jsonl"))
    s, loss = m["loss"]
    first_nan = int(s[np.isnan(loss)][0])
    assert case.label["first_bad_step"] == K and case.label["category"] == "nan_inf"
    assert case.label["facts"]["first_nan_step"] == first_nan and K < first_nan <= K + 10
    assert values(m, "lr", K, K)[0] == 1000 * values(m, "lr", K - 1, K - 1)[0]
    assert np.isfinite(loss[s < first_nan]).all() and np.isnan(loss[s >= first_nan]).all()
    # The loss blows up between the jump and the NaN.
    assert values(m, "loss", K + 1, first_nan - 1).max() > 2 * values(m, "loss", K - 20, K - 1).max()
    lines = megatron_lines(case.file("train.log"))
    assert "lm loss:" in lines[first_nan - 1] and "lm loss:" not in lines[first_nan]  # Megatron omits NaN
    assert "grad norm: nan |" in lines[first_nan + 1]
    assert "learning rate: 5.000000E+01 |" in lines[K] and "learning rate: 5.000000E-02 |" in lines[K - 1]


def test_nan_batch(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("nan-batch")
    m = jsonl(case.file("metrics.jsonl"))
    s, loss = m["loss"]
    assert np.isfinite(loss[s < K]).all() and np.isnan(loss[s >= K]).all()
    assert np.isnan(values(m, "grad_norm", K, 200)).all()
    assert case.label["first_bad_step"] == K and case.label["first_bad_step_window"] == [K, K]
    dicts = hf_dicts(case.file("stdout.log"))
    assert len(dicts) == 200
    # HF's logging_nan_inf_filter hides the NaN loss: 0.0 with grad_norm nan.
    assert dicts[K - 1].startswith("{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 0.001,")
    assert "'grad_norm': nan" not in dicts[K - 2] and not dicts[K - 2].startswith("{'loss': 0.0,")


def test_corrupt_batch_spike(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("corrupt-batch-spike")
    m = jsonl(case.file("metrics.jsonl"))
    pre = np.median(values(m, "loss", K - 30, K - 1))
    assert values(m, "loss", K, K)[0] > 1000 * pre
    assert values(m, "grad_norm", K, K)[0] > 1000 * np.median(values(m, "grad_norm", K - 30, K - 1))
    assert np.median(values(m, "loss", K + 10, K + 40)) < 1.5 * pre  # it recovers: a spike, not divergence
    assert values(m, "loss", 1, K - 1).max() < 10 * pre
    assert case.label["category"] == "loss_spike" and case.label["first_bad_step"] == K


def test_slow_from_step_k(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("slow-from-step-k")
    m = jsonl(case.file("metrics.jsonl"))
    after = values(m, "step_time", K, 200)
    assert after.min() >= 0.02
    assert np.median(after) > np.median(values(m, "step_time", 10, K - 1)) + 0.015
    lines = megatron_lines(case.file("train.log"))
    ms = [float(re.search(r"elapsed time per iteration \(ms\): ([\d.]+)", lines[i]).group(1)) for i in (K - 1, K)]
    assert ms[1] >= 20.0 > ms[0]
    assert case.label["category"] == "throughput_regression" and case.label["first_bad_step"] == K


def test_shuffled_labels(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("shuffled-labels")
    _, loss = jsonl(case.file("metrics.jsonl"))["loss"]
    ln_v = math.log(32)
    assert abs(np.median(loss[20:]) - ln_v) < 0.05 * ln_v
    assert np.median(loss[-50:]) > 0.97 * ln_v
    assert " > padded vocab (size: 32) with 96 dummy tokens (new size: 128)" in case.file("train.log").read_text()
    assert case.label["category"] == "plateau" and case.label["facts"]["vocab_size"] == 32


@pytest.mark.parametrize("name", ["healthy-warmup-cosine"])
def test_healthy_runs_learn_and_stay_finite(synth_runs: SynthRuns, name: str) -> None:
    case = synth_runs.get(name)
    m = jsonl(case.file("metrics.jsonl"))
    _, loss = m["loss"]
    assert np.isfinite(loss).all()
    assert np.median(loss[-20:]) < 0.8 * np.median(loss[:20])
    assert case.label["category"] == "healthy" and case.label["first_bad_step"] is None


def test_warmup_cosine_schedule(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("healthy-warmup-cosine")
    s, lr = jsonl(case.file("metrics.jsonl"))["lr"]
    peak = int(s[np.argmax(lr)])
    assert peak == 30 and np.all(np.diff(lr[:30]) > 0) and np.all(np.diff(lr[30:]) <= 0)
    assert lr[-1] == pytest.approx(0.1 * lr.max(), rel=1e-6)
    text = case.file("train.log").read_text()
    assert text.count(" validation loss at iteration ") == 3
