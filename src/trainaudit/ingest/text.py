"""Clean the lines of real training logs before any format looks at them.

Real logs are messy: launcher prefixes (``[rank3]:``, ``[default0]:``, ``0: `` from ``srun
--label``, NeMo-Run task names, Ray actor tags), ANSI colour codes, tqdm bars redrawn with
carriage returns, CRLF, invalid UTF-8 and a last line cut short. :func:`iter_lines` yields
:class:`Line` objects whose ``text`` is the cleaned content, ``rank`` the launcher rank if a
prefix carried one, and ``no`` the 1-based physical line number in the file (all carriage-return
segments of one physical line share its number).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")

# Markdown bold a user added to the numbers of a log pasted into an issue ("**0.5574**"); GitHub's
# renderer drops the markers, a reader must too. Possessive: one pass over the line.
_BOLD_RE = re.compile(r"\*\*([^*\n]++)\*\*")

# Launcher prefixes, tried repeatedly at the start of a line (they stack: "29: [rank29]: ...").
_PREFIXES = [
    re.compile(r"\[(?:rank|default|[A-Za-z_]*?)(\d+)\]:[ ]?"),  # torchrun --tee / TORCH_LOGS
    re.compile(r"(\d{1,5}): "),  # srun --label
    re.compile(r"slurm_procid (\d+) : "),
    # NeMo-Run "i.pretrain/0 [default2]:"; the task name starts where its run does (a prefix before it
    # ends in a blank or a colon), so a long run is scanned once, not once per character
    re.compile(r"(?<![\w.\-])(?=[\w.\-]*[A-Za-z])[\w.\-]++/(\d+) (?=\[(?:default|rank)\d)"),
    re.compile(r"\(\w+(?:\([^()]*+\))? pid=\d+(?:, ip=[\d.]+)?\) "),  # Ray actor prefix; no nested "("
]
_PREFIX_START = re.compile(r"[\[\d(sa-zA-Z]")


@dataclass(slots=True)
class Line:
    no: int
    text: str
    rank: int | None
    raw: str


def strip_prefixes(text: str) -> tuple[str, int | None]:
    """Remove launcher prefixes; return the rest and the rank (the innermost ``[rankN]`` wins)."""
    rank: int | None = None
    pos = 0
    while pos < len(text) and _PREFIX_START.match(text, pos):
        for i, pat in enumerate(_PREFIXES):
            m = pat.match(text, pos)
            if m is None:
                continue
            if i == 1 and not _looks_like_label(text, m.end()):
                continue
            if m.lastindex:
                rank = int(m.group(1))
            pos = m.end()
            break
        else:
            break
    return text[pos:], rank


# a value where an srun label's text would start: "12: 0.5", "849: nan, -nan avg" (darknet's iteration line)
_VALUE_START = re.compile(r"[-+.]?\d|[-+]?(?:nan|inf)(?![A-Za-z])", re.IGNORECASE)


def _looks_like_label(text: str, end: int) -> bool:
    # "12: " is an srun label only if something log-like follows, not "12: 0.5" data.
    return end < len(text) and _VALUE_START.match(text, end) is None


def iter_lines(stream: BinaryIO) -> Iterator[Line]:
    """Yield cleaned lines. Streams in constant memory; the last line may lack a newline."""
    reader = stream if isinstance(stream, io.BufferedIOBase) else io.BufferedReader(cast(io.RawIOBase, stream))
    for no, braw in enumerate(reader, 1):
        yield from split_line(no, braw)


GATED_BLOCK = 1 << 20  # bytes read at a time by iter_gated


def literals(pattern: str) -> list[str]:
    """The strings a pattern of literals, groups and alternatives matches (ValueError for any
    other construct: such a pattern is no gate)."""
    def expand(items: Any) -> list[str]:
        out = [""]
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                alts = [chr(arg)]
            elif name == "SUBPATTERN" and not arg[1] and not arg[2]:
                alts = expand(arg[3])
            elif name == "BRANCH":
                alts = [w for branch in arg[1] for w in expand(branch)]
            else:
                raise ValueError(f"not a literal pattern: {pattern!r} ({name})")
            out = [a + b for a in out for b in alts]
        return out

    return expand(re._parser.parse(pattern))  # type: ignore[attr-defined]  # the parser of re (3.11+)


def trie_pattern(words: list[str]) -> str:
    """One pattern for ``words`` with their common beginnings shared (``ab|ac`` -> ``a(?:b|c)``): the
    matcher then tries the words that start with a position's character only."""
    if "" in words:
        rest = trie_pattern([w for w in words if w])
        return f"(?:{rest})?" if rest else ""
    by_first: dict[str, list[str]] = {}
    for w in sorted(set(words)):
        by_first.setdefault(w[0], []).append(w[1:])
    parts = []
    for c, tails in by_first.items():
        tail = trie_pattern(tails)
        parts.append(re.escape(c) + (f"(?:{tail})" if "|" in tail else tail))
    return "|".join(parts)


