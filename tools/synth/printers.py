"""Console renderings of a :class:`~synth.runlog.RunLog`, as training code prints them.

Each printer returns the lines of the console, each tagged with the step it reports
(:data:`HEAD` for lines before training, :data:`TAIL` for lines after it: a summary, a
traceback), so that a paste can be cut at a step (``synth.corpus`` does). Formats:

- ``plain-*``: hand-rolled loops, a few printf styles people use (pipe-separated fields,
  ``key=value``, Python ``logging`` records, nanoGPT's ``iter N: loss X, time Yms``, a tqdm bar with
  a postfix) and an epoch printer;
- ``deepspeed``: the engine's own lines (``deepspeedai/DeepSpeed``: ``runtime/fp16/loss_scaler.py``
  ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: X, reducing to Y``,
  ``utils/logging.py`` ``log_dist`` ``step=N, skipped=K, lr=[...], mom=[...]``, ``utils/timer.py``
  ThroughputTimer ``epoch=0/micro_step=N/global_step=N, RunningAvgSamplesPerSec=...``,
  ``runtime/pipe/engine.py`` ``steps: N loss: X iter time (s): T samples/sec: S``);
- ``megatron``: ``megatron/training/training.py`` ``training_log`` lines (``synth.writers``);
- ``keras``: the Keras ``Progbar`` epoch lines (Keras 2 ``[====]`` and Keras 3 ``━━━`` bars),
  written by this printer: Keras itself is not a dependency here.

Logging intervals aggregate like the frameworks do: the loss is the mean over the interval (a NaN
in it makes the mean NaN), step time and data time the mean, skipped steps the count, everything
else the value at the printed step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from synth import writers
from synth.runlog import RunLog

HEAD = 0
TAIL = 10**9
Line = tuple[int, str]

MEAN_KEYS = ("loss", "step_time", "data_time", "d_loss", "g_loss")


def aggregate(log: RunLog, every: int) -> list[dict[str, float]]:
    """One record per printed step (multiples of ``every``, and the last step of a run that died)."""
    out: list[dict[str, float]] = []
    window: list[dict[str, float]] = []
    for i, rec in enumerate(log.records):
        window.append(rec)
        step = int(rec["step"])
        last = i == len(log.records) - 1
        if step % every and not (last and not log.completed):
            continue
        agg = dict(rec)
        for key in MEAN_KEYS:
            if key in rec:
                agg[key] = float(np.mean([r[key] for r in window]))
        skipped = [r for r in window if r.get("skipped", 0.0) > 0]
        if "skipped" in rec:
            agg["skipped"] = float(len(skipped))
            agg["nan_iterations"] = float(sum(not math.isfinite(r["loss"]) for r in skipped))
            kept = [r for r in window if r.get("skipped", 0.0) == 0]
            if kept:  # the grad norm of the last step that was applied
                agg["grad_norm"] = kept[-1]["grad_norm"]
                agg["loss"] = float(np.mean([r["loss"] for r in kept]))
        agg["interval"] = float(len(window))
        out.append(agg)
        window = []
    return out


def evals_at(log: RunLog) -> dict[int, list[dict[str, float]]]:
    out: dict[int, list[dict[str, float]]] = {}
    for ev in log.evals:
        out.setdefault(int(ev["step"]), []).append(ev)
    return out


def _evals_between(evals: dict[int, list[dict[str, float]]], lo: int, hi: int) -> list[dict[str, float]]:
    return [ev for s in sorted(evals) if lo < s <= hi for ev in evals[s]]


def _g(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}" if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


# --- hand-rolled loops --------------------------------------------------------------------------

def _fields(rec: dict[str, float], style: str) -> list[tuple[str, str]]:
    f = [("loss", _g(rec["loss"]))] if "loss" in rec else []
    f += [(key, _g(rec[key])) for key in ("d_loss", "g_loss") if key in rec]
    if "modes_covered" in rec:
        f.append(("modes_covered", f"{rec['modes_covered']:.0f}"))
    if "grad_norm" in rec:
        f.append(("grad_norm", _g(rec["grad_norm"], 4)))
    for key in sorted(rec):
        if key.startswith("grad_norm_"):
            f.append((key, f"{rec[key]:.3e}"))
    f.append(("lr", f"{rec['lr']:.3e}"))
    if "loss_scale" in rec:
        f.append(("loss_scale", f"{rec['loss_scale']:g}"))
    if "mem_allocated_mb" in rec:
        f.append(("mem_allocated_mb", f"{rec['mem_allocated_mb']:.1f}"))
    if "data_time" in rec:
        f.append(("data_time", f"{rec['data_time']:.4f}"))
    if "data_time" in rec or style in ("kv", "logging"):
        f.append(("time", f"{rec['step_time']:.4f}"))
    return f


def plain(log: RunLog, every: int = 1, style: str = "pipe") -> list[Line]:
    """A hand-rolled loop's prints; ``style`` is ``pipe``, ``kv``, ``logging`` or ``nanogpt``."""
    lines: list[Line] = []
    cfg = log.config
    if style == "logging":
        lines.append((HEAD, f"{_stamp(0.0)} INFO train: config {dict(sorted(cfg.items()))}"))
    elif style == "pipe":
        lines.append((HEAD, f"Training {cfg.get('model', 'model')} for {log.total_steps} steps "
                            f"(batch {log.batch_size}, optimizer {cfg.get('optimizer', 'adam')})"))
    evals = evals_at(log)
    prev = 0
    for rec in aggregate(log, every):
        step = int(rec["step"])
        f = _fields(rec, style)
        if style == "pipe":
            text = f"step {step:>5d}/{log.total_steps} | " + " | ".join(f"{k} {v}" for k, v in f)
        elif style == "kv":
            text = f"Iter {step}: " + ", ".join(f"{k}={v}" for k, v in f)
        elif style == "logging":
            text = f"{_stamp(rec['wall'])} INFO train: step={step} " + " ".join(f"{k}={v}" for k, v in f)
        else:  # nanogpt
            text = f"iter {step}: loss {_g(rec['loss'])}, time {rec['step_time'] * 1000:.2f}ms"
        lines.append((step, text))
        for ev in _evals_between(evals, prev, step):
            if style == "nanogpt":
                lines.append((step, f"step {step}: train loss {_g(rec['loss'])}, val loss {_g(ev['val_loss'])}"))
            else:
                extra = f", val_acc {ev['val_acc']:.4f}" if "val_acc" in ev else ""
                lines.append((step, f"eval at step {step}: val_loss {_g(ev['val_loss'])}{extra}"))
        prev = step
    lines += _tail(log, "Training finished.")
    return lines


