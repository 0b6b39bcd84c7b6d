"""Which test data cites a source kept for independent evaluation.

    python tools/reserved_sources.py ../shared/eval_exclude.txt

The list holds URLs (a page, or a section of one by its fragment) and Megatron-LM commits (their first
10 hex digits). A corpus label cites its source at a pinned commit (``/blob/<sha>/``) where the list
names the branch (``/blob/master/``), so both are folded to one form before comparing: the same file at
another commit is the same source. A list entry with a fragment reserves that section; without one,
the whole page. URLs and ``owner/repo#N`` references are looked for in every text file beside the
labels too (docs, code comments, fixtures); commits in the Megatron corpus cases and the compare
oracle's sources.
Prints one line per match and exits 1 when there is any.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"/(blob|tree)/(?:[0-9a-f]{7,40}|master|main)/")
_COMMIT = re.compile(r"^[0-9a-f]{10}$")


def fold(url: str) -> str:
    """One form for the same page: scheme, www., a trailing slash and the commit or branch pin."""
    url = url.strip().rstrip("/").replace("http://", "https://").replace("://www.", "://")
    return _PIN.sub(r"/\1/HEAD/", url)


def reserved(url: str, entries: list[str]) -> str | None:
    """The list entry that reserves ``url``, or None."""
    u = fold(url)
    page = u.split("#", 1)[0]
    for e in entries:
        f = fold(e)
        if f == u or ("#" not in f and f == page):
            return e
    return None


def cited(repo: Path) -> Iterator[tuple[str, str]]:
    """(where, URL) for every URL a corpus label names."""
    for label in sorted((repo / "tests" / "corpus").glob("*/*/label.json")):
        data = json.loads(label.read_text(encoding="utf-8"))
        for value in data.values():
            if isinstance(value, str) and value.startswith("http"):
                yield str(label.relative_to(repo)), value


_REF = re.compile(r"(?<![\w/.-])([A-Za-z0-9_.-]{1,39})/([A-Za-z0-9_.-]{1,100})#(\d{1,7})\b")
_URL = re.compile(r"https?://[^\s)\]>'\"`|]{1,400}")
_TEXT = (".md", ".py", ".txt", ".json", ".jsonl", ".toml", ".yml", ".yaml", ".cfg")


def mentioned(repo: Path) -> Iterator[tuple[str, str]]:
    """(file, URL) for every URL and ``owner/repo#N`` reference (as its issue and pull request URLs)
    in the repository's text files outside the corpus labels (docs, code comments, fixtures)."""
    for top in ("docs", "src", "tests", "tools", "benchmarks", "examples", "README.md"):
        base = repo / top
        for path in sorted([base] if base.is_file() else base.rglob("*")):
            if not path.is_file() or path.suffix not in _TEXT or path.name == "label.json":
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            where = str(path.relative_to(repo))
            for m in _URL.finditer(text):
                yield where, m.group(0).rstrip(".,;:")
            for m in _REF.finditer(text):
                for kind in ("issues", "pull"):
                    yield where, f"https://github.com/{m.group(1)}/{m.group(2)}/{kind}/{m.group(3)}"


def commit_files(repo: Path) -> Iterator[Path]:
    yield from sorted((repo / "tests" / "corpus" / "megatron").glob("*/case.json"))
    yield repo / "tests" / "compare" / "oracle" / "SOURCES.md"
    yield repo / "tests" / "compare" / "oracle" / "cases.jsonl"


def matches(repo: Path, listing: str) -> list[str]:
    lines = [ln.strip() for ln in listing.splitlines() if ln.strip() and not ln.startswith("#")]
    urls = [ln for ln in lines if ln.startswith("http")]
    commits = [ln for ln in lines if _COMMIT.match(ln)]
    out = sorted({f"{where}: {url} (reserved: {entry})" for where, url in [*cited(repo), *mentioned(repo)]
                  if (entry := reserved(url, urls)) is not None})
    for path in commit_files(repo):
        if path.exists():
            text = path.read_text(encoding="utf-8")
            out += [f"{path.relative_to(repo)}: commit {c}" for c in commits if c in text]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python tools/reserved_sources.py EXCLUDE_LIST\n")
        return 2
    try:
        listing = Path(argv[0]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        sys.stderr.write(f"reserved_sources: cannot read the list {argv[0]}: {e.__class__.__name__}\n")
        return 2
    found = matches(REPO, listing)
    sys.stdout.write("".join(f"{line}\n" for line in found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
