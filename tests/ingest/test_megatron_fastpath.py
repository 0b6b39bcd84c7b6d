"""The bulk Megatron path gives exactly what the line path gives (series, line numbers, events, meta),
on the verbatim samples and on a generated messy log; and its number parser is bitwise ``float()``."""

from __future__ import annotations

import gzip
import json
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from shared_data import LOG_SAMPLES, REPO, sample_blocks

from trainaudit.ingest.fastnum import PAD, Layout, padded, parse_regions
from trainaudit.ingest.formats.megatron import bulk as megatron_fast
from trainaudit.ingest.formats.megatron.lines import MegatronReader
from trainaudit.ingest.sink import RunBuilder, StatsSink
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind, Run, Source


def read(path: Path, fast: bool, chunk_size: int | None = None, workers: int = 1) -> Run:
    inp = expand_inputs([str(path)])[0]
    builder = RunBuilder()
    builder.begin(Source(inp.display, "megatron"))
    MegatronReader(fast=fast, chunk_size=chunk_size, workers=workers).read(inp, builder)
    builder.end()
    return builder.build()


def assert_same(a: Run, b: Run) -> None:
    assert sorted(a.series) == sorted(b.series)
    for name, s in b.series.items():
        f = a.series[name]
        assert f.steps.tolist() == s.steps.tolist(), name
        assert f.lines.tolist() == s.lines.tolist(), name
        assert f.values.view(np.int64).tolist() == s.values.view(np.int64).tolist(), name  # bitwise
    assert [e.to_dict() for e in a.events] == [e.to_dict() for e in b.events]
    assert a.meta == b.meta


def iteration(it: int, rng: random.Random, loss: bool = True, prefix: str = " ", extra: str = "") -> str:
    fields = [f"{prefix}[2024-04-06 02:{it // 60 % 60:02d}:{it % 60:02d}] iteration {it:8d}/{9000:8d} |",
              f" consumed samples: {it * 128:12d} |", f" elapsed time per iteration (ms): {rng.uniform(10, 99999):.1f} |",
              f" learning rate: {rng.uniform(0, 1e-3):.6E} |", " global batch size:   128 |"]
    if loss:
        fields.append(f" lm loss: {rng.lognormvariate(0, 2):.6E} |")
    fields += [extra, " loss scale: 1.0 |", f" grad norm: {rng.lognormvariate(0, 3):.3f} |",
               " number of skipped iterations:   0 |", " number of nan iterations:   0 |"]
    return "".join(fields)


def messy_log(n: int, seed: int = 0, late_new_loss: bool = False) -> bytes:
    """Several thousand lines with every irregularity the line path handles."""
    rng = random.Random(seed)
    out: list[bytes] = [b"using world size: 8, data-parallel size: 8",
                        b"  train_iters ..................................... 9000",
                        b"[before the start of training step] datetime: 2024-04-06 02:55:02 "]
    for it in range(1, n + 1):
        if it % 997 == 0:
            out.append(iteration(it, rng, loss=False).encode())  # NaN loss omitted
        elif it % 501 == 0:
            out.append(iteration(it, rng, prefix="[rank3]:  ").encode())  # another rank, other layout
        elif it % 613 == 0:
            out.append(("\x1b[32m" + iteration(it, rng) + "\x1b[0m").encode())
        elif it % 677 == 0:
            out.append(iteration(it, rng).encode() + b"\r")  # CRLF line
        elif it % 733 == 0:
            out.append(iteration(it, rng).encode().replace(b"consumed", b"consum\xffed"))  # bad UTF-8
        elif it % 811 == 0:
            out.append(b"Epoch 1: 10%|#  | 1/10 [00:01<00:09]\r" + iteration(it, rng).encode())  # CR segments
        elif late_new_loss and it > n // 2:
            out.append(iteration(it, rng, extra=" z_loss: 1.000000E-03 |").encode())
        else:
            out.append(iteration(it, rng).encode())
        if it % 400 == 0:
            out.append(f"[Rank 0] (after {it} iterations) memory (MB) | allocated: {rng.uniform(1, 9e3):.2f} | "
                       f"max allocated: 31456.21 | reserved: 33650.00 | max reserved: 33650.00".encode())
            out.append(b"(min, max) time across ranks (ms):")
            out.append(b"    forward-backward ...............................: (1339.33, 1352.73)")
            out.append(b"")
        if it == n // 3:
            out += [b"Traceback (most recent call last):", b'  File "pretrain_gpt.py", line 10, in <module>',
                    b"RuntimeError: CUDA error: an illegal memory access was encountered"]
    out.append(b"[after training is done] datetime: 2024-04-06 09:01:02 ")
    out.append(iteration(n + 1, rng).encode()[:57])  # truncated last line, no newline
    return b"\n".join(out)