def tqdm_bar(log: RunLog, every: int = 1) -> list[Line]:
    """A tqdm bar with a loss postfix, redrawn with carriage returns (as a ``> file`` redirect
    keeps it), one line per tqdm refresh; a bar closes with a newline at the end."""
    from tqdm import tqdm

    lines: list[Line] = []
    total = log.total_steps
    recs = aggregate(log, every)
    for rec in recs:
        step = int(rec["step"])
        post = f"loss={rec['loss']:.3g}" if math.isfinite(rec["loss"]) else "loss=nan"
        if "grad_norm" in rec:
            post += f", grad_norm={rec['grad_norm']:.3g}"
        meter = tqdm.format_meter(step, total, rec["wall"], prefix="train", postfix=post, ncols=None)
        lines.append((step, "\r" + meter))
    if lines:
        lines[-1] = (lines[-1][0], lines[-1][1] + "\n")
    return lines + _tail(log, None)


def epochs(log: RunLog, style: str = "plain") -> list[Line]:
    """Per-epoch lines: ``style`` ``plain`` (``epoch 3/30: train_loss ... val_loss ...``), ``keras2``
    or ``keras3`` (Progbar lines after ``Epoch n/N``). Steps of these lines are epochs."""
    per = int(log.config["steps_per_epoch"])
    n_epochs = math.ceil(log.total_steps / per)
    evals = {int(ev["step"]) // per: ev for ev in log.evals}
    lines: list[Line] = []
    for e in range(1, n_epochs + 1):
        recs = [r for r in log.records if (e - 1) * per < r["step"] <= e * per]
        if not recs:
            break
        loss = float(np.mean([r["loss"] for r in recs]))
        ms = float(np.mean([r["step_time"] for r in recs])) * 1000
        ev = evals.get(e) if len(recs) == per else None
        if style == "plain":
            text = f"epoch {e}/{n_epochs}: train_loss {_g(loss)}"
            if ev:
                text += f", val_loss {_g(ev['val_loss'])}, val_acc {ev['val_acc']:.4f}"
            lines.append((e, text))
            continue
        lines.append((e, f"Epoch {e}/{n_epochs}"))
        n = len(recs)
        secs = max(0, int(sum(r["step_time"] for r in recs)))
        if style == "keras2":
            bar = f"{n}/{per} [{'=' * 30 if n == per else '=' * (30 * n // per - 1) + '>' + '.' * (30 - 30 * n // per)}]"
            text = f"{bar} - {secs}s {ms:.0f}ms/step - loss: {_g(loss)}"
            if ev:
                text += f" - val_loss: {_g(ev['val_loss'])} - val_accuracy: {ev['val_acc']:.4f}"
        else:
            text = f"{n}/{per} {'━' * 20} {secs}s {ms:.0f}ms/step - loss: {_g(loss)}"
            if ev:
                text += f" - val_accuracy: {ev['val_acc']:.4f} - val_loss: {_g(ev['val_loss'])}"
        lines.append((e, text))
    lines += _tail(log, None)
    return lines


# --- DeepSpeed ----------------------------------------------------------------------------------

def _ds(at: float, where: str, text: str) -> str:
    return f"[{_stamp(at, ',')}] [INFO] [{where}] {text}"


def deepspeed(log: RunLog, every: int = 10) -> list[Line]:
    """The engine's lines at ``steps_per_print=every``: an OVERFLOW line on every skipped step, a
    ``log_dist`` progress line, a ThroughputTimer line and the pipeline engine's loss line."""
    cfg = log.config
    lines: list[Line] = [
        (HEAD, _ds(0.0, "logging.py:96:log_dist", "[Rank 0] DeepSpeed info: version=0.14.4, git-hash=unknown, "
                                                  "git-branch=unknown")),
        (HEAD, _ds(0.0, "config.py:1000:print", "DeepSpeedEngine configuration:")),
        (HEAD, _ds(0.0, "config.py:1004:print", f"  fp16_enabled ................. {bool(cfg.get('fp16'))}")),
        (HEAD, _ds(0.0, "config.py:1004:print", f"  steps_per_print .............. {every}")),
        (HEAD, _ds(0.0, "config.py:1004:print", f"  train_batch_size ............. {log.batch_size}")),
    ]
    skipped_total = 0
    window: list[dict[str, float]] = []
    samples = 0.0
    for rec in log.records:
        step = int(rec["step"])
        window.append(rec)
        if rec.get("skipped", 0.0) > 0:
            skipped_total += 1
            prev = rec["loss_scale"] * 2
            lines.append((step, _ds(rec["wall"], "loss_scaler.py:183:update_scale",
                                    f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {prev:g}, "
                                    f"reducing to {rec['loss_scale']:g}")))
        if step % every:
            continue
        t = float(np.mean([r["step_time"] for r in window]))
        samples = log.batch_size / t
        lines.append((step, _ds(rec["wall"], "logging.py:96:log_dist",
                                f"[Rank 0] step={step}, skipped={skipped_total}, lr=[{rec['lr']:g}], "
                                f"mom=[(0.9, 0.999)]")))
        mem = f", MemAllocated={rec['mem_allocated_mb'] / 1024:.2f}GB, MaxMemAllocated=" \
              f"{rec['mem_allocated_mb'] / 1024:.2f}GB" if "mem_allocated_mb" in rec else ""
        lines.append((step, _ds(rec["wall"], "timer.py:260:stop",
                                f"epoch=0/micro_step={step}/global_step={step}, RunningAvgSamplesPerSec={samples:.3f}, "
                                f"CurrSamplesPerSec={log.batch_size / rec['step_time']:.3f}{mem}")))
        kept = [r["loss"] for r in window if r.get("skipped", 0.0) == 0] or [r["loss"] for r in window]
        lines.append((step, f"steps: {step} loss: {_g(float(np.mean(kept)))} iter time (s): {t:.3f} "
                            f"samples/sec: {samples:.3f}"))
        window = []
    lines += _tail(log, None)
    return lines


# --- Megatron-LM --------------------------------------------------------------------------------

def megatron(log: RunLog, every: int = 1) -> list[Line]:
    log.config["log_interval"] = every
    lines: list[Line] = [(HEAD, t) for t in writers._megatron_header(log, 0.0)]
    lines += [(HEAD, f"[before the start of training step] datetime: {writers._stamp(0.0)} "), (HEAD, "training ...")]
    evals = evals_at(log)
    prev = 0
    for rec in aggregate(log, every):
        step = int(rec["step"])
        lines.append((step, writers._megatron_line(log, rec)))
        for ev in _evals_between(evals, prev, step):
            lines += [(step, t) for t in writers._megatron_eval(ev)]
        prev = step
    if log.completed and log.records:
        lines.append((TAIL, f"[after training is done] datetime: {writers._stamp(log.records[-1]['wall'])} "))
    lines += _tail(log, None)
    return lines


# --- shared -------------------------------------------------------------------------------------

def _stamp(seconds: float, sep: str = ",") -> str:
    t = writers.T0 + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%d %H:%M:%S") + f"{sep}{t.microsecond // 1000:03d}"


def _tail(log: RunLog, done: str | None) -> list[Line]:
    if log.traceback:
        return [(TAIL, t) for t in log.traceback.rstrip("\n").split("\n")]
    return [(TAIL, done)] if done and log.completed else []


Printer = Callable[..., list[Line]]
PRINTERS: dict[str, tuple[str, Printer, dict[str, Any]]] = {
    # name -> (framework id of the corpus, printer, its options)
    "plain-pipe": ("pytorch-loop", plain, {"style": "pipe"}),
    "plain-kv": ("pytorch-loop", plain, {"style": "kv"}),
    "plain-logging": ("pytorch-loop", plain, {"style": "logging"}),
    "plain-nanogpt": ("pytorch-loop", plain, {"style": "nanogpt"}),
    "plain-tqdm": ("pytorch-loop", tqdm_bar, {}),
    "plain-epochs": ("pytorch-loop", epochs, {"style": "plain"}),
    "keras2": ("keras", epochs, {"style": "keras2"}),
    "keras3": ("keras", epochs, {"style": "keras3"}),
    "deepspeed": ("deepspeed", deepspeed, {}),
    "megatron": ("megatron-lm", megatron, {}),
}
EPOCH_PRINTERS = ("plain-epochs", "keras2", "keras3")
