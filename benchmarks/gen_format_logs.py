"""Generate realistic training logs of one framework's format and a given size (for bench_formats.py).

    python benchmarks/gen_format_logs.py FORMAT OUT.log --size 100M [--seed 0] [--fail-from F]
    python benchmarks/gen_format_logs.py ranks OUTDIR --size 10M --ranks 512 [--fail-rank R]

FORMAT is one of: hf, lightning, keras, deepspeed, torchtitan, torchrun, megatron, generic. The line
shapes follow the verbatim samples in tests/fixtures/formats/<format>/ and what each library writes
into a file (not a terminal):

* ``hf``: the HF Trainer's tqdm bar redrawn with ``\\r`` every optimizer step, cleared by
  ``tqdm.write`` (``\\r<blanks>\\r``) before each logs dict ``{'loss': .., 'grad_norm': ..,
  'learning_rate': .., 'epoch': ..}``; an evaluation bar and an ``eval_`` dict every 500 steps.
* ``lightning``: ``Epoch N:  42%|████▏     | 420/1000 [00:15<00:21, 27.70it/s, v_num=3, train_loss=2.31]``
  redrawn with ``\\r`` every step, one physical line per epoch, a ``Validation DataLoader 0`` bar
  at the end of each epoch.
* ``keras``: ``Epoch 3/10`` headers and tf.keras's ``Progbar``: ``\\b`` times the previous width,
  ``\\r`` and the bar ``37/120 [========>.....] - ETA: 1s - loss: 0.4127 - accuracy: 0.8731`` for every
  batch, the epoch's final ``120/120 [====] - 2s 10ms/step - loss: .. - val_loss: ..``.
* ``deepspeed``: DeepSpeed engine lines inside an HF Trainer log: ``[INFO] [logging.py:96:log_dist]
  [Rank 0] step=N, skipped=K, lr=[..], mom=[..]``, ThroughputTimer lines, the logs dicts, fp16
  ``OVERFLOW!`` lines now and then.
* ``torchtitan``: ``[titan] <time> - root - INFO - step: N  loss: X  grad_norm: ..  memory: ..GiB(..%)
  tps: 7,282  tflops: ..  mfu: ..%`` with the ANSI colours torchtitan prints into files.
* ``torchrun``: rank-prefixed lines of ``torchrun --tee 3``: ``[rank3]:[titan] ...`` metric lines
  of 8 ranks interleaved, with ``[rank3]:`` warnings.
* ``megatron`` and ``generic``: gen_megatron_log.py and gen_generic_log.py.

``--fail-from F``: from the fraction F of the file on the run is broken (losses and grad norms print
NaN, DeepSpeed overflows every step), and the log ends with a Python traceback.

``ranks``: a directory of per-rank logs (``rank_000.log`` ...): Megatron iteration lines prefixed
``[rankN]:`` (as torchrun ``--tee`` writes them) for even ranks, torchtitan lines for odd ones; at
the end rank ``--fail-rank`` dies with a CUDA out-of-memory traceback and every other rank reports a
NCCL watchdog timeout. Output is deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from gen_megatron_log import parse_size

BLOCKS = " ▏▎▍▌▋▊▉█"
ANSI_GREEN, ANSI_RESET = "\x1b[32m", "\x1b[39m"


def traceback_lines(error: str, where: str = "train.py") -> list[str]:
    return ["Traceback (most recent call last):",
            f'  File "/workspace/{where}", line 212, in <module>',
            "    main()",
            f'  File "/workspace/{where}", line 198, in main',
            "    trainer.train()",
            '  File "/opt/conda/lib/python3.10/site-packages/torch/_tensor.py", line 522, in backward',
            "    torch.autograd.backward(",
            error]


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.11 GiB of which 1.19 GiB is free. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.38 GiB "
       "is reserved by PyTorch but unallocated.")
NAN_ERROR = "RuntimeError: Function 'MulBackward0' returned nan values in its 0th output."


class Run:
    """A healthy-then-maybe-broken training run: loss, lr and grad norm by step."""

    def __init__(self, rng: random.Random, steps: int, fail_step: int | None) -> None:
        self.rng, self.steps, self.fail_step = rng, steps, fail_step
        self.loss = 10.8

    def failing(self, step: int) -> bool:
        return self.fail_step is not None and step >= self.fail_step

    def lr(self, step: int) -> float:
        return 3e-4 * min(1.0, step / 200) * 0.5 * (1 + math.cos(math.pi * min(step, self.steps) / self.steps))

    def next_loss(self, step: int) -> float:
        self.loss = max(0.8, self.loss * 0.9995 + self.rng.gauss(0, 0.01))
        return math.nan if self.failing(step) else self.loss

    def grad_norm(self, step: int) -> float:
        return math.nan if self.failing(step) else self.rng.lognormvariate(0, 0.3)


def tqdm_bar(n: int, total: int, rate: float, prefix: str = "", postfix: str = "", width: int = 10) -> str:
    frac = n / total
    full, part = divmod(int(frac * width * 8), 8)
    bar = ("█" * full + (BLOCKS[part] if full < width else "")).ljust(width)
    tail = f", {postfix}" if postfix else ""
    return (f"{prefix}{int(frac * 100):3d}%|{bar}| {n}/{total} [{_clock(n / rate)}<{_clock((total - n) / rate)}, "
            f"{rate:5.2f}it/s{tail}]")


def _clock(seconds: float) -> str:
    """tqdm's format_interval: [H:]MM:SS."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _hf_lines(rng: random.Random, run: Run, deepspeed: bool) -> Iterator[str]:
    """Physical lines (without newline) of an HF Trainer stdout, optionally with DeepSpeed's lines."""
    total = run.steps
    t = dt.datetime(2024, 5, 2, 9, 14, 3)
    if deepspeed:
        yield "[2024-05-02 09:13:58,417] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda"
        yield "[2024-05-02 09:14:01,902] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2"
    yield "***** Running training *****"
    yield f"  Num examples = {total * 32:,}"
    yield f"  Total optimization steps = {total:,}"
    bar: list[str] = []
    scale = 65536.0
    skipped = 0
    for step in range(1, total + 1):
        t += dt.timedelta(milliseconds=rng.uniform(380, 420))
        loss, gn = run.next_loss(step), run.grad_norm(step)
        bar.append("\r" + tqdm_bar(step, total, rng.uniform(2.3, 2.6)))
        if deepspeed and (run.failing(step) or rng.random() < 0.002):
            skipped += 1
            ts = f"[{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}]"
            bar.append(f"{ts} [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                       f"Attempted loss scale: {scale:g}, reducing to {max(1.0, scale / 2):g}")
            yield "".join(bar)
            bar = []
            scale = max(1.0, scale / 2)
        if deepspeed and step % 10 == 0:
            ts = f"[{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}]"
            yield "".join(bar) + (f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped={skipped}, "
                                  f"lr=[{run.lr(step):.15g}], mom=[(0.9, 0.95)]")
            yield (f"{ts} [INFO] [timer.py:260:stop] epoch=0/micro_step={step * 4}/global_step={step}, "
                   f"RunningAvgSamplesPerSec={rng.uniform(80, 84):.14g}, CurrSamplesPerSec={rng.uniform(78, 86):.14g}, "
                   f"MemAllocated=17.52GB, MaxMemAllocated=31.4GB")
            bar = []
        if step % 10 == 0:
            clear = "\r" + " " * 80 + "\r"
            yield "".join(bar) + clear + (f"{{'loss': {loss:.4f}, 'grad_norm': {gn!r}, 'learning_rate': "
                                          f"{run.lr(step)!r}, 'epoch': {step / (total / 3):.2f}}}")
            bar = []
        if step % 500 == 0:
            ev = "".join("\r" + tqdm_bar(k, 50, rng.uniform(11, 12)) for k in range(1, 51))
            yield "".join(bar) + ev + "\r" + " " * 80 + "\r" + (
                f"{{'eval_loss': {loss + 0.05:.16g}, 'eval_runtime': {rng.uniform(4, 5):.4f}, "
                f"'eval_samples_per_second': {rng.uniform(90, 99):.3f}, 'eval_steps_per_second': "
                f"{rng.uniform(11, 12):.3f}, 'epoch': {step / (total / 3):.2f}}}")
            bar = []
    yield "".join(bar) + f"\r{{'train_runtime': {total * 0.4:.4f}, 'train_samples_per_second': 80.12, " \
                         f"'train_steps_per_second': 2.504, 'train_loss': {run.loss:.16g}, 'epoch': 3.0}}"


def _lightning_lines(rng: random.Random, run: Run) -> Iterator[str]:
    per_epoch = 1000
    epochs = max(1, run.steps // per_epoch)
    yield "GPU available: True (cuda), used: True"
    yield "  | Name  | Type             | Params"
    yield "0 | model | GPT              | 124 M"
    for epoch in range(epochs):
        parts = []
        for n in range(1, per_epoch + 1):
            step = epoch * per_epoch + n
            loss = run.next_loss(step)
            parts.append("\r" + tqdm_bar(n, per_epoch, rng.uniform(27, 28), prefix=f"Epoch {epoch}: ",
                                         postfix=f"v_num=3, train_loss={loss:.3g}"))
        parts += ["\r" + tqdm_bar(k, 157, rng.uniform(37, 38), prefix="Validation DataLoader 0: ") for k in range(0, 158, 4)]
        yield "".join(parts)


def _keras_lines(rng: random.Random, run: Run) -> Iterator[str]:
    per_epoch = 120
    epochs = max(1, run.steps // per_epoch)
    yield "Model: \"sequential\""
    for epoch in range(1, epochs + 1):
        yield f"Epoch {epoch}/{epochs}"
        parts: list[str] = []
        prev = 0
        acc = 0.0
        for n in range(1, per_epoch + 1):
            step = (epoch - 1) * per_epoch + n
            loss = run.next_loss(step)
            acc = min(0.99, 0.5 + 0.4 * (1 - math.exp(-step / 5000)) + rng.gauss(0, 0.01))
            done = int(30 * n / per_epoch)
            bar = "=" * max(0, done - 1) + (">" if n < per_epoch else "=") + "." * (30 - done)
            if n < per_epoch:
                text = f"{n:3d}/{per_epoch} [{bar}] - ETA: {(per_epoch - n) // 50}s - loss: {loss:.4f} - accuracy: {acc:.4f}"
            else:
                text = (f"{n}/{per_epoch} [{bar}] - 2s 10ms/step - loss: {loss:.4f} - accuracy: {acc:.4f} - "
                        f"val_loss: {loss + 0.03:.4f} - val_accuracy: {acc - 0.01:.4f}")
            parts.append("\b" * prev + "\r" + text)
            prev = len(text)
        yield "".join(parts)


def _titan_line(t: dt.datetime, step: int, loss: float, gn: float, rng: random.Random, color: bool = True) -> str:
    g, r = (ANSI_GREEN, ANSI_RESET) if color else ("", "")
    return (f"[titan] {t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - root - INFO - {g}step: {step:2d}  "
            f"loss: {loss:8.5f}  grad_norm: {gn:7.4f}  memory: 66.91GiB(37.51%)  tps: {rng.randrange(9900, 10100):,}  "
            f"tflops: {rng.uniform(310, 316):.2f}  mfu: {rng.uniform(13.8, 14.1):.2f}%{r}")


def _torchtitan_lines(rng: random.Random, run: Run) -> Iterator[str]:
    t = dt.datetime(2026, 2, 24, 19, 46, 10)
    yield f"[titan] {t:%Y-%m-%d %H:%M:%S},000 - root - INFO - Starting job: Llama 3 8B training"
    for step in range(1, run.steps + 1):
        t += dt.timedelta(milliseconds=rng.uniform(1600, 1700))
        yield _titan_line(t, step, run.next_loss(step), run.grad_norm(step), rng)
        if step % 500 == 0:
            yield (f"[titan] {t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - root - INFO - "
                   f"Saving the checkpoint (or staging if async is enabled).")


def _torchrun_lines(rng: random.Random, run: Run) -> Iterator[str]:
    t = dt.datetime(2026, 2, 24, 19, 46, 10)
    ranks = 8
    yield "W0224 19:46:09.113000 1234 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable"
    for step in range(1, run.steps + 1):
        t += dt.timedelta(milliseconds=rng.uniform(1600, 1700))
        loss, gn = run.next_loss(step), run.grad_norm(step)
        for r in range(ranks):
            yield f"[rank{r}]:" + _titan_line(t, step, loss, gn, rng, color=False)
        if step % 1000 == 0:
            yield (f"[rank{rng.randrange(ranks)}]:/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:"
                   "1399: FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated.")


FORMATS: dict[str, tuple[int, Callable[[random.Random, Run], Iterator[str]]]] = {
    # bytes per step (to size the run), the line source
    "hf": (110, lambda rng, run: _hf_lines(rng, run, deepspeed=False)),
    "deepspeed": (170, lambda rng, run: _hf_lines(rng, run, deepspeed=True)),
    "lightning": (100, _lightning_lines),
    "keras": (190, _keras_lines),
    "torchtitan": (180, _torchtitan_lines),
    "torchrun": (8 * 170, _torchrun_lines),
}
NAMES = sorted([*FORMATS, "megatron", "generic"])


def generate(fmt: str, out: Path, size: int, seed: int = 0, fail_from: float | None = None) -> int:
    """Write about ``size`` bytes of ``fmt`` to ``out``; return the number of physical lines."""
    if fmt == "megatron":
        from gen_megatron_log import generate as megatron
        return megatron(out, size, seed, fail_from)
    if fmt == "generic":
        from gen_generic_log import generate as generic
        return generic(out, size, seed)
    per_step, source = FORMATS[fmt]
    rng = random.Random(seed)
    steps = max(1000, 2 * size // per_step + 1000)
    run = Run(rng, steps, None)
    written = lines = pending = 0
    buf: list[str] = []
    failed = False
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for line in source(rng, run):
            buf.append(line + "\n")
            pending += len(line) + 1
            if pending >= 1 << 20:  # characters; the bytes are counted when written
                s = "".join(buf)
                f.write(s)
                written += len(s.encode())
                lines += len(buf)
                buf.clear()
                pending = 0
                if fail_from is not None and run.fail_step is None and written >= fail_from * size:
                    run.fail_step = 0  # every step from here on
                if written >= size:
                    failed = run.fail_step is not None
                    break
        if fail_from is not None:
            buf += [ln + "\n" for ln in traceback_lines(NAN_ERROR if failed else OOM)]
        f.write("".join(buf))
        lines += len(buf)
    return lines


def rank_logs(out: Path, size: int, ranks: int, fail_rank: int, seed: int = 0) -> None:
    """A directory of per-rank logs; rank ``fail_rank`` dies first, the others time out after it."""
    out.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        rng = random.Random(seed * 100003 + r)
        t = dt.datetime(2024, 4, 6, 2, 55, 2)
        p = f"[rank{r}]:"
        buf: list[str] = []
        written = 0
        it = 0
        loss = 10.8
        with open(out / f"rank_{r:03d}.log", "w", encoding="utf-8", newline="\n") as f:
            while written < size:
                it += 1
                t += dt.timedelta(milliseconds=rng.uniform(5200, 5800))
                loss = max(1.2, loss * 0.9995 + rng.gauss(0, 0.01))
                if r % 2 == 0:
                    buf.append(f"{p} [{t:%Y-%m-%d %H:%M:%S}] iteration {it:8d}/ 1000000 | consumed samples: "
                               f"{it * 128:12d} | elapsed time per iteration (ms): {rng.uniform(5200, 5800):.1f} | "
                               f"learning rate: {3e-4:.6E} | global batch size:   128 | lm loss: {loss:.6E} | "
                               f"loss scale: 1.0 | grad norm: {rng.lognormvariate(0, 0.3):.3f} | number of skipped "
                               "iterations:   0 | number of nan iterations:   0 |\n")
                else:
                    buf.append(p + _titan_line(t, it, loss, rng.lognormvariate(0, 0.3), rng, color=False) + "\n")
                if len(buf) >= 2048:
                    s = "".join(buf)
                    f.write(s)
                    written += len(s)
                    buf.clear()
            t += dt.timedelta(seconds=1 if r == fail_rank else 600)
            if r == fail_rank:
                buf += [p + ln + "\n" for ln in traceback_lines(OOM)]
            else:
                buf.append(f"{p}[E{t:%m%d %H:%M:%S}.123456 4242 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
                           f"collective operation timeout: WorkNCCL(SeqNum={it}, OpType=ALLREDUCE, NumelIn=1, "
                           "NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n")
            f.write("".join(buf))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("format", choices=[*NAMES, "ranks"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="100M", help="target size (per rank for `ranks`), e.g. 100M, 1G")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fail-from", type=float, default=None, metavar="F",
                    help="fraction of the file after which the run is broken (NaN), ending in a traceback")
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--fail-rank", type=int, default=None, help="the rank that fails first (default: ranks // 3)")
    a = ap.parse_args(argv)
    if a.format == "ranks":
        rank_logs(a.out, parse_size(a.size), a.ranks, a.ranks // 3 if a.fail_rank is None else a.fail_rank, a.seed)
        print(f"{a.out}: {a.ranks} rank logs", file=sys.stderr)
        return 0
    n = generate(a.format, a.out, parse_size(a.size), a.seed, a.fail_from)
    print(f"{a.out}: {a.out.stat().st_size} bytes, {n} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
