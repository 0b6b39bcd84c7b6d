"""A generated block of a Markdown document, between its two marker comments."""

from __future__ import annotations

import re


def with_block(doc: str, start: str, end: str, body: str) -> str:
    """``doc`` with the text between ``start`` and ``end`` replaced by ``body`` (the block appended
    when the markers are not there yet)."""
    block = f"{start}\n{body}\n{end}"
    if start in doc:
        return re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _m: block, doc, flags=re.S)
    return doc.rstrip() + "\n\n" + block + "\n"
