"""A line format with a gate (``LineReader.gate``) reads only the lines its gate or the signature
scanner's literals find, and gives exactly what it gives reading every line: the same series
(steps, values bitwise, lines), events and metadata. Checked on the benchmark's generated logs of
each gated format, healthy and failing (NaN from a point on, then a traceback), with small blocks
so block edges fall everywhere; and ``iter_gated`` against ``iter_lines`` on random logs of
prefixes, ANSI colours, carriage-return redraws, invalid UTF-8 and tracebacks."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import REPO
from test_text_bulk import snapshot

from trainaudit.ingest import load_run, text
from trainaudit.ingest.base import LineReader
from trainaudit.ingest.formats import FORMATS, deepspeed
from trainaudit.ingest.formats.deepspeed import DS_GATES, ENGINE_GATE
from trainaudit.ingest.formats.hf import HF_GATE_LITERALS, HFReader
from trainaudit.ingest.text import iter_gated, iter_lines, literals, trie_pattern

GATED = sorted(c.name for c in FORMATS if issubclass(c, LineReader) and c.gate is not None)


def ungated(monkeypatch: pytest.MonkeyPatch) -> None:
    for c in FORMATS:
        if issubclass(c, LineReader) and c.gate is not None:
            monkeypatch.setattr(c, "gate", None)
    monkeypatch.setattr(deepspeed, "DS_GATES", {})


def generated(tmp_path: Path, fmt: str, fail: bool) -> Path:
    out = tmp_path / f"{fmt}{'-fail' if fail else ''}.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_format_logs.py"), fmt, str(out), "--size", "300K",
                    *(["--fail-from", "0.6"] if fail else [])], check=True, capture_output=True)
    return out


def test_the_gated_formats() -> None:
    assert "hf" in GATED  # deepspeed gates by its engine literals and its delegate's gate (DS_GATES)
    assert set(DS_GATES) == {None, "hf"}
    for source in (HF_GATE_LITERALS, ENGINE_GATE):
        assert literals(source) and source.isascii()
    for c in FORMATS:
        if issubclass(c, LineReader) and c.gate is not None:
            assert c.gate.raw.pattern == c.gate.text.pattern.encode() + b"|\x1b"


@pytest.mark.parametrize("case", ["hf-lr-jump-s1-every5", "hf-nan-batch-s1-every1-head", "hf-overfit-s1-every4",
                                  "hf-healthy-eval-s5-every10"])
def test_real_hf_trainer_logs_read_the_same(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # real HF Trainer stdout (CPU runs of tests/corpus/runs): each train dict is numbered by the bar
    # tqdm redraws right after it, a line the gate alone would skip
    log = REPO / "tests" / "corpus" / "runs" / case / "log.txt"
    run, _ = load_run([str(log)])
    assert run.sources[0].format == "hf" and int(run.series["loss"].steps[0]) > 1
    with monkeypatch.context() as m:
        ungated(m)
        whole, _ = load_run([str(log)])
    assert snapshot(run) == snapshot(whole)


@pytest.mark.parametrize("fail", [False, True], ids=["healthy", "failing"])
@pytest.mark.parametrize("fmt", ["hf", "deepspeed"])
def test_generated_logs_read_the_same(fmt: str, fail: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = generated(tmp_path, fmt, fail)
    monkeypatch.setattr(text, "GATED_BLOCK", 4093)
    run, _ = load_run([str(log)])
    assert run.sources[0].format == fmt
    assert len(run.series["loss"]) > 100
    kinds = {e.kind.value for e in run.events}
    assert ("traceback" in kinds) == fail
    with monkeypatch.context() as m:
        ungated(m)
        whole, _ = load_run([str(log)])
    assert snapshot(run) == snapshot(whole)


def test_fairseq_logs_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real fairseq logs of the corpus and the generated mix of generic lines (which the fairseq
    reader claims by its pipe records): gated, the lines without "epoch" or "overflow" are skipped."""
    mix = tmp_path / "generic.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_format_logs.py"), "generic", str(mix), "--size",
                    "300K"], check=True, capture_output=True)
    logs = [mix, *sorted((REPO / "tests" / "corpus" / "logs").glob("fairseq-*/log.txt"))]
    monkeypatch.setattr(text, "GATED_BLOCK", 4093)
    read = 0
    for log in logs:
        run, _ = load_run([str(log)], "fairseq")
        read += len(run.series)
        with monkeypatch.context() as m:
            ungated(m)
            whole, _ = load_run([str(log)], "fairseq")
        assert snapshot(run) == snapshot(whole), log.name
    assert len(logs) > 3 and read > 0


def test_tqdm_redraws_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = generated(tmp_path, "hf", False)
    seen: list[str] = []
    real = iter_gated

    def spy(*a: object, **k: object):  # type: ignore[no-untyped-def]
        for line in real(*a, **k):  # type: ignore[arg-type]
            seen.append(line.text)
            yield line

    monkeypatch.setattr("trainaudit.ingest.base.iter_gated", spy)
    monkeypatch.setattr(HFReader, "bulk", False)  # line by line, through the gate
    load_run([str(log)])
    with open(log, "rb") as f:
        every = [ln.text for ln in iter_lines(f)]
    assert seen and len(seen) * 5 < len(every)
    # of the redraws between two dicts only the first after a train dict is read: its count numbers
    # the dict (HFReader.awaits); the others are never decoded
    dicts = sum(1 for t in seen if t.rstrip().endswith("}"))
    bars = sum(1 for t in seen if "it/s]" in t)
    assert 0 < bars <= dicts


