"""Ground truth of every generated case, checked on the files it produced (not on the generator's
own bookkeeping), and the exact framework formats the rules will see."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from shared_data import REPO, run_synth
from synth.cases import LR_ZERO_FROM
from synth_fixture import SynthRuns

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
    ms = [float(re.search(r"elapsed time per iteration \(ms\): ([\d.]+)", lines[i]).group(1)) for i in range(K - 10, K + 1)]
    assert ms[-1] >= 20.0 > np.median(ms[:-1])
    assert case.label["category"] == "throughput_regression" and case.label["first_bad_step"] == K


def test_shuffled_labels(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("shuffled-labels")
    _, loss = jsonl(case.file("metrics.jsonl"))["loss"]
    ln_v = math.log(32)
    assert abs(np.median(loss[20:]) - ln_v) < 0.05 * ln_v
    assert np.median(loss[-50:]) > 0.97 * ln_v
    assert " > padded vocab (size: 32) with 96 dummy tokens (new size: 128)" in case.file("train.log").read_text()
    assert case.label["category"] == "plateau" and case.label["facts"]["vocab_size"] == 32


@pytest.mark.parametrize("name", ["healthy-warmup-cosine", "healthy-noisy", "healthy-restart", "healthy-eval-pause"])
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


def test_lr_too_high_diverges(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("lr-too-high")
    s, loss = jsonl(case.file("metrics.jsonl"))["loss"]
    first = case.label["first_bad_step"]
    assert np.isfinite(loss).all()
    best_before = loss[s < first].min()
    assert np.median(loss[-30:]) > 2 * np.median(loss[(s >= first - 20) & (s < first - 5)]) or \
        np.median(loss[-30:]) > 2 * best_before
    assert abs(np.median(loss[-30:]) - math.log(8)) < 0.15  # back to chance level
    lo, hi = case.label["first_bad_step_window"]
    assert lo <= first <= hi and case.label["category"] == "divergence"


def test_lr_jump_diverges(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("lr-jump")
    m = jsonl(case.file("metrics.jsonl"))
    assert values(m, "lr", K, K)[0] == pytest.approx(100 * values(m, "lr", K - 1, K - 1)[0])
    pre = np.median(values(m, "loss", K - 20, K - 1))
    assert np.median(values(m, "loss", K + 1, K + 30)) > 1.3 * pre
    assert np.median(values(m, "loss", 180, 200)) > 1.3 * pre
    assert "learning rate: 2.000000E-01 |" in megatron_lines(case.file("train.log"))[K]


def test_zero_grad_bug(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("zero-grad-bug")
    m = jsonl(case.file("metrics.jsonl"))
    assert np.all(m["grad_norm"][1] == 0.0)
    _, loss = m["loss"]
    assert abs(np.median(loss) - math.log(8)) < 0.1
    assert all("'grad_norm': 0.0," in d for d in hf_dicts(case.file("stdout.log")))


def test_lr_zero(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("lr-zero")
    s, lr = jsonl(case.file("metrics.jsonl"))["lr"]
    z = LR_ZERO_FROM
    assert np.all(lr[s >= z] == 0.0) and np.all(lr[s < z] > 0.0)
    assert np.mean(lr[1:270] == 0.0) >= 0.85  # far above the rule's 50% share, not on its edge
    assert "learning rate: 0.000000E+00 |" in megatron_lines(case.file("train.log"))[z]
    assert case.label["first_bad_step"] == z


def test_vanishing_gradients(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("vanishing-gradients")
    m = jsonl(case.file("metrics.jsonl"))
    assert m["grad_norm_first_layer"][1].max() < 1e-7
    assert np.median(m["grad_norm_last_layer"][1]) > 1e-2
    assert "'grad_norm_first_layer': " in hf_dicts(case.file("stdout.log"))[0]


def test_rnn_exploding(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("rnn-exploding")
    s, g = jsonl(case.file("metrics.jsonl"))["grad_norm"]
    first = case.label["first_bad_step"]
    assert first == K  # where the backprop-through-time length grows
    assert g[s == first][0] >= 10 * g[0] and np.all(g[s < first] < 10 * g[0])
    # orders of magnitude, not a factor near the rule's 10x: the verdict cannot hinge on rounding
    assert np.median(g[s >= first]) >= 1000 * g[0] and g.max() > 1e5 * g[0]


def test_loss_scale_collapse(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("loss-scale-collapse")
    m = jsonl(case.file("metrics.jsonl"))
    s, scale = m["loss_scale"]
    after = scale[s >= K]
    assert np.all(after[1:] == after[:-1] / 2) and scale[s == K - 1][0] == 2 * after[0]
    assert after[-1] < 1e-4 and int(s[-1]) < 200  # the run aborted
    assert not np.isfinite(values(m, "loss", K, 200)).any()
    lines = megatron_lines(case.file("train.log"))
    assert "lm loss: 0.000000E+00 | loss scale: 131072.0 | number of skipped iterations:   1 | " \
           "number of nan iterations:   1 |" in lines[K]
    assert "grad norm:" not in lines[K] and "grad norm:" in lines[K - 1]
    assert "[after training is done]" not in case.file("train.log").read_text()
    err = case.file("stderr.log").read_text()
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip().endswith("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably "
                                 "exploding. Try lowering the learning rate, using gradient clipping or increasing "
                                 "the batch size.")


def test_memory_growth(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("memory-growth")
    s, rss = jsonl(case.file("metrics.jsonl"))["rss_mb"]
    before = rss[(s >= 10) & (s < 50)]
    assert before.max() - before.min() < 15
    assert rss[-1] - rss[s == 50][0] > 100
    assert np.polyfit(s[s >= 50], rss[s >= 50], 1)[0] > 0.5


def test_crash_shape_error(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("crash-shape-error")
    s, _ = jsonl(case.file("metrics.jsonl"))["loss"]
    assert int(s[-1]) == K - 1
    err = case.file("stderr.log").read_text()
    assert err.rstrip().endswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x19 and 20x64)")
    assert str(REPO) not in err and 'File "/opt/venv/lib/python3/site-packages/torch/nn/modules/linear.py"' in err
    assert "train_runtime" not in case.file("stdout.log").read_text()  # no end-of-training summary


def test_restart_relogs_identical_steps(synth_runs: SynthRuns) -> None:
    case = synth_runs.get("healthy-restart")
    s, loss = jsonl(case.file("metrics.jsonl"))["loss"]
    assert list(s[130:160]) == list(range(101, 131)) and np.array_equal(loss[100:130], loss[130:160])
    text = case.file("train.log").read_text()
    assert text.count("------------------------ arguments ------------------------") == 2
    assert " loading checkpoint from checkpoints at iteration 100" in text
    assert len(list((case.dir / "tb").iterdir())) == 2  # the new process writes a second event file


def test_eval_pause_is_in_timestamps_not_step_time(synth_runs: SynthRuns) -> None:
    from datetime import datetime

    case = synth_runs.get("healthy-eval-pause")
    lines = megatron_lines(case.file("train.log"))

    def ts(i: int) -> datetime:
        return datetime.strptime(re.search(r"\[([\d\- :.]+)\]", lines[i]).group(1), "%Y-%m-%d %H:%M:%S.%f")

    gaps = {i: (ts(i) - ts(i - 1)).total_seconds() for i in range(2, 251)}
    typical = np.median(list(gaps.values()))
    assert all(gaps[e + 1] > 10 * typical for e in (50, 100, 150, 200))
    assert case.file("train.log").read_text().count(" validation loss at iteration ") == 5
    s, st = jsonl(case.file("metrics.jsonl"))["step_time"]
    assert np.median(st[np.isin(s, [51, 101, 151, 201])]) < 5 * np.median(st)  # eval time is not step time


def test_manifest_labels_every_case(tmp_path) -> None:
    """The CLI writes all cases with a label each, in well under a minute (measured in the report)."""
    proc = run_synth(str(tmp_path), "--case", "nan-batch", "--case", "healthy-noisy")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [c["case"] for c in manifest["cases"]] == ["nan-batch", "healthy-noisy"]
    for c in manifest["cases"]:
        assert {"category", "first_bad_step", "first_bad_step_window", "description", "files"} <= set(c)
        for f in c["files"]:
            assert (tmp_path / f["path"]).is_file()
    bad = run_synth(str(tmp_path), "--case", "nope")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: unknown case(s): nope (see --list)"]
