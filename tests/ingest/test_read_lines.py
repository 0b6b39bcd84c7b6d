"""``read_lines`` (the evidence lines quoted in answer.json) splits only the blocks that hold a
wanted line; the lines it returns are those of iterating the bounded stream line by line."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainaudit.ingest import sources
from trainaudit.ingest.sources import InputFile, read_lines
from trainaudit.safeio import Limits


def _iterated(inp: InputFile, wanted: set[int]) -> dict[int, str]:
    # every line of the stream, as its iteration gives them
    out: dict[int, str] = {}
    with inp.open() as f:
        for no, raw in enumerate(f, 1):
            if no in wanted:
                out[no] = raw.decode("utf-8", "replace").rstrip("\r\n")
    return out


def _input(data: bytes) -> InputFile:
    return InputFile("mem.log", "mem.log", len(data), lambda: io.BytesIO(data))


_PIECES = st.sampled_from([b"\n", b"\r\n", b"\r", b"loss 1.5", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3\xa9", b"x" * 40,
                           b"y" * 300, b"\n\n", b" "])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=300), st.sets(st.integers(-1, 400), max_size=12),
       st.sampled_from([16, 64, 1 << 20]))
def test_read_lines_are_the_stream_lines(pieces: list[bytes], wanted: set[int], line_bytes: int) -> None:
    data = b"".join(pieces)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sources, "LIMITS", Limits(line_bytes=line_bytes))  # long lines cut, as the stream cuts them
        got = read_lines(_input(data), wanted)
    inp = _input(data)
    inp.line_bytes = line_bytes
    assert got == _iterated(inp, wanted)


def test_read_lines_across_blocks_and_without_a_final_newline() -> None:
    lines = [f"line {i} " + "z" * (i % 700) for i in range(1, 3001)]
    data = "\n".join(lines).encode()  # about 1 MB: several blocks of the stream, no final newline
    wanted = {1, 2, 999, 1000, 1001, 2999, 3000, 3001, 0}
    got = read_lines(_input(data), wanted)
    assert got == {n: lines[n - 1] for n in wanted if 1 <= n <= 3000}
    assert got == _iterated(_input(data), wanted)
