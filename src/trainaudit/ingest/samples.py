"""Generated samples in a log (``PRED 3: ...``, ``Sample: ...``, ``Generated: ...``): whether the
model says the same thing whatever the input, or repeats itself inside one output.

A translation or language model that collapsed prints the same sentence for every input, or one
phrase over and over ("the United Nations , the United Nations , ..."). The watcher keeps a
bounded amount per sample (a hash and the longest repeat) and reports one summary event.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from trainaudit.ingest.text import Line
from trainaudit.model import Event, EventKind

# "PRED 713:", "**PRED 713:", "Sample 2:", "Generated:", "Output:", "H-12" (fairseq generate)
SAMPLE_WORDS = (r"PRED|Pred|PREDICTION|Prediction|SAMPLE|Sample|GENERATED|Generated|OUTPUT|Output|"
                r"HYP|Hypothesis")
_LABEL = r"[*> ]{0,4}(?:" + SAMPLE_WORDS + ")"
SAMPLE_RE = re.compile(r"^" + _LABEL + r"(?: ?\d{1,9})?[ ]?: ?(?P<text>\S.*)$|^H-\d{1,9}\t[-\d.]{1,20}\t(?P<h>\S.*)$")
SAMPLE_START = r"^(?:" + _LABEL + r"|H-\d)"  # how every line SAMPLE_RE matches starts
MAX_TOKENS = 400  # per sample: enough to see a phrase repeated, bounded on a hostile line
MIN_REPEAT = 4  # a phrase repeated this many times in a row is the model looping


def longest_repeat(tokens: list[str], max_n: int = 8) -> tuple[int, str]:
    """The most consecutive repetitions of any phrase of 1..``max_n`` tokens, and the phrase."""
    best, phrase = 1, ""
    for n in range(1, max_n + 1):
        i = 0
        while i + 2 * n <= len(tokens):
            k = 1
            while i + (k + 1) * n <= len(tokens) and tokens[i + k * n: i + (k + 1) * n] == tokens[i: i + n]:
                k += 1
            if k > best:
                best, phrase = k, " ".join(tokens[i: i + n])
            i += max(1, (k - 1) * n) if k > 1 else 1
    return best, phrase


@dataclass
class SampleWatch:
    source: str
    hashes: dict[str, int] = field(default_factory=dict)
    first: Line | None = None
    repeat: tuple[int, str, int] = (1, "", 0)  # repetitions, phrase, line
    n: int = 0

    def feed(self, line: Line) -> None:
        if "PRED" not in line.text and "red" not in line.text and ":" not in line.text and "H-" not in line.text:
            return
        m = SAMPLE_RE.match(line.text)
        if m is None or "SCORE" in line.text[:20]:
            return
        text = (m.group("text") or m.group("h") or "").strip().strip("*").strip()
        if not text:
            return
        self.n += 1
        self.first = self.first or line
        key = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()
        self.hashes[key] = self.hashes.get(key, 0) + 1
        reps, phrase = longest_repeat(text.split()[:MAX_TOKENS])
        if reps > self.repeat[0]:
            self.repeat = (reps, phrase, line.no)

    def finish(self) -> list[Event]:
        if self.first is None:
            return []
        same = max(self.hashes.values())
        data = {"samples": self.n, "distinct": len(self.hashes), "most_repeated_output": same,
                "repeat": self.repeat[0], "phrase": self.repeat[1][:200], "repeat_line": self.repeat[2]}
        msg = f"{self.n} generated samples, {len(self.hashes)} distinct"
        if self.repeat[0] >= MIN_REPEAT:
            msg += f"; one repeats {self.repeat[1][:60]!r} {self.repeat[0]} times in a row"
        return [Event(EventKind.SAMPLES, msg, self.source, self.first.no, self.first.raw[:300], data=data)]