def iter_gated(stream: BinaryIO, gate: re.Pattern[str], raw_gate: re.Pattern[bytes], everything: Callable[[], bool],
               raw_wakes: re.Pattern[bytes] | None = None, awaits: Callable[[], bool] | None = None
               ) -> Iterator[Line]:
    """The lines of :func:`iter_lines` in whose ``text`` ``gate`` finds something, and every line
    while ``everything()`` is true (asked as each line is reached). ``gate`` is literals
    only (see :func:`literals`) and ``raw_gate`` its UTF-8 bytes with ``|\\x1b`` added: it finds in a
    physical line whatever ``gate`` finds in the line's cleaned segments, and the physical lines where
    it finds nothing (nor an ANSI escape, whose removal could join a needle) are never decoded.
    ``raw_wakes`` (bytes literals): what finds every line that may make ``everything()`` true; the
    carriage-return segments of other lines are filtered by ``gate`` before they are cleaned.
    ``awaits``: true when the reader needs the next line whatever it holds: the next physical
    line's first non-blank segment is then read too (a progress bar redrawn after a record, whose
    count numbers it), not the redraws after it."""
    no = 0
    rest = b""
    while True:
        block = stream.read(GATED_BLOCK)
        data = rest + block if rest else block
        end = data.rfind(b"\n") + 1 if block else len(data)
        pos = 0
        while pos < end:
            wait = awaits is not None and not everything() and awaits()
            if wait or everything():
                nl = data.find(b"\n", pos, end)
                stop = end if nl < 0 else nl + 1
            else:
                m = raw_gate.search(data, pos, end)
                if m is None:
                    no += data.count(b"\n", pos, end)
                    break
                start = data.rfind(b"\n", pos, m.start()) + 1
                if start > pos:
                    no += data.count(b"\n", pos, start)
                    pos = start
                nl = data.find(b"\n", m.end(), end)
                stop = end if nl < 0 else nl + 1
            no += 1
            yield from gated_split(no, data[pos:stop], gate, everything, raw_wakes, wait)
            pos = stop
        if not block:
            return
        rest = data[end:]


def gated_split(no: int, braw: bytes, gate: re.Pattern[str], everything: Callable[[], bool],
                raw_wakes: re.Pattern[bytes] | None, wait: bool) -> Iterator[Line]:
    """The lines of physical line ``no`` that :func:`iter_gated` yields once it reads the line
    (``wait``: the reader awaits the line whatever it holds). ``everything()`` is asked again as
    each line is reached: the reader may have changed it with the line before."""
    # a segment's cleaned text is the segment less its prefixes: what the gate finds there
    # it finds in the segment (a line that may wake everything() is split whole)
    keep = None if raw_wakes is None or everything() or raw_wakes.search(braw) else gate
    for i, line in enumerate(split_line(no, braw, keep, first=wait)):
        # a line the gate was not asked of, or found in its prefix only, is one more line read
        if keep is not None or everything() or (wait and i == 0) or gate.search(line.text) is not None:
            yield line


def split_line(no: int, braw: bytes, gate: re.Pattern[str] | None = None, first: bool = False) -> list[Line]:
    """The cleaned lines of physical line ``no`` (its newline there or not), as :func:`iter_lines`
    yields them (also for bulk readers that hand a line back to line logic). ``gate``: only the
    carriage-return segments it finds something in (before their prefixes are stripped), found in
    one pass over the line, and with ``first`` the first non-blank segment as well."""
    raw = braw.decode("utf-8", "replace").rstrip("\r\n")
    if not raw:
        return []
    text = ANSI_RE.sub("", raw) if "\x1b" in raw else raw
    if "**" in text:
        text = _BOLD_RE.sub(r"\1", text)
    if "\r" in text:
        segs = text.split("\r")
        if gate is not None:
            kept: list[str] = [next((g for g in segs if g.strip()), "")] if first else []
            seg, at = 0, 0
            for m in gate.finditer(text):
                seg += text.count("\r", at, m.start())
                at = m.start()
                if not kept or kept[-1] is not segs[seg]:
                    kept.append(segs[seg])
            segs = kept
        return [Line(no, *strip_prefixes(s), raw) for s in segs if s.strip()]
    return [Line(no, *strip_prefixes(text), raw)] if gate is None or first or gate.search(text) else []


_SPECIAL = {
    "nan": math.nan,
    "-nan": math.nan,
    "+nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "infinity": math.inf,
    "-infinity": -math.inf,
}


def parse_number(token: str) -> float | None:
    """Parse a number as logs print it: ``1.2E+00``, ``7,282``, ``nan``, ``NaN``, ``-inf``,
    ``12.5%``, ``9.46GiB`` (unit stripped by the caller). Returns None if it is not a number."""
    t = token.strip().strip("'\"").rstrip(",;")
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        pass
    special = _SPECIAL.get(t.lower())
    if special is not None:
        return special
    if "," in t:
        try:
            return float(t.replace(",", ""))
        except ValueError:
            return None
    return None


def json_number(v: object) -> float | None:
    """A number from a parsed JSON/dict value: ints and floats as they are, strings as logs spell
    numbers (``"nan"``, ``"1.2e-05"``), booleans and everything else not a number."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return parse_number(v)
    return None

