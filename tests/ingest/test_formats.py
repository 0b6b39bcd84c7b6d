"""The format registry, checked from its samples: every format has verbatim samples in
``tests/fixtures/formats/<id>/``, each with ``<sample>.expected.json`` beside it (the source URL,
the series and events the sample must give); detection picks the sample's format, and no other
format claims it at the same confidence and priority. Formats parse structured text only through
the bounded loaders of :mod:`trainaudit.safeio`."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import formats_doc
import pytest

from shared_data import write_lines

from trainaudit.ingest import base, detect, load_run
from trainaudit.ingest.base import Reader, Sample
from trainaudit.ingest.formats import FORMATS, all_readers, format_names
from trainaudit.ingest.sources import expand_inputs, read_head

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
PACKAGE = Path(__file__).resolve().parents[2] / "src" / "trainaudit" / "ingest" / "formats"
EXPECTED = ".expected.json"


def _samples() -> list[tuple[str, Path]]:
    return sorted((d.name, p) for d in SAMPLES.iterdir() if d.is_dir()
                  for p in d.rglob("*") if p.is_file() and not p.name.endswith(EXPECTED))


SAMPLE_FILES = _samples()
IDS = [str(p.relative_to(SAMPLES)) for _, p in SAMPLE_FILES]


def _number(v: Any) -> float:
    return float(v)  # "nan", "inf" and "-inf" are written as strings in JSON


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_every_format_has_a_sample_and_every_sample_a_format() -> None:
    assert {fmt for fmt, _ in SAMPLE_FILES} == set(format_names())


def test_every_sample_has_its_expected_file_with_a_source() -> None:
    for _, path in SAMPLE_FILES:
        expected = json.loads(path.with_name(path.name + EXPECTED).read_text(encoding="utf-8"))
        assert expected["source"].startswith(("https://", "recorded: ")), path


@pytest.mark.parametrize(("fmt", "path"), SAMPLE_FILES, ids=IDS)
def test_sample_is_detected_and_gives_its_series_and_events(fmt: str, path: Path) -> None:
    assert [d.reader.name for d in detect(expand_inputs([str(path)]))] == [fmt]
    expected = json.loads(path.with_name(path.name + EXPECTED).read_text(encoding="utf-8"))
    run, problems = load_run([str(path)])
    assert problems == []
    got = {name: {"n": len(s), "first": [int(s.steps[0]), float(s.values[0])],
                  "last": [int(s.steps[-1]), float(s.values[-1])]} for name, s in run.series.items()}
    assert sorted(got) == sorted(expected["series"])
    for name, want in expected["series"].items():
        have = got[name]
        assert have["n"] == want["n"], name
        for end in ("first", "last"):
            assert have[end][0] == want[end][0] and _same(have[end][1], _number(want[end][1])), (name, end, have[end])
    assert [{"kind": e.kind.value, "step": e.step} for e in run.events] == expected["events"]


@pytest.mark.parametrize(("fmt", "path"), SAMPLE_FILES, ids=IDS)
def test_no_sample_is_claimed_by_two_formats_at_the_same_priority(fmt: str, path: Path) -> None:
    inp = expand_inputs([str(path)])[0]
    sample = Sample.from_head(inp.name, read_head(inp))
    scores = [(r.sniff(sample), r.priority, r.name) for r in all_readers()]
    best = max(scores)
    tied = [name for score, priority, name in scores if (score, priority) == best[:2]]
    assert tied == [fmt], f"{path.name}: claimed by {tied} at confidence {best[0]}, priority {best[1].name}"


def test_the_registry_holds_every_format_of_the_package_once() -> None:
    names = [c.name for c in FORMATS]
    assert len(names) == len(set(names))
    assert all(c.__module__.startswith("trainaudit.ingest.formats.") for c in FORMATS)
    assert set(FORMATS) == set(base.registered_formats()) == \
        {c for c in Reader.registered if c.__module__.startswith("trainaudit.ingest.formats.")}
    # highest priority first, then by id
    assert [(-c.priority, c.name) for c in FORMATS] == sorted((-c.priority, c.name) for c in FORMATS)
    assert all(c.description for c in FORMATS)


_DIRECT = {("json", "loads"), ("json", "load"), ("yaml", "safe_load"), ("yaml", "load"), ("yaml", "full_load"),
           ("yaml", "unsafe_load"), ("yaml", "safe_load_all"), ("yaml", "load_all")}


def test_no_format_parses_json_or_yaml_without_the_bounded_loaders() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    (node.value.id, node.attr) in _DIRECT:
                bad.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module in ("json", "yaml") and \
                    any((node.module, a.name) in _DIRECT for a in node.names):
                bad.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
    assert not bad, "use trainaudit.safeio.load_json / load_yaml:\n" + "\n".join(bad)


def test_the_formats_tables_are_generated_from_the_registry() -> None:
    for path in formats_doc.DOCS:
        doc = path.read_text(encoding="utf-8")
        assert formats_doc.START in doc and formats_doc.updated(doc) == doc, \
            f"{path.name}: the formats table is stale: run python tools/formats_doc.py"
    assert all(f"| `{name}` |" in formats_doc.render() for name in format_names())


# A torchtitan log (its logger's "[titan] <time> - root - INFO -" prefix, torchtitan/train.py's
# "Training starts at step" line) whose metrics a hand-rolled loop printed in another spelling:
# torchtitan claims the file and finds nothing, the extractor reads its numbers.
CLAIMED_EMPTY = ["[titan] 2025-06-01 10:00:00,000 - root - INFO - Training starts at step 1",
                 "step 1 | loss 2.3012 | lr 0.001", "step 2 | loss 2.1008 | lr 0.001", "step 3 | loss 1.9876 | lr 0.001"]


def _series(run: Any) -> dict[str, tuple[list[int], list[float]]]:
    return {k: (s.steps.tolist(), s.values.tolist()) for k, s in run.series.items()}


def test_a_claimed_file_the_format_finds_nothing_in_is_read_once_by_the_extractor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "train.log", CLAIMED_EMPTY)
    assert [d.reader.name for d in detect(expand_inputs([str(path)]))] == ["torchtitan"]
    as_text = _series(load_run([str(path)], fmt="text")[0])
    assert as_text["loss"] == ([1, 2, 3], [2.3012, 2.1008, 1.9876])

    def second_read() -> None:
        raise AssertionError("the file was read a second time")

    monkeypatch.setattr(base, "fallback_format", second_read)
    run, problems = load_run([str(path)])
    assert problems == [] and _series(run) == as_text


def test_past_the_records_it_holds_the_extractor_leaves_the_file_to_the_fallback_format(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # long enough for the extractor to decide its step counter and hand records over as it reads
    loop = [f"step {i} | loss {2.3 - i * 1e-4:.4f} | lr 0.001" for i in range(4, 20_000)]
    path = write_lines(tmp_path / "train.log", CLAIMED_EMPTY + loop)
    as_text = _series(load_run([str(path)], fmt="text")[0])
    assert len(as_text["loss"][0]) == 19_999
    calls: list[str] = []
    real = base.fallback_format

    def counted() -> base.NumbersReader:
        calls.append("fallback")
        return real()

    monkeypatch.setattr(base, "SPARE_RECORDS", 1)
    monkeypatch.setattr(base, "fallback_format", counted)
    run, problems = load_run([str(path)])
    assert calls == ["fallback"] and problems == [] and _series(run) == as_text


def test_a_format_that_reads_something_keeps_the_extractor_out(tmp_path: Path) -> None:
    # the torchtitan sample: the format's own series only, none of the extractor's
    run, _ = load_run([str(SAMPLES / "torchtitan" / "train.log")])
    assert "step" not in run.series and run.meta.get("framework") == "torchtitan"
