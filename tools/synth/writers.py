"""Turn a :class:`RunLog` into the files real frameworks write.

- ``metrics.jsonl``: flat dicts, one per logged step (``{"step", "loss", "grad_norm", "lr",
  "step_time", ...}``), eval results as their own ``{"step", "val_loss"}`` lines.
- ``train.log`` (style ``megatron``): Megatron-LM ``training_log`` lines, field order and number
  formats as in ``megatron/training/training.py``:
  a NaN or negative loss is left out of the line, a skipped fp16 iteration prints the interval
  average over zero advanced iterations (0.0) and no grad norm, validation blocks between dashes.
- ``stdout.log`` (style ``hf``): the HF Trainer's printed log dicts (4.x era: loss rounded to 4
  places, epoch to 2); with ``logging_nan_inf_filter`` (the default) a NaN/Inf step loss is
  replaced by the running average of the interval, which with ``logging_steps=1`` is 0.0, while
  ``grad_norm`` still shows ``nan``.
- ``tb/``: a TensorBoard event file written by ``torch.utils.tensorboard.SummaryWriter`` with the
  framework's tag names (a restarted run gets a second event file, as a new process would).
- ``stderr.log``: the formatted traceback of the exception that ended the run.

Timestamps start at a fixed date and advance by the measured wall time of the run.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from synth.runlog import RunLog

T0 = datetime(2026, 3, 2, 9, 0, 0)
HF_STEPS_PER_EPOCH = 64  # 4096 training samples / batch 64


def _stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f")


def _is_skipped(rec: dict[str, float]) -> bool:
    return rec.get("skipped", 0.0) > 0


# --- JSONL --------------------------------------------------------------------------------------

JSONL_KEYS = ("loss", "grad_norm", "lr", "step_time", "loss_scale", "rss_mb")


def write_jsonl(log: RunLog, path: Path) -> list[str]:
    """Returns the metric names written."""
    step_key = log.step_unit
    names: set[str] = set()
    evals = _evals_by_step(log)
    with path.open("w", encoding="utf-8") as fh:
        for rec in log.records:
            row: dict[str, Any] = {step_key: int(rec["step"])}
            for key, value in rec.items():
                if key in JSONL_KEYS or key.startswith("grad_norm_"):
                    row[key] = value
            names.update(k for k in row if k != step_key)
            fh.write(json.dumps(row) + "\n")
            for ev in evals.pop(int(rec["step"]), []):
                erow = {step_key: int(ev["step"]), **{k: v for k, v in ev.items() if k not in ("step", "wall")}}
                names.update(k for k in erow if k != step_key)
                fh.write(json.dumps(erow) + "\n")
    return sorted(names)


def _evals_by_step(log: RunLog) -> dict[int, list[dict[str, float]]]:
    out: dict[int, list[dict[str, float]]] = {}
    for ev in log.evals:
        out.setdefault(int(ev["step"]), []).append(ev)
    return out


# --- Megatron-LM stdout -------------------------------------------------------------------------

def _megatron_header(log: RunLog, at: float) -> list[str]:
    cfg = log.config
    args = {
        "clip_grad": cfg.get("clip_grad", 0.0),
        "fp16": bool(cfg.get("fp16", False)),
        "global_batch_size": log.batch_size,
        "log_interval": cfg.get("log_interval", 1),
        "lr": cfg.get("lr"),
        "micro_batch_size": log.batch_size,
        "seq_length": cfg.get("seq_length", 1),
        "train_iters": log.total_steps,
    }
    world = int(cfg.get("world_size", 1))
    lines = [f"using world size: {world}, data-parallel size: {world}, context-parallel size: 1, "
             "tensor-model-parallel size: 1, pipeline-model-parallel size: 1",
             "------------------------ arguments ------------------------"]
    for key, value in sorted(args.items()):
        lines.append(f"  {key} {'.' * (48 - len(key))} {value}")
    lines.append("-------------------- end of arguments ---------------------")
    if "vocab_size" in cfg:
        v = int(cfg["vocab_size"])
        padded = -(-v // 128) * 128
        lines.append(f" > padded vocab (size: {v}) with {padded - v} dummy tokens (new size: {padded})")
    lines.append(f"[after model, optimizer, and learning rate scheduler are built] datetime: {_stamp(at)} ")
    return lines


def _megatron_line(log: RunLog, rec: dict[str, float]) -> str:
    step = int(rec["step"])
    skipped = _is_skipped(rec)
    loss = rec["loss"]
    parts = [f" [{_stamp(rec['wall'])}] iteration {step:8d}/{log.total_steps:8d} |",
             f" consumed samples: {step * log.batch_size:12d} |",
             f" elapsed time per iteration (ms): {rec['step_time'] * 1000.0:.1f} |",
             f" learning rate: {rec['lr']:.6E} |",
             f" global batch size: {log.batch_size:5d} |"]
    # Average over the interval's advanced iterations: none advanced when every step was skipped.
    n_skipped = int(rec.get("skipped", 0.0))
    avg = 0.0 if skipped and n_skipped >= rec.get("interval", 1) else loss
    if avg >= 0.0:  # False for NaN: Megatron drops the field
        parts.append(f" lm loss: {avg:.6E} |")
    parts.append(f" loss scale: {rec.get('loss_scale', 1.0):.1f} |")
    if not skipped or n_skipped < rec.get("interval", 1):  # no grad norm when the last step was skipped
        parts.append(f" grad norm: {rec['grad_norm']:.3f} |")
    got_nan = int(rec["nan_iterations"]) if "nan_iterations" in rec else int(skipped and not math.isfinite(loss))
    parts.append(f" number of skipped iterations: {n_skipped:3d} |")
    parts.append(f" number of nan iterations: {got_nan:3d} |")
    return "".join(parts)


def _megatron_eval(ev: dict[str, float]) -> list[str]:
    loss = ev["val_loss"]
    text = (f" validation loss at iteration {int(ev['step'])} | lm loss value: {loss:.6E} | "
            f"lm loss PPL: {math.exp(min(20.0, loss)):.6E} | ")
    dashes = "-" * (len(text) + 1)
    return [dashes, text, dashes]


def write_megatron(log: RunLog, path: Path) -> list[str]:
    evals = _evals_by_step(log)
    markers = {}
    for m in log.markers:
        markers.setdefault(m.after_record, []).append(m)
    lines = _megatron_header(log, 0.0)
    lines += [f"[before the start of training step] datetime: {_stamp(0.0)} ", "training ..."]
    for i, rec in enumerate(log.records):
        for m in markers.get(i, []):
            lines += _megatron_marker(log, m, rec)
        lines.append(_megatron_line(log, rec))
        for ev in evals.pop(int(rec["step"]), []):
            lines += _megatron_eval(ev)
    for m in markers.get(len(log.records), []):
        lines += _megatron_marker(log, m, log.records[-1])
    if log.completed and log.records:
        lines.append(f"[after training is done] datetime: {_stamp(log.records[-1]['wall'])} ")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    names = ["lm loss", "learning rate", "grad norm", "loss scale", "elapsed time per iteration (ms)",
             "consumed samples", "global batch size", "number of skipped iterations", "number of nan iterations"]
    return names


def _megatron_marker(log: RunLog, m: Any, rec: dict[str, float]) -> list[str]:
    it = int(m.data.get("iteration", 0))
    if m.kind == "save":
        return [f"saving checkpoint at iteration {it:7d} to checkpoints in torch_dist format",
                f"  successfully saved checkpoint from iteration {it:7d} to checkpoints [ t 1/1, p 1/1 ]"]
    if m.kind == "restart":  # a new process: arguments again, then the checkpoint load
        at = rec["wall"]
        return (_megatron_header(log, at)
                + [f" loading checkpoint from checkpoints at iteration {it}",
                   f"  successfully loaded checkpoint from checkpoints [ t 1/1, p 1/1 ] at iteration {it}",
                   f"[before the start of training step] datetime: {_stamp(at)} ", "training ..."])
    return []


# --- HF Trainer stdout --------------------------------------------------------------------------

def _hf_repr(d: dict[str, Any]) -> str:
    # The Trainer prints str(dict): Python float repr, bare nan/inf.
    return "{" + ", ".join(f"'{k}': {v!r}" for k, v in d.items()) + "}"


def write_hf(log: RunLog, path: Path) -> list[str]:
    evals = _evals_by_step(log)
    lines: list[str] = []
    names: set[str] = set()
    per_epoch = log.step_unit == "epoch"
    finite_losses: list[float] = []
    for rec in log.records:
        step = int(rec["step"])
        loss = rec["loss"]
        # logging_nan_inf_filter with logging_steps=1: tr_loss (0 after the last log) + tr_loss / 1
        shown = round(loss, 4) if math.isfinite(loss) else 0.0
        if math.isfinite(loss):
            finite_losses.append(loss)
        epoch = float(step) if per_epoch else round(step / HF_STEPS_PER_EPOCH, 2)
        d: dict[str, Any] = {"loss": shown, "grad_norm": rec["grad_norm"], "learning_rate": rec["lr"]}
        for key, value in rec.items():
            if key.startswith("grad_norm_") or key == "rss_mb":
                d[key] = value
        d["epoch"] = epoch
        names.update(k for k in d)
        lines.append(_hf_repr(d))
        for ev in evals.pop(step, []):
            runtime = round(ev.get("eval_time", 0.01), 4)
            e = {"eval_loss": ev["val_loss"], "eval_runtime": runtime,
                 "eval_samples_per_second": round(ev.get("eval_samples", 1000) / max(runtime, 1e-4), 3),
                 "eval_steps_per_second": round(ev.get("eval_batches", 4) / max(runtime, 1e-4), 3), "epoch": epoch}
            names.update(e)
            lines.append(_hf_repr(e))
    if log.completed and log.records:
        runtime = round(log.records[-1]["wall"], 4)
        n = len(log.records)
        lines.append(_hf_repr({"train_runtime": runtime,
                               "train_samples_per_second": round(n * log.batch_size / max(runtime, 1e-4), 3),
                               "train_steps_per_second": round(n / max(runtime, 1e-4), 3),
                               "train_loss": sum(finite_losses) / max(1, len(finite_losses)),
                               "epoch": float(log.records[-1]["step"]) if per_epoch
                               else round(log.records[-1]["step"] / HF_STEPS_PER_EPOCH, 2)}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return sorted(names)


# --- TensorBoard --------------------------------------------------------------------------------

MEGATRON_TAGS = {"loss": "lm loss", "lr": "learning-rate", "grad_norm": "grad-norm", "loss_scale": "loss-scale",
                 "step_time": "iteration-time"}
HF_TAGS = {"loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm"}


def write_tensorboard(log: RunLog, tb_dir: Path, style: str) -> list[str]:
    from torch.utils.tensorboard import SummaryWriter

    tb_dir.mkdir(parents=True, exist_ok=True)
    restarts = sorted(m.after_record for m in log.markers if m.kind == "restart")
    names: set[str] = set()
    writer = SummaryWriter(str(tb_dir))
    first_of_process = True
    evals = _evals_by_step(log)
    try:
        for i, rec in enumerate(log.records):
            if i in restarts:
                writer.close()
                writer = SummaryWriter(str(tb_dir), filename_suffix=f".restart{restarts.index(i) + 1}")
                first_of_process = True
            step = int(rec["step"])
            for tag, value in _tb_scalars(rec, style, first_of_process, log.step_unit):
                writer.add_scalar(tag, value, step)
                names.add(tag)
            first_of_process = False
            for ev in evals.pop(step, []):
                tag = "lm loss validation" if style == "megatron" else "eval/loss"
                writer.add_scalar(tag, ev["val_loss"], step)
                names.add(tag)
    finally:
        writer.close()
    return sorted(names)


def _tb_scalars(rec: dict[str, float], style: str, first: bool, unit: str) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    if style == "megatron":
        for key, tag in MEGATRON_TAGS.items():
            if key not in rec or (key == "step_time" and first):  # no iteration-time on a process's 1st step
                continue
            if key == "grad_norm" and _is_skipped(rec):
                continue
            out.append((tag, rec[key]))
        return out
    loss = rec["loss"]
    out.append(("train/loss", round(loss, 4) if math.isfinite(loss) else 0.0))  # the same filtered logs dict
    for key in ("grad_norm", "lr"):
        out.append((HF_TAGS[key], rec[key]))
    for key, value in rec.items():
        if key.startswith("grad_norm_") or key == "rss_mb":
            out.append((f"train/{key}", value))
    out.append(("train/epoch", rec["step"] if unit == "epoch" else round(rec["step"] / HF_STEPS_PER_EPOCH, 2)))
    return out


def write_stderr(log: RunLog, path: Path) -> bool:
    if not log.traceback:
        return False
    path.write_text(log.traceback, encoding="utf-8")
    return True
