"""``FixedNumbers`` reads numbers at fixed offsets bitwise as ``float()`` does, and says which it
could not read (the caller reads those itself)."""

from __future__ import annotations

import random
import struct

import numpy as np

from trainaudit.ingest.fastnum import FixedNumbers

FORMATS = ["{:.4f}", "{:.2e}", "{:+.6E}", "{:.0f}", "{!r}", "{:.3f}"]


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_bitwise_float_where_read_and_not_read_where_it_cannot() -> None:
    rng = random.Random(0)
    checked = refused = 0
    for fmt in FORMATS:
        for scale in (1e-30, 1e-3, 1.0, 1e5, 1e25):
            values = [fmt.format(rng.uniform(-1, 1) * scale) for _ in range(400)]
            by_len: dict[int, list[str]] = {}
            for v in values:
                by_len.setdefault(len(v), []).append(v)
            for n, group in by_len.items():
                lines = [f"loss {v} lr 1,234" for v in group]  # one shape: digits at the same offsets
                text = lines[0]
                spans = [(5, 5 + n), (5 + n + 4, len(text))]
                shaped = [ln for ln in lines if ln.translate(str.maketrans("123456789", "000000000"))
                          == text.translate(str.maketrans("123456789", "000000000"))]
                mat = np.frombuffer("".join(shaped).encode(), dtype=np.uint8).reshape(len(shaped), -1)
                fixed = FixedNumbers(text, spans)
                vals, ok = fixed.read(mat)
                # the same lines read where they stand in a log, one after the other
                buf = np.frombuffer("".join(f"{ln}\n" for ln in shaped).encode(), dtype=np.uint8)
                at_vals, at_ok = fixed.read_at(buf, np.arange(len(shaped), dtype=np.int64) * (len(text) + 1))
                assert at_vals.tobytes() == vals.tobytes() and (at_ok == ok).all()
                assert not ok[:, 1].any()  # thousands commas: for the caller
                for row, line in enumerate(shaped):
                    if ok[row, 0]:
                        assert bits(vals[row, 0]) == bits(float(line[5:5 + n])), line
                        checked += 1
                    else:
                        refused += 1
    assert checked > 1500 and refused > 100  # long reprs and exponents past 22 are refused
