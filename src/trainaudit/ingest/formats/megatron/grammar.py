"""The grammar of a Megatron iteration line, shared by the line reader and the bulk fast path.

``iteration 43/ 100 | consumed samples: 5504 | ... | lm loss: 1.825991E+00 | ... |``
"""

from __future__ import annotations

import re

from trainaudit.ingest.text import parse_number

ITER_RE = re.compile(r"\biteration:?\s+(\d+)\s*/\s*(\d+)\s*\|")
# "key: value" between pipes. Linear: the key starts at the first letter after a "|" or ":" (a later
# letter would reach the same ":"), and the value is read word by word without its trailing blanks.
FIELD_RE = re.compile(r"(?<![^|:])[^A-Za-z|:]*+([A-Za-z][^|:]*+):\s+((?:\s*+[^\s|]++)*+)\s*+(?=\||$)")
# the rest of a wrapped iteration line: nothing but "key: value" fields between pipes
CONTINUED_RE = re.compile(r"\s{0,8}[A-Za-z][\w .()/-]{0,60}: {1,4}[^\s|]{1,40}(?: [A-Za-z%]{1,8})? {0,4}"
                          r"(?:\| {0,4}(?:[A-Za-z][\w .()/-]{0,60}: {1,4}[^\s|]{1,40}(?: [A-Za-z%]{1,8})? {0,4})?){1,40}$")
UNIT_RE = re.compile(r"^(-?[\d.,]+(?:[eE][-+]?\d+)?)\s*([A-Za-z%]+)$")
SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # nanotron prints "634K", "547M"
SKIP_KEYS = {"iteration"}


def is_loss_key(key: str) -> bool:
    k = key.lower()
    return "loss" in k and "scale" not in k


def field_value(text: str) -> float | None:
    """A field's number; ``78.36 TFLOPs``-style values with an SI unit are scaled."""
    v = parse_number(text)
    if v is None:
        m = UNIT_RE.match(text)
        if m:
            v = parse_number(m.group(1))
            if v is not None:
                v *= SI.get(m.group(2), 1.0)
    return v
