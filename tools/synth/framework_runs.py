"""Run-corpus families trained through the real HF Trainer and the real Lightning Trainer.

The console is what the framework printed (HF's log dicts after tqdm bars, Lightning's progress
bar redrawn with carriage returns), captured as ``> log 2>&1`` would; Lightning's CSVLogger file
is a rendering of its own. Labels come from the files the frameworks wrote (``trainer_state.json``,
``metrics.csv``), checked as in ``synth.frameworks``. Printed step conventions:

- HF Trainer console: the global optimizer step (the tqdm bar's ``n/total``, ``trainer_state``'s
  ``step``); a logging interval moves the label to the next logged step;
- Lightning progress bar: the global step, 1-based (the bar's ``n`` in a one-epoch run);
- Lightning ``metrics.csv``: the CSV's own ``step`` column (0-based: optimizer steps done before).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from synth import frameworks
from synth.cases import GroundTruthError, Truth, arr, healthy_truth, require, truth_corrupt_spike_at
from synth.corpus import Family, Variant, base_label, cut_lines, printed_label, text_of, write_case
from synth.printers import HEAD, TAIL, Line
from synth.runlog import _neutral_paths

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def families() -> list[Family]:
    out: list[Family] = []
    if frameworks.libraries_present(frameworks.HF_LIBS):
        out += [
            Family("hf", "healthy-gpt2-cosine", (1, 2), ("every5", "every10-head", "every1-rank")),
            Family("hf", "healthy-classifier", (3, 4), ("every5", "every10-tail")),
            Family("hf", "healthy-eval", (5,), ("every10",)),
            Family("hf", "healthy-classifier-long", (6,), ("every20", "every5-rank")),
            Family("hf", "slow", (1, 2), ("every5", "every10-head")),
            Family("hf", "lr-jump", (1, 2), ("every5", "every10-head")),
            Family("hf", "nan-batch", (1, 2), ("every5", "every1-head")),
            Family("hf", "spike", (1, 2), ("every1", "every5-window")),
            Family("hf", "lr-too-low", (1,), ("every10", "every10-tail")),
            Family("hf", "overfit", (1, 2), ("every4",)),
            Family("hf", "crash", (1,), ("every10", "every10-rank")),
            Family("hf", "oom", (1,), ("every10", "every5-head")),
        ]
    if frameworks.libraries_present(frameworks.PL_LIBS):
        out += [
            Family("lightning-bar", "healthy", (1, 2), ("full", "newlines")),
            Family("lightning-csv", "healthy", (1, 2), ("full", "head")),
            Family("lightning-bar", "nan-lr-jump", (1,), ("full", "newlines")),
            Family("lightning-csv", "nan-lr-jump", (1,), ("full",)),
            Family("lightning-bar", "overfit", (2,), ("newlines",)),
            Family("lightning-bar", "spike", (1,), ("newlines", "full")),
            Family("lightning-csv", "spike", (2,), ("full", "head")),
            Family("lightning-bar", "lr-too-low", (1,), ("newlines",)),
            Family("lightning-csv", "lr-too-low", (2,), ("full", "head")),
            Family("lightning-bar", "crash", (1, 2), ("newlines",)),
            Family("lightning-bar", "healthy", (3,), ("newlines",)),
            Family("lightning-csv", "healthy", (4,), ("full",)),
            Family("lightning-csv", "overfit", (1, 2), ("full",)),
        ]
    return out


# --- HF Trainer ---------------------------------------------------------------------------------

def _k(seed: int) -> int:
    return 100 + 10 * (seed % 3)  # a multiple of every logging interval used


def _hf_entries(case_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    state = json.loads((case_dir / "trainer_state.json").read_text(encoding="utf-8"))
    hist = state["log_history"]
    return ([e for e in hist if "loss" in e and "train_runtime" not in e], [e for e in hist if "eval_loss" in e])


def _series(entries: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([int(e["step"]) for e in entries]), np.array([float(e[key]) for e in entries]))


def _hf(case_dir: Path, scenario: str, seed: int, every: int) -> tuple[Truth, str]:
    """Train one HF run into ``case_dir``; returns its truth (global steps) and cause."""
    import torch

    s = 10 + seed  # model/data seeds of their own, apart from the scenario's fault step
    k = _k(seed)
    fw = frameworks
    crashed = ""

    def train(*args: Any, **kw: Any) -> None:
        nonlocal crashed
        try:
            fw._hf_train(case_dir, *args, logging_steps=every, **kw)
        except RuntimeError:  # as the interpreter prints an uncaught exception, after the console
            crashed = _neutral_paths(traceback.format_exc())

    if scenario == "healthy-gpt2-cosine":
        train(fw._gpt2(s), fw._lm_dataset(fw.STEPS * 32, s), seed=s, lr=3e-3, scheduler="cosine", warmup=20)
        cause = "healthy: tiny GPT-2 through the HF Trainer, AdamW, 20-step warm-up then cosine decay"
    elif scenario == "healthy-classifier":
        train(fw._classifier(s), fw._mixture_dataset(fw.STEPS * 32, s), seed=s, lr=1e-3)
        cause = "healthy: MLP classifier through the HF Trainer, constant lr 1e-3"
    elif scenario == "healthy-classifier-long":
        train(fw._classifier(s), fw._mixture_dataset(400 * 32, s), seed=s, lr=5e-4, steps=400, scheduler="linear",
              warmup=40)
        cause = "healthy: MLP classifier through the HF Trainer, 400 steps, 40-step warm-up then linear decay"
    elif scenario == "slow":
        train(fw._classifier(s), fw._mixture_dataset(fw.STEPS * 32, s), seed=s, lr=1e-3, callbacks=[_sleep_from(k, 0.05)])
        cause = (f"from step {k} every step sleeps 50 ms (a blocking call added to the step): the progress bar's "
                 "it/s drops about 10x")
    elif scenario == "healthy-eval":
        train(fw._gpt2(s), fw._lm_dataset(fw.STEPS * 32, s), seed=s, lr=3e-3, scheduler="linear", warmup=10,
              eval_dataset=fw._lm_dataset(256, s + 100), eval_steps=50)
        cause = "healthy: tiny GPT-2 through the HF Trainer, linear decay, evaluation every 50 steps"
    elif scenario == "lr-jump":
        train(fw._gpt2(s), fw._lm_dataset(fw.STEPS * 32, s), seed=s, lr=4e-3, factor=lambda i: 1.0 if i < k else 50.0)
        cause = f"a LambdaLR schedule multiplies the lr by 50 at step {k} (4e-3 -> 0.2): the loss jumps and stays up"
    elif scenario == "nan-batch":
        train(fw._classifier(s), fw._mixture_dataset(fw.STEPS * 32, s), seed=s, lr=1e-3, data_collator=fw._nan_collator(k))
        cause = (f"the batch of step {k} carries one NaN feature; the Trainer's logging_nan_inf_filter hides the NaN "
                 "loss, grad_norm is nan from there")
    elif scenario == "spike":
        train(fw._classifier(s), fw._mixture_dataset(fw.STEPS * 32, s), seed=s, lr=1e-3,
              data_collator=fw.collator_at(k, lambda b: b["x"].mul_(1e6)))
        cause = f"the inputs of step {k} are scaled by 1e6 (one corrupt batch): the loss spikes once, then recovers"
    elif scenario == "lr-too-low":
        train(fw._gpt2(s), fw._lm_dataset(fw.STEPS * 32, s), seed=s, lr=1e-7)
        cause = "learning rate 1e-7 (a typo in the exponent): the loss stays at its initial value"
    elif scenario == "overfit":
        from synth import tasks

        tasks.setup(s)
        train(fw._classifier(s), _points(64, s, 0.3), seed=s, lr=3e-3, batch=16, steps=160,
              eval_dataset=_points(1024, s + 1, 0.0), eval_steps=4)
        cause = "64 noisy training points for 40 epochs: eval_loss reaches its minimum early, then rises"
    elif scenario == "crash":
        train(fw._classifier(s), fw._mixture_dataset(fw.STEPS * 32, s), seed=s, lr=1e-3,
              data_collator=fw.collator_at(k, lambda b: {**b, "x": b["x"][:, :19]}))
        cause = f"the batch of step {k} has 19 features instead of 20: RuntimeError in the first Linear layer"
    elif scenario == "oom":
        train(fw._classifier(s), fw._mixture_dataset(fw.STEPS * 32, s), seed=s, lr=1e-3,
              data_collator=fw.collator_at(k, lambda b: {**b, "x": torch.zeros((2**36, 20))}))
        cause = f"the batch of step {k} is padded to 2**36 rows: the allocator cannot allocate it and the run dies"
    else:
        raise KeyError(scenario)
    if crashed:
        with (case_dir / "stdout.log").open("a", encoding="utf-8") as fh:
            fh.write(crashed)
    return _hf_truth(case_dir, scenario, k, crashed), cause


def _sleep_from(k: int, seconds: float) -> Any:
    """A TrainerCallback that sleeps ``seconds`` after every step from step ``k`` (real wall time: the
    tqdm bar's rate and ``train_runtime`` show it)."""
    import time

    from transformers import TrainerCallback

    class Sleep(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step >= k:
                time.sleep(seconds)

    return Sleep()


def _points(n: int, seed: int, noise: float) -> Any:
    import torch

    from synth import tasks

    data = tasks.mixture(n, seed, label_noise=noise)

    class Points(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(data.y)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": data.x[i], "labels": data.y[i]}

    return Points()


def _hf_truth(case_dir: Path, scenario: str, k: int, crashed: str) -> Truth:
    train, evals = _hf_entries(case_dir) if (case_dir / "trainer_state.json").exists() else ([], [])
    if scenario in ("crash", "oom"):
        needle = "mat1 and mat2 shapes" if scenario == "crash" else "can't allocate memory"
        require(needle in crashed, f"no {scenario} traceback")
        return Truth(k, (k - 1, k), k, {})
    s, loss = _series(train, "loss")
    if scenario.startswith("healthy"):
        log = frameworks.RunLog()
        for step, v in zip(s, loss, strict=True):
            log.log(int(step), loss=float(v))
        return healthy_truth(log)
    if scenario == "slow":
        runtime = float(json.loads((case_dir / "trainer_state.json").read_text(encoding="utf-8"))["log_history"][-1]
                        ["train_runtime"])
        require(runtime > 0.05 * (frameworks.STEPS - k), "the run did not spend the injected sleeps")
        # tqdm refreshes its rate at most every 0.1 s: the bar shows the drop some steps after k
        return Truth(k, (k, k + 30), k, {"train_runtime": runtime})
    if scenario == "lr-jump":
        pre, post = float(np.median(loss[(s < k) & (s >= k - 30)])), float(np.median(loss[s >= k + 20]))
        require(post > 1.3 * pre and bool(np.isfinite(loss).all()), f"loss did not rise and stay up ({pre} -> {post})")
        return Truth(k, (k, k + 10), k, {"loss_before": pre, "loss_after": post})
    if scenario == "nan-batch":
        _, g = _series(train, "grad_norm")
        first = int(s[np.isnan(g)][0])
        require(first >= k and bool(np.isnan(g[s >= first]).all()), "grad_norm not nan from the bad batch")
        return Truth(first, (first, first), k, {})
    if scenario == "spike":
        first = int(s[s >= k][0])
        pre = float(np.median(loss[s < k][-10:]))
        require(float(loss[s == first][0]) > 20 * pre, "no loss spike at the bad batch")
        require(float(np.median(loss[s > first + 20])) < 1.5 * pre, "loss did not recover")
        return Truth(first, (first, first), k, {"loss_before": pre, "loss_at_spike": float(loss[s == first][0])})
    if scenario == "lr-too-low":
        require(abs(float(np.median(loss[-5:])) / float(np.median(loss[:5])) - 1) < 0.02, "loss moved at lr 1e-7")
        return Truth(int(s[0]), (int(s[0]), int(s[0]) + 50), None, {})
    if scenario == "overfit":
        es, ev = _series(evals, "eval_loss")
        sm = np.array([np.median(ev[max(0, i - 2):i + 1]) for i in range(len(ev))])
        j = int(np.argmin(sm))
        require(len(ev) - 1 - j >= 5 and float(np.median(ev[-3:])) > 1.3 * float(ev[j]), "eval_loss did not rise")
        require(float(np.median(loss[-5:])) < 0.7 * float(np.median(loss[(s <= es[j]) & (s > es[j] - 12)])),
                "training loss did not keep falling")
        first = int(es[j + 1])
        return Truth(first, (first - 8, first + 8), None, {"eval_min_step": int(es[j])})
    raise KeyError(scenario)


def hf_lines(text: str, every: int) -> list[Line]:
    """The console split into lines, each tagged with the global step of the log dict on it."""
    lines: list[Line] = []
    n = 0
    step = HEAD
    raw = text.split("\n")
    last_train = max((i for i, ln in enumerate(raw) if "'loss'" in ln), default=-1)
    for i, ln in enumerate(raw):
        if "'loss'" in ln:
            n += 1
            step = n * every
        tag = step if i <= last_train else (step if "'eval_loss'" in ln else TAIL)
        lines.append((tag, ln))
    if lines and not lines[-1][1]:
        lines.pop()
    return lines


# --- Lightning ----------------------------------------------------------------------------------

def _pl(case_dir: Path, scenario: str, seed: int) -> tuple[frameworks.RunLog, Truth, str]:
    fw = frameworks
    if scenario == "healthy":
        log, _ = fw.run_pl_healthy(case_dir, seed=90 + seed, lr=(1e-3, 3e-3)[seed % 2])
        return log, healthy_truth(log), "healthy: MLP classifier through Lightning, 3 epochs, validation every epoch"
    if scenario == "nan-lr-jump":
        log, _ = fw.run_pl_nan_after_lr_jump(case_dir, seed=92 + seed)
        return (log, fw.truth_pl_nan_after_lr_jump(log),
                f"LambdaLR multiplies the lr x1000 at step {fw.K} (SGD+momentum, no clipping): the loss blows up and "
                "is NaN a few steps later")
    k = 40 + 25 * seed  # in the first epoch (64 steps) or early in the second
    if scenario == "spike":
        log, _ = fw.run_pl_classifier(case_dir, 95 + seed, 1e-3, corrupt=lambda s, x: x * 1e6 if s == k else x)
        return (log, truth_corrupt_spike_at(k)(log),
                f"the inputs of step {k} are scaled by 1e6 (one corrupt batch): the loss spikes once, then recovers")
    if scenario == "lr-too-low":
        log, _ = fw.run_pl_classifier(case_dir, 97 + seed, 1e-7)
        _, loss = arr(log, "loss")
        require(abs(float(np.median(loss[-20:])) / float(np.median(loss[:20])) - 1) < 0.03, "loss moved at lr 1e-7")
        return (log, Truth(1, (1, 50), 1, {}),
                "learning rate 1e-7 (a typo in the exponent): train_loss and val_loss stay at their initial values")
    if scenario == "crash":
        crashed = ""
        try:
            fw.run_pl_classifier(case_dir, 99 + seed, 1e-3, corrupt=lambda s, x: x[:, :19] if s == k else x)
        except RuntimeError:
            crashed = _neutral_paths(traceback.format_exc())
        require("mat1 and mat2 shapes cannot be multiplied" in crashed, "no shape-mismatch traceback")
        with (case_dir / "stdout.log").open("a", encoding="utf-8") as fh:
            fh.write(crashed)
        log = fw.pl_log(case_dir)
        return (log, Truth(k, (k - 1, k), k, {}),
                f"the batch of step {k} has 19 features instead of 20: RuntimeError in the first Linear layer")
    if scenario == "overfit":
        log, _ = fw.run_pl_overfit(case_dir, seed=93 + seed)
        return (log, fw.truth_overfit(log),
                "64 noisy training points, a 256-wide MLP, 50 epochs: val_loss reaches its minimum early, then rises "
                "while train_loss keeps falling")
    raise KeyError(scenario)


_BAR_RE = re.compile(r"Epoch (\d+): .*?(\d+)/(\d+) \[")


def bar_lines(text: str, newlines: bool) -> list[Line]:
    """The progress-bar console; with ``newlines`` each redraw on a line of its own (as CI log viewers
    show carriage returns). Segments are tagged with their global step (1-based)."""
    out: list[Line] = []
    step = HEAD
    for ln in text.split("\n"):
        segs = ln.split("\r")
        for seg in segs:
            m = _BAR_RE.search(seg)
            if m:  # the bar's total is the epoch's length
                step = int(m.group(1)) * int(m.group(3)) + int(m.group(2))
            if newlines and seg.strip():
                out.append((step, seg))
        if not newlines:
            out.append((step, ln))
    return out


def csv_lines(path: Path) -> list[Line]:
    text = path.read_text(encoding="utf-8")
    rows = text.splitlines()
    out: list[Line] = [(HEAD, rows[0])]
    reader = csv.DictReader(io.StringIO(text))
    for row, raw in zip(reader, rows[1:], strict=True):
        out.append((int(row["step"]) + 1, raw))  # tagged 1-based; labels use the CSV's 0-based steps
    return out


# --- rendering ----------------------------------------------------------------------------------

def render_family(fam: Family, out: Path) -> list[dict[str, Any]]:
    labels = []
    category = _CATEGORY[fam.scenario]
    for seed in fam.seeds:
        runs: dict[int, tuple[str, Truth, str, Any]] = {}
        for vname in fam.variants:
            v = Variant.parse(vname)
            with tempfile.TemporaryDirectory() as tmp:
                case_dir = Path(tmp)
                if fam.printer == "hf":
                    if v.every not in runs:
                        truth, cause = _hf(case_dir, fam.scenario, seed, v.every)
                        runs[v.every] = ((case_dir / "stdout.log").read_text(encoding="utf-8"), truth, cause, None)
                    text, truth, cause, _ = runs[v.every]
                    lines = hf_lines(text, v.every)
                    framework, filename, unit, shift = "hf-transformers", "log.txt", "step", 0
                else:
                    if 0 not in runs:
                        _log, truth, cause = _pl(case_dir, fam.scenario, seed)
                        metrics = case_dir / "metrics.csv"
                        runs[0] = ((case_dir / "stdout.log").read_text(encoding="utf-8"), truth, cause,
                                   metrics.read_text(encoding="utf-8") if metrics.exists() else "")
                    text, truth, cause, csv_text = runs[0]
                    framework, unit = "lightning", "step"
                    if fam.printer == "lightning-csv":
                        p = case_dir / "m.csv"
                        p.write_text(csv_text, encoding="utf-8")
                        lines, filename, shift = csv_lines(p), "metrics.csv", -1
                    else:
                        lines, filename, shift = bar_lines(text, "newlines" in vname), "log.txt", 0
                    truth = _pl_truth_1based(truth)
            steps = sorted({s for s, _ in lines if HEAD < s < TAIL})
            fb, window = printed_label(truth, category, steps)
            header = lines[0] if fam.printer == "lightning-csv" else None
            lines = cut_lines(lines, v, fb, category, seed)
            if header is not None and lines[0] != header:  # a CSV keeps its header row
                lines.insert(0, header)
            steps = sorted({s for s, _ in lines if HEAD < s < TAIL})
            fb, window = printed_label(truth, category, steps)
            if category != "healthy" and fb is None:
                raise GroundTruthError(f"{fam.name} seed {seed} {vname}: the fault is not in the paste")
            if shift and fb is not None and window is not None:
                fb, window = fb + shift, [w + shift for w in window]
            body = text_of(lines, v.prefix)
            if fam.printer == "lightning-bar" and "newlines" not in vname:
                body = "".join(t + "\n" for _s, t in lines)
            label = base_label(fam.name, seed, framework, category, cause, vname, fb, window,
                               unit + (" (metrics.csv, 0-based)" if shift else ""))
            labels.append(write_case(out, f"{fam.name}-s{seed}-{vname}", filename, body, label))
    return labels


def _pl_truth_1based(truth: Truth) -> Truth:
    """``synth.frameworks`` states Lightning truths in metrics.csv's 0-based steps where its facts
    say so (``step_base``); the lines here are tagged 1-based."""
    if truth.first_bad_step is None or "step_base" not in truth.facts:
        return truth
    lo, hi = truth.window or (truth.first_bad_step, truth.first_bad_step)
    return Truth(truth.first_bad_step + 1, (lo + 1, hi + 1), truth.fault_step, truth.facts)


_CATEGORY: dict[str, str] = {
    "healthy-gpt2-cosine": "healthy", "healthy-classifier": "healthy", "healthy-eval": "healthy", "healthy": "healthy",
    "lr-jump": "divergence", "nan-batch": "nan_inf", "spike": "loss_spike", "lr-too-low": "plateau",
    "overfit": "overfitting", "crash": "crash", "oom": "oom", "nan-lr-jump": "nan_inf",
    "healthy-classifier-long": "healthy", "slow": "throughput_regression",
}

__all__ = ["families", "render_family"]