@pytest.mark.parametrize("name", ["megatron.txt", "megatron_deepspeed.txt"])
def test_fixture_blocks_fast_equals_line(tmp_path: Path, name: str) -> None:
    for i, lines in enumerate(sample_blocks(name).values()):
        log = tmp_path / f"{i}.log"
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
        assert_same(read(log, True), read(log, False))
    assert (LOG_SAMPLES / name).is_file()


def test_fast_path_really_takes_the_fixture_lines() -> None:
    block = sample_blocks("megatron.txt")
    lines = next(v for k, v in block.items() if "Megatron-LM/issues/756" in k)
    data = ("\n".join(lines) + "\n").encode()
    tpl = megatron_fast.find_template(data)
    assert tpl is not None and tpl.keys[0] == "consumed samples" and "lm loss" in tpl.loss_keys
    res = megatron_fast.parse_chunk(data, tpl)
    assert res.rows.tolist() == [0, 1, 2] and res.other == []
    assert res.steps.tolist() == [43, 44, 45]
    assert res.values[tpl.keys.index("lm loss")].tolist() == [1.825991, 1.875063, 1.834162]


@pytest.mark.parametrize("chunk_size", [4096, 65536, 1 << 24])
def test_generated_messy_log_fast_equals_line(tmp_path: Path, chunk_size: int) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(messy_log(5000))
    fast, line = read(log, True, chunk_size), read(log, False)
    assert_same(fast, line)
    # And it is the content we expect, not two equal empties.
    # Every iteration has a loss value: NaN for the 5 omitted ones and for the truncated last line.
    assert len(line.series["lm loss"]) == 5001
    assert int(np.isnan(line.series["lm loss"].values).sum()) == 6
    assert "lm loss@rank3" not in line.series  # rank 3 is the only ranked writer: it owns the name
    assert sum(e.kind is EventKind.MISSING_METRIC for e in line.events) == 6
    assert sum(e.kind is EventKind.PHASE for e in line.events) == 2
    assert len(line.series["mem allocated (MB)"]) == 12
    assert line.meta["world_size"] == 8 and line.meta["train_iters"] == 9000


def test_late_new_loss_key_falls_back_to_lines(tmp_path: Path) -> None:
    # A loss key appearing mid-run makes every later template line "missing" it: the fast path
    # must hand the rest of the file to the line path.
    log = tmp_path / "train.log"
    log.write_bytes(messy_log(3000, seed=2, late_new_loss=True))
    fast, line = read(log, True, 8192), read(log, False)
    assert_same(fast, line)
    assert len(line.series["z_loss"]) > 1000


def test_gzip_and_crlf_fast_equals_line(tmp_path: Path) -> None:
    raw = messy_log(2000, seed=3)
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(raw))
    assert_same(read(gz, True, 4096), read(gz, False))
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(raw.replace(b"\n", b"\r\n"))
    fast, line = read(crlf, True, 4096), read(crlf, False)
    assert_same(fast, line)
    assert len(line.series["lm loss"]) > 1900


def test_rank_prefixed_template(tmp_path: Path) -> None:
    rng = random.Random(5)
    lines = []
    for it in range(1, 600):
        rank = 7 if it % 3 else 2
        lines.append(iteration(it, rng, prefix=f"[rank{rank}]: ").encode())
    lines.insert(100, b"[default0]:" + iteration(1000, rng).encode())
    log = tmp_path / "ranks.log"
    log.write_bytes(b"\n".join(lines) + b"\n")
    fast, line = read(log, True, 4096), read(log, False)
    assert_same(fast, line)
    assert len(line.series["lm loss"]) == 400 and len(line.series["lm loss@rank2"]) == 199
    assert line.series["lm loss@rank0"].steps.tolist() == [1000]


def test_process_pool_equals_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(megatron_fast, "POOL_MIN_SIZE", 0)
    log = tmp_path / "train.log"
    log.write_bytes(messy_log(4000, seed=4))
    assert_same(read(log, True, 16384, workers=2), read(log, False))


LAYOUT_FORMATS = ["{:.6E}", "{:.3E}", "{:.3f}", "{:.1f}", "{:12d}", "{:5d}", "{:.2f}", "{:.6e}", "{}"]


@pytest.mark.parametrize("fmt", LAYOUT_FORMATS)
def test_vectorised_numbers_are_bitwise_float(fmt: str) -> None:
    rng = random.Random(fmt)
    texts = []
    for _ in range(20000):
        x = rng.choice([rng.uniform(-1e6, 1e6), rng.lognormvariate(0, 6), -rng.lognormvariate(0, 9), 0.0, -0.0,
                        rng.random() * 10 ** rng.randint(-25, 25), rng.random()])
        texts.append(fmt.format(int(x) if "d" in fmt else x))
    regions = [" " * rng.randint(1, 3) + t + " " for t in texts]
    data = "|".join(regions).encode()
    starts = np.cumsum([0] + [len(r) + 1 for r in regions[:-1]])
    ends = starts + np.array([len(r) for r in regions])
    vals, ok = parse_regions(padded(data), starts + PAD, ends + PAD, Layout.of(regions[0]))
    # Most rows take the vectorised path (repr's varying fraction length only partly fits one layout).
    assert ok.mean() > (0.2 if fmt == "{}" else 0.6)
    for t, v, good in zip(texts, vals.tolist(), ok.tolist()):
        if good:
            assert struct.pack("<d", v) == struct.pack("<d", float(t)), t


