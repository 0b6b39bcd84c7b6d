"""Generate a realistic Megatron-LM stdout log of a given size (for the parse benchmark).

    python benchmarks/gen_megatron_log.py OUT.log --size 256M [--seed 0]

The layout follows Megatron-LM's ``training_log()`` (megatron/training/training.py):
an argument dump, timestamped iteration lines with the usual 13 numeric fields, every ~1000
iterations a ``report_memory`` line and a ``(min, max) time across ranks`` timer block, a
validation block, a few iterations whose NaN loss is omitted from the line (with ``grad norm:
nan``), and the end-of-training phase line. Output is deterministic for a given seed.

With ``--fail-from F`` the run breaks at that fraction of the file: from there on every iteration
line prints as Megatron prints a NaN iteration (``training_log()``: the loss is left out because
``avg > 0.0`` is false for NaN, ``grad norm: nan``, ``number of nan iterations: 1``) and the
skipped-iterations counter grows with every line (as forks that print it cumulatively do), so its
width outgrows the ``{:3d}`` padding.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import sys
from pathlib import Path
from typing import TextIO

TIMERS = ["forward-backward", "forward-compute", "backward-compute", "batch-generator", "layernorm-grads-all-reduce",
          "embedding-grads-all-reduce", "all-grads-sync", "optimizer-copy-to-main-grad", "optimizer-clip-main-grad",
          "optimizer-count-zeros", "optimizer-inner-step", "optimizer-copy-main-to-model-params", "optimizer"]


def flush(f: TextIO, buf: list[str]) -> tuple[int, int]:
    """Write the buffered lines (ASCII) and empty the buffer; (bytes, lines) written."""
    s = "".join(buf)
    f.write(s)
    buf.clear()
    return len(s), s.count("\n")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def header(train_iters: int) -> list[str]:
    args = {"train_iters": train_iters, "log_interval": 1, "seq_length": 4096, "global_batch_size": 128,
            "micro_batch_size": 1, "lr": 0.0003, "min_lr": 3e-05, "lr_warmup_iters": 2000, "clip_grad": 1.0,
            "bf16": True, "fp16": False, "vocab_size": None}
    out = ["using world size: 64, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 4, "
           "pipeline-model-parallel size: 2",
           "------------------------ arguments ------------------------"]
    for k, v in sorted(args.items()):
        out.append(f"  {k} {'.' * (48 - len(k))} {v}")
    out += ["-------------------- end of arguments ---------------------",
            " > padded vocab (size: 50257) with 175 dummy tokens (new size: 50432)",
            "[after model, optimizer, and learning rate scheduler are built] datetime: 2024-04-06 02:55:01 ",
            "[before the start of training step] datetime: 2024-04-06 02:55:02 "]
    return out


def generate(out: Path, size: int, seed: int = 0, fail_from: float | None = None) -> int:
    """Write about ``size`` bytes to ``out``; return the number of lines written. From
    ``fail_from`` (a fraction of ``size``) on, every iteration is a NaN iteration."""
    rng = random.Random(seed)
    gbs = 128
    # bytes per iteration (its line and its share of the memory, timer and validation blocks); a
    # NaN iteration's line is shorter (no loss fields)
    per_line = 395 if fail_from is None else 395 * fail_from + 352 * (1 - fail_from)
    train_iters = max(1000, int(size // per_line) + 10)
    t = dt.datetime(2024, 4, 6, 2, 55, 2)
    written = 0  # bytes flushed to the file
    pos = 0  # bytes of iterations generated (where the run breaks), the header's left out
    n_lines = 0
    buf: list[str] = []
    nan_iters = {int(train_iters * f) for f in (0.137, 0.52, 0.81)}
    fail_at = None if fail_from is None else int(size * fail_from)
    skipped = 0
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for ln in header(train_iters):
            buf.append(ln + "\n")
        it = 0
        loss = 10.8
        while written < size:
            it += 1
            start = len(buf)
            elapsed = rng.uniform(5200.0, 5800.0)
            t += dt.timedelta(milliseconds=elapsed)
            lr = 3e-4 * min(1.0, it / 2000) * (0.5 * (1 + math.cos(math.pi * min(it, train_iters) / train_iters)))
            loss = max(1.2, loss * 0.9995 + rng.gauss(0, 0.01))
            fields = [f" [{t:%Y-%m-%d %H:%M:%S}] iteration {it:8d}/{train_iters:8d} |",
                      f" consumed samples: {it * gbs:12d} |",
                      f" elapsed time per iteration (ms): {elapsed:.1f} |",
                      f" throughput per GPU (TFLOP/s/GPU): {rng.uniform(220.0, 245.0):.1f} |",
                      f" learning rate: {lr:.6E} |",
                      f" global batch size: {gbs:5d} |"]
            failing = fail_at is not None and pos >= fail_at
            nan = failing or it in nan_iters
            skipped += failing
            if not nan:  # Megatron drops a NaN loss from the line (``if avg >= 0.0``)
                fields.append(f" lm loss: {loss:.6E} |")
                fields.append(f" load_balancing_loss: {1.0 + rng.uniform(0, 0.03):.6E} |")
            fields += [" loss scale: 1.0 |",
                       f" grad norm: {'nan' if nan else format(rng.lognormvariate(0, 0.3), '.3f')} |",
                       " num zeros: 0.0 |",
                       f" number of skipped iterations: {skipped:3d} |",
                       f" number of nan iterations: {1 if nan else 0:3d} |"]
            buf.append("".join(fields) + "\n")
            if it % 1000 == 0:
                buf.append(f"[Rank 0] (after {it} iterations) memory (MB) | allocated: {rng.uniform(9000, 9100):.2f} | "
                           f"max allocated: 31456.21 | reserved: 33650.00 | max reserved: 33650.00\n")
                buf.append("(min, max) time across ranks (ms):\n")
                for name in TIMERS:
                    lo = rng.uniform(0.01, 5000.0)
                    buf.append(f"    {(name + ' ').ljust(48, '.')}: ({lo:.2f}, {lo * 1.01:.2f})\n")
            if it % 25000 == 0:
                dash = "-" * 100
                vl = loss + 0.05
                buf.append(f"{dash}\n validation loss at iteration {it} | lm loss value: {vl:.6E} | "
                           f"lm loss PPL: {math.exp(min(20, vl)):.6E} | \n{dash}\n")
            if fail_at is not None:
                pos += sum(len(b) for b in buf[start:])
            if len(buf) >= 4096:
                size_lines = flush(f, buf)
                written += size_lines[0]
                n_lines += size_lines[1]
        buf.append(f"[after training is done] datetime: {t:%Y-%m-%d %H:%M:%S} \n")
        n_lines += flush(f, buf)[1]
    return n_lines


def log_arguments(doc: str) -> argparse.ArgumentParser:
    """The arguments every log generator takes: where, how large, which seed."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="256M", help="target size, e.g. 256M, 1G")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str]) -> int:
    ap = log_arguments(__doc__)
    ap.add_argument("--fail-from", type=float, default=None, metavar="F",
                    help="fraction of the file after which every iteration is a NaN iteration (e.g. 0.5)")
    a = ap.parse_args(argv)
    n = generate(a.out, parse_size(a.size), a.seed, a.fail_from)
    print(f"{a.out}: {a.out.stat().st_size} bytes, {n} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