PIECES = ["{'loss': 2.5, 'epoch': 0.1}", "{'eval_loss': nan}", "DeepSpeed info: version=0.14", "step=3, skipped=0, lr=[0.1]",
          "[rank3]:", "[default1]:", "12: ", "\x1b[32m", "\x1b[0m", "\r", "\r\n", " step: 4 ", "{'loss': 1.5}",
          "Traceback (most recent call last):", '  File "x.py", line 3, in f', "RuntimeError: boom", "**",
          "PRED 3: a b", "\xff\xfe", "é", "}", "loss", "CUDA out of memory", "noise ", "  ", "H-1\t-0.5\tx",
          "epoch 001:   2800 / 160368 loss=9.255, num_updates=2800, lr=2.8e-05", "| epoch 008 | loss 6.326 | num_updates 21",
          "overflow detected, setting loss scale to: 64.0", '{"epoch": 2, "loss": "3.1", "num_updates": "40"}',
          "epoch 002:  10%|█ | 5/50 [00:01<00:09, loss=2.5, ppl=5.6]"]


def random_log(rng: random.Random, n: int) -> bytes:
    lines = ["".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6))) for _ in range(n)]
    data = "\n".join(lines).encode("utf-8", "surrogateescape")
    return data.replace("\xff\xfe".encode(), b"\xff\xfe") + (b"\n" if rng.random() < 0.5 else b"")


@pytest.mark.parametrize("seed", range(12))
def test_iter_gated_is_iter_lines_filtered(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(text, "GATED_BLOCK", rng.choice([1, 7, 64, 4096]))
    path = tmp_path / "r.log"
    path.write_bytes(random_log(rng, 400))
    gate = re.compile(r"\}|step:")
    raw = re.compile(rb"\}|step:|\x1b")
    with open(path, "rb") as f:
        want = [(ln.no, ln.text, ln.rank, ln.raw) for ln in iter_lines(f) if gate.search(ln.text)]
    with open(path, "rb") as f:
        got = [(ln.no, ln.text, ln.rank, ln.raw) for ln in iter_gated(f, gate, raw, lambda: False)]
    assert got == want and want
    with open(path, "rb") as f:
        every = [(ln.no, ln.text, ln.rank, ln.raw) for ln in iter_lines(f)]
    with open(path, "rb") as f:
        assert [(ln.no, ln.text, ln.rank, ln.raw) for ln in iter_gated(f, gate, raw, lambda: True)] == every


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("fmt", ["hf", "deepspeed", "fairseq"])
def test_random_logs_read_the_same(fmt: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracebacks that open in the middle of a line of redraws, prefixes, colours, broken bytes."""
    rng = random.Random(seed)
    monkeypatch.setattr(text, "GATED_BLOCK", rng.choice([16, 300, 4096]))
    path = tmp_path / "r.log"
    path.write_bytes(b"\n".join([b"{'loss': 3.5, 'grad_norm': 1.0, 'epoch': 0.01}"] * 3) + b"\n" + random_log(rng, 600))
    run, _ = load_run([str(path)], fmt)
    assert run.series
    with monkeypatch.context() as m:
        ungated(m)
        whole, _ = load_run([str(path)], fmt)
    assert snapshot(run) == snapshot(whole)


def test_a_traceback_inside_a_line_of_redraws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A traceback that opens in one carriage-return segment: the segments after it are the
    traceback's, its exception among them (``KeyboardInterrupt`` is none of the scanner's literals)."""
    path = tmp_path / "tb.log"
    dicts = "".join(f"{{'loss': {3 - i / 10}, 'epoch': {i / 10}}}\n" for i in range(5))
    bar = "\r 10%|█         | 1/10 [00:01<00:09,  1.00it/s]"
    path.write_text(dicts + bar + '\rTraceback (most recent call last):\r  File "train.py", line 3, in main\r'
                    "    step(model, batch_of_inputs)\r" + bar + "\rKeyboardInterrupt\n" + dicts, encoding="utf-8")
    run, _ = load_run([str(path)])
    assert run.sources[0].format == "hf"
    tb = [e for e in run.events if e.kind.value == "traceback"]
    assert tb and tb[0].data["exc_type"] == "KeyboardInterrupt"
    with monkeypatch.context() as m:
        ungated(m)
        whole, _ = load_run([str(path)])
    assert snapshot(run) == snapshot(whole)


def test_literals_and_their_trie() -> None:
    words = literals(r"A(?:borted \(core|ssertionError)|\}|step=|steps: |H-")
    assert sorted(words) == sorted(["Aborted (core", "AssertionError", "}", "step=", "steps: ", "H-"])
    trie = re.compile(trie_pattern(words))
    for sample in ["x step=3", "steps: 4", "Aborted (core dumped)", "AssertionError", "{'a': 1}", "H-3", "ste p="]:
        assert bool(trie.search(sample)) == any(w in sample for w in words), sample
    for bad in [r"\d+ loss", r"^Epoch", r"[ab]c", r"x*"]:
        with pytest.raises(ValueError):
            literals(bad)
