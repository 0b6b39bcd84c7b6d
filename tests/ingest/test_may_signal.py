"""``may_signal`` answers for a line shape what the signature scanner may do with a line: a line
it says False of yields no event and leaves no state (so a bulk reader may skip the scanner for
it), and lines that differ only in their digits get the same answer."""

from __future__ import annotations

import random

from shared_data import REPO

from trainaudit.ingest.signatures import SignatureScanner, may_signal
from trainaudit.ingest.text import Line, strip_prefixes

CORPUS_LOGS = sorted((REPO / "tests" / "corpus" / "logs").glob("*/log.txt"))


def test_quiet_lines_leave_the_scanner_as_it_was() -> None:
    quiet = loud = 0
    rng = random.Random(0)
    for path in CORPUS_LOGS:
        for no, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines()[:3000], 1):
            text, rank = strip_prefixes(raw)
            other = "".join(str(rng.randrange(10)) if "0" <= c <= "9" else c for c in text)
            assert may_signal(text) == may_signal(other), text
            if may_signal(text):
                loud += 1
                continue
            quiet += 1
            scanner = SignatureScanner("x")
            assert scanner.feed(Line(no, text, rank, raw)) == [], text
            assert not scanner.busy and scanner.finish() == [], text
    assert quiet > 2500 and loud > 200, (quiet, loud)


def test_what_the_scanner_reacts_to_is_loud() -> None:
    for text in ["Traceback (most recent call last):", "RuntimeError: CUDA out of memory.", "**Error** here",
                 "PRED 3: the the the", "H-12\t-0.5\tthe cat", "exits with return code = -9",
                 "UserWarning: var(): degrees of freedom is <= 0.", "NCCL WARN Call to ibv_reg_mr failed",
                 '  File "train.py", line 3, in <module>', "Killed"]:
        assert may_signal(text), text
