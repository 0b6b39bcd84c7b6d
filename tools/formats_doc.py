"""The formats table, generated from the format registry, in README.md and docs/logs.md.

    python tools/formats_doc.py

The table is rewritten between its markers; ``tests/ingest/test_formats.py`` fails when either
file does not hold the table of the registry in the code.
"""

from __future__ import annotations

from pathlib import Path

from doc_block import with_block

from trainaudit.ingest.formats import FORMATS

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "README.md", REPO / "docs" / "logs.md")
START, END = "<!-- formats -->", "<!-- /formats -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def render() -> str:
    rows = ["| `--format` | reads | kind | priority |", "|---|---|---|---|"]
    for cls in FORMATS:
        rows.append(f"| `{cls.name}` | {_cell(cls.description)} | {cls.kind.value} | {cls.priority.name.lower()} |")
    return "\n".join(rows)


def updated(doc: str) -> str:
    return with_block(doc, START, END, render())


def main() -> int:
    for path in DOCS:
        path.write_text(updated(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
