"""The extractor's shape cache gives exactly the full parse: on every line of the corpus logs, of
the extractor's tests and of the benchmark's generator, and on copies of them with other digits
(the lines a cached plan is made for), bitwise."""

from __future__ import annotations

import ast
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from shared_data import REPO

from trainaudit.ingest import extract
from trainaudit.ingest.extract import Parsed, ShapeCache, parse_line_full
from trainaudit.ingest.text import strip_prefixes

CORPUS_LOGS = sorted((REPO / "tests" / "corpus" / "logs").glob("*/log.txt"))


def key(p: Parsed) -> tuple:
    def f(x: float | None) -> bytes | None:
        return None if x is None else struct.pack("<d", x)

    return ([(q.key, f(q.value), q.unit, f(q.total)) for q in p.pairs], [f(x) for x in p.bare], p.words, p.cells)


def redigit(text: str, rng: random.Random) -> str:
    return "".join(str(rng.randrange(10)) if "0" <= c <= "9" else c for c in text)


def literal_lines() -> Iterator[str]:
    """The string literals of the extractor's tests, line by line."""
    tree = ast.parse((REPO / "tests" / "ingest" / "test_extract.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield from node.value.splitlines()


def check(lines: list[str], seed: int, variants: int = 3) -> int:
    """Each line, then ``variants`` copies with random digits, through one cache; returns how many
    shapes got a plan (so the test is not vacuous)."""
    rng = random.Random(seed)
    cache = ShapeCache()
    for raw in lines:
        text, _ = strip_prefixes(raw)
        for t in [text] + [redigit(text, rng) for _ in range(variants)]:
            assert key(cache.parse(t)) == key(parse_line_full(t)), t
    return sum(isinstance(v, extract._Plan) for v in cache.plans.values())


def test_corpus_logs_and_their_redigited_copies() -> None:
    assert len(CORPUS_LOGS) > 50
    planned = 0
    for i, path in enumerate(CORPUS_LOGS):
        planned += check(path.read_text(encoding="utf-8", errors="replace").splitlines()[:2000], i)
    assert planned > 300


def test_extractor_test_lines_and_their_redigited_copies() -> None:
    lines = list(literal_lines())
    assert len(lines) > 100
    assert check(lines, 1, variants=6) > 20


def test_generated_benchmark_lines(tmp_path: Path) -> None:
    out = tmp_path / "mixed.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_generic_log.py"), str(out), "--size", "300K"],
                   check=True, capture_output=True)
    assert check(out.read_text(encoding="utf-8").splitlines(), 2, variants=1) >= 10


@pytest.mark.parametrize("lines", [
    ["Layer 1: mean |grad| = 0.5", "Layer 2: mean |grad| = 0.5"],  # a number in the key
    ["GPU:0: 1.5 loss 2", "GPU:1: 1.5 loss 2"],
    ["epoch 1.0 loss 2.5", "epoch 1.5 loss 2.5", "epoch 2.0 loss 2.5", "epoch 2.5 loss 2.5"],  # integral or not
    ["f1 0.5", "f2 0.5", "f1 0.7", "f3 0.5"],  # a digit that makes a metric word
    ["1.00s/it loss=2", "2.00s/it loss=2", "0.00s/it loss=2", "1.00s/it loss=1"],  # inverse speeds, zero
    ["loss = -0.0 step 1", "loss = -1.0 step 2", "loss = -0.0 step 3"],  # signs
    ["loss 1.#INF", "loss 2.#INF", "loss 1.#IND"],  # the tokenizer's literal digit
    ["time delta: 0:00:01.07 loss 2", "time delta: 1:02:03.04 loss 3"],  # durations
    ["'loss': '24.061707', 'step': '7'", "'loss': '14.061707', 'step': '8'"],  # quoted numbers
    ["  10     2.5", "  20     2.5", "  30     3.5"],  # bare rows with equal values
    ["[  0]     240 || B: 4.553", "[  1]     250 || B: 4.553", "[  2]     260 || B: 4.553"],
    # timm's rate "825.70/s", integral or not: a rate, never an "N/M" counter
    ["Time: 2.100s,  825.70/s  LR: 1.0e-05", "Time: 2.008s,  199.00/s  LR: 1.0e-05"],
])
def test_value_branches(lines: list[str]) -> None:
    cache = ShapeCache()
    for t in lines * 3:
        assert key(cache.parse(t)) == key(parse_line_full(t)), t


def test_the_cache_is_bounded() -> None:
    cache = ShapeCache(max_shapes=64)
    for i in range(5000):
        t = "x" * (i % 97) + f" loss {i}.5 " + "y" * (i // 97)
        assert key(cache.parse(t)) == key(parse_line_full(t))
        assert len(cache.plans) <= 64


def test_long_lines_are_not_cached() -> None:
    cache = ShapeCache(max_len=100)
    t = "loss 1.5 " + "x" * 200
    for _ in range(3):
        assert key(cache.parse(t)) == key(parse_line_full(t))
    assert not cache.plans