def test_vectorised_numbers_reject_what_float_would_not_parse_the_same() -> None:
    regions = [" 1.5E+00 ", " nan ", " 1.5E+0x ", " 1.5 E+00 ", " -1.5E+00 ", " 12345678901234567E+00 ", " 1.5E+99 "]
    data = "|".join(regions).encode()
    starts = np.cumsum([0] + [len(r) + 1 for r in regions[:-1]])
    ends = starts + np.array([len(r) for r in regions])
    vals, ok = parse_regions(padded(data), starts + PAD, ends + PAD, Layout.of(regions[0]))
    assert ok.tolist() == [True, False, False, False, True, False, False]
    assert vals[0] == 1.5 and vals[4] == -1.5


def generated(tmp_path: Path, size: str, fail_from: float | None, seed: int = 0) -> Path:
    """A log from the benchmark's generator (benchmarks/gen_megatron_log.py), small."""
    out = tmp_path / f"gen_{size}_{fail_from}_{seed}.log"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gen_megatron_log.py"), str(out), "--size", size,
           "--seed", str(seed)]
    if fail_from is not None:
        cmd += ["--fail-from", str(fail_from)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


@pytest.mark.parametrize("fail_from", [None, 0.5, 0.0, 0.93])
@pytest.mark.parametrize("chunk_size", [65536, 1 << 24])
def test_generated_failing_run_fast_equals_line(tmp_path: Path, fail_from: float | None, chunk_size: int) -> None:
    # A NaN run as Megatron prints it: no loss fields, ``grad norm: nan``, a skipped-iterations
    # counter outgrowing its padding. The bulk path reads it (no fallback) and gives the line path's run.
    log = generated(tmp_path, "1M", fail_from)
    fast, line = read(log, True, chunk_size), read(log, False)
    assert_same(fast, line)
    n_missing = sum(e.kind is EventKind.MISSING_METRIC for e in line.events)
    grad = line.series["grad norm"].values
    if fail_from is None:
        assert n_missing == 3  # the generator's three lone NaN iterations
    else:
        assert n_missing > 500 and int(np.isnan(grad).sum()) >= n_missing
        assert line.series["number of skipped iterations"].values.max() > 999  # wider than '{:3d}'


def test_generated_failing_run_in_the_pool_equals_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(megatron_fast, "POOL_MIN_SIZE", 0)
    log = generated(tmp_path, "1M", 0.4, seed=1)
    assert_same(read(log, True, 32768, workers=2), read(log, False))


def test_failing_lines_take_the_bulk_path(tmp_path: Path) -> None:
    data = generated(tmp_path, "1M", 0.5).read_bytes()
    tpl = megatron_fast.find_template(data[:1 << 20])
    assert tpl is not None and "lm loss" in tpl.loss_keys
    res = megatron_fast.parse_chunk(data, tpl)
    assert len(res.templates) == 2 and not res.templates[1].loss_keys
    assert res.templates[1].consts[res.templates[1].keys.index("grad norm")] == b"nan "
    n_iter = data.count(b"] iteration ")
    assert res.rows.shape[0] == n_iter  # every iteration line is a row; the other lines are memory/timers
    assert len(res.other) < n_iter // 50


def test_summary_counts_bulk_events_without_building_them(tmp_path: Path) -> None:
    log = generated(tmp_path, "1M", 0.5)
    stats = StatsSink()
    inp = expand_inputs([str(log)])[0]
    stats.begin(Source(inp.display, "megatron"))
    MegatronReader(chunk_size=65536, workers=1).read(inp, stats)
    stats.end()
    line = read(log, False)
    counts: dict[str, int] = {}
    for e in line.events:
        counts[e.kind.value] = counts.get(e.kind.value, 0) + 1
    assert stats.stats[-1].events == counts and stats.n_events == len(line.events)


def test_parse_to_jsonl_writes_every_bulk_event(tmp_path: Path) -> None:
    # With -o the summary sink must build the events it would only count otherwise.
    log = generated(tmp_path, "1M", 0.5)
    out = tmp_path / "rows.jsonl"
    subprocess.run([sys.executable, "-m", "trainaudit", "parse", "-q", str(log), "-o", str(out)], check=True,
                   capture_output=True)
    rows = [json.loads(ln) for ln in out.read_text(encoding="utf-8").splitlines()]
    events = [r for r in rows if r.get("event") == "missing_metric"]
    line = read(log, False)
    expected = [e for e in line.events if e.kind is EventKind.MISSING_METRIC]
    assert [(r["line"], r["step"], r["message"]) for r in events] == [(e.line, e.step, e.message) for e in expected]
    assert len(events) > 500
