"""tools/reserved_sources.py finds test data citing a source kept for independent evaluation, pinned or not."""

from __future__ import annotations

import json

import reserved_sources as rs

BLOB = "https://github.com/o/r/blob/{}/train/chronicles.md"


def test_a_pinned_page_is_the_same_source_as_the_branch() -> None:
    pinned = BLOB.format("0f19d3f2453f2b788b74870ed8036be7fcac3d9a") + "#a-huge-lm-loss-spike"
    assert rs.reserved(pinned, [BLOB.format("master") + "#a-huge-lm-loss-spike"]) is not None
    assert rs.reserved(pinned, [BLOB.format("main")]) is not None  # the whole page reserved
    # another section of a page whose listed entry is one section is not reserved
    assert rs.reserved(pinned, [BLOB.format("master") + "#experiment-12"]) is None
    assert rs.reserved("http://www.github.com/o/r/issues/12/", ["https://github.com/o/r/issues/12"]) is not None
    assert rs.reserved("https://github.com/o/r/issues/123", ["https://github.com/o/r/issues/12"]) is None


def test_the_corpus_is_checked_label_by_label_and_commit_by_commit() -> None:
    where, url = next(rs.cited(rs.REPO))
    listing = "# a comment\n" + rs._PIN.sub(r"/\1/master/", url) + "\n"
    assert any(line.startswith(where) for line in rs.matches(rs.REPO, listing))
    case = next((rs.REPO / "tests" / "corpus" / "megatron").glob("*/case.json"))
    good = json.loads(case.read_text(encoding="utf-8"))["good"][:10]
    assert f"{case.relative_to(rs.REPO)}: commit {good}" in rs.matches(rs.REPO, f"{good}\n")
    assert rs.matches(rs.REPO, "https://example.org/nothing-cites-this\n") == []


def test_a_reference_in_docs_or_fixtures_counts_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "signatures.md").write_text("| `exit` | seen in o/r#534 |\n", encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "k.txt").write_text("# source: https://github.com/o/k/issues/296  (notes)\n", encoding="utf-8")
    listing = "https://github.com/o/r/issues/534\nhttps://github.com/o/k/issues/296\n"
    found = rs.matches(tmp_path, listing)
    assert [f.split(":")[0] for f in found] == ["docs/signatures.md", "tests/k.txt"]
    assert rs.matches(tmp_path, "https://github.com/o/r/issues/53\n") == []


def test_a_list_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert rs.main([str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the list" in err
    assert rs.main([]) == 2
