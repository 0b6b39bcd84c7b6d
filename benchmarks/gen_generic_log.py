"""Generate a log of mixed generic training lines of a given size (for the extractor benchmark).

    python benchmarks/gen_generic_log.py OUT.log --size 1G [--seed 0]

No specific reader claims it: the lines are the spellings the format-agnostic extractor
(``trainaudit.ingest.extract``) reads, interleaved as a log of several tools would be, each with
its own numbers: ``iter N loss X``, MXNet's ``Epoch[N] Batch[M] Speed: ... samples/sec``, Caffe's
glog ``I0305 ... solver.cpp:218] Iteration N, loss = X``, Hugging Face's ``{'loss': ..}`` dicts,
JSON lines, tqdm bars, Markdown and whitespace-aligned tables under their headers, logging-module
lines, ``|``-separated fields, and noise (checkpoint messages, warnings, separators, prose with
numbers that are not metrics). Output is deterministic for a given seed.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

from gen_megatron_log import flush, log_arguments, parse_size

NOISE = [
    "Saving checkpoint to /checkpoints/run-{a}/step_{i}.pt",
    "Loading data shard {a} of 128 from /data/shards/part-{a:05d}.arrow",
    "WARNING: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly",
    "=" * 80,
    "Evaluating on 4096 examples with batch size 32",
    "Gradient accumulation steps = 8, total optimization steps = {i}",
    "Downloading: 100% 1.2k/1.2k [00:00<00:00, 512kB/s]",
    "",
]


def _lines(rng: random.Random) -> list[Callable[[int, float, dt.datetime], str]]:
    """One function a spelling: (iteration, loss, time) -> line."""

    def lr(i: int) -> float:
        return 3e-4 * min(1.0, i / 2000) * (0.5 * (1 + math.cos(math.pi * (i % 100000) / 100000)))

    def glog_time(t: dt.datetime) -> str:
        return f"I{t:%m%d %H:%M:%S}.{t.microsecond:06d}  4242"

    return [
        lambda i, x, t: f"iter {i} loss {x:.4f} lr {lr(i):.2e} time {rng.uniform(0.1, 0.9):.3f}s",
        lambda i, x, t: (f"Epoch[{i // 5000}] Batch[{i % 5000}] Speed: {rng.uniform(400, 600):.2f} samples/sec "
                         f"accuracy={rng.random():.6f} loss={x:.6f}"),
        lambda i, x, t: f"{glog_time(t)} solver.cpp:218] Iteration {i}, loss = {x:.5g}",
        lambda i, x, t: f"{glog_time(t)} solver.cpp:237]     Train net output #0: loss = {x:.5g} (* 1 = {x:.5g} loss)",
        lambda i, x, t: f"{{'loss': {x:.4f}, 'grad_norm': {rng.lognormvariate(0, 0.5):.6f}, "
                        f"'learning_rate': {lr(i):.4e}, 'epoch': {i / 5000:.2f}}}",
        lambda i, x, t: json.dumps({"step": i, "loss": round(x, 5), "lr": lr(i),
                                    "tokens_per_sec": round(rng.uniform(9e4, 1.1e5), 1)}),
        lambda i, x, t: (f"{100 * (i % 1000) // 1000:3d}%|{'#' * ((i % 1000) // 100):<10}| {i % 1000}/1000 "
                         f"[00:{i % 60:02d}<00:{59 - i % 60:02d}, {rng.uniform(40, 45):.2f}it/s, loss={x:.3g}]"),
        lambda i, x, t: f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - INFO - step {i}: train_loss={x:.4f}, "
                        f"val_acc={rng.random():.4f}",
        lambda i, x, t: (f"[{t:%Y-%m-%d %H:%M:%S}] epoch {i // 5000} | step {i} | loss {x:.4f} | "
                         f"grad_norm {rng.lognormvariate(0, 0.5):.3f} | lr {lr(i):.1e}"),
        lambda i, x, t: f"| {i:6d} | {x:.4f} | {rng.random():.4f} |",
        lambda i, x, t: f"{i:8d}    {x:10.5f}    {rng.uniform(0, 100):8.3f}",
    ]


HEADERS = {9: "| step | loss | accuracy |", 10: "    step          loss      tok/s"}


def generate(out: Path, size: int, seed: int = 0) -> int:
    """Write about ``size`` bytes to ``out``; return the number of lines written."""
    rng = random.Random(seed)
    spellings = _lines(rng)
    t = dt.datetime(2024, 3, 5, 10, 11, 12)
    written = 0
    n_lines = 0
    buf: list[str] = []
    loss = 10.8
    i = 0
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        while written < size:
            i += 1
            t += dt.timedelta(milliseconds=rng.uniform(200, 900))
            loss = max(0.5, loss * 0.9999 + rng.gauss(0, 0.01))
            k = rng.randrange(len(spellings))
            if k in HEADERS and rng.random() < 0.02:
                buf.append(HEADERS[k] + "\n")
            buf.append(spellings[k](i, loss, t) + "\n")
            if rng.random() < 0.08:
                buf.append(rng.choice(NOISE).format(i=i, a=rng.randrange(128)) + "\n")
            if len(buf) >= 4096:
                size_lines = flush(f, buf)
                written += size_lines[0]
                n_lines += size_lines[1]
        n_lines += flush(f, buf)[1]
    return n_lines


def main(argv: list[str]) -> int:
    a = log_arguments(__doc__).parse_args(argv)
    n = generate(a.out, parse_size(a.size), a.seed)
    print(f"{a.out}: {a.out.stat().st_size} bytes, {n} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
