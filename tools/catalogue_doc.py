"""The catalogue of known messages as a Markdown table, in docs/error-signatures.md.

    python tools/catalogue_doc.py

The table is rewritten between its markers; ``tests/ingest/test_catalogue.py`` fails when it is
not the table of the catalogue in the code.
"""

from __future__ import annotations

from pathlib import Path

from doc_block import with_block

from trainaudit.ingest.catalogue import CATALOGUE

DOC = Path(__file__).resolve().parents[1] / "docs" / "error-signatures.md"
START, END = "<!-- catalogue -->", "<!-- /catalogue -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    rows = ["| id | the line contains | event | evidence for | severity | meaning | source |",
            "|---|---|---|---|---|---|---|"]
    for k in CATALOGUE:
        found = " and ".join(f"`{_cell(n)}`" for n in k.needles)
        if k.pattern is not None:
            found += f" (matching `{_cell(k.pattern.pattern)}`)"
        evidence = k.category or "context only"
        if k.fatal:
            evidence += ", the run stops"
        sources = ", ".join(s.strip() for s in k.source.split(";"))
        rows.append(f"| `{k.id}` | {found} | `{k.kind.value}` | {evidence} | {k.severity} | {_cell(k.meaning)} | "
                    f"{_cell(sources)} |")
    return "\n".join(rows)


def updated(doc: str) -> str:
    return with_block(doc, START, END, render())


def main() -> int:
    DOC.write_text(updated(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
