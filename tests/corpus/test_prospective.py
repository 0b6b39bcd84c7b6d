"""The answers recorded before their logs joined the corpus (tests/corpus/prospective.json): every
one names a corpus case and the commit that answered it, a log is recorded once, and docs/accuracy.md
shows them scored against today's labels. tools/score_unseen.py, which records them, leaves out what
the corpus already holds and answers a new case as the shipped diagnosis does."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import accuracy
import pytest
import score_unseen

from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run

DOC = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"


def _record() -> dict:
    return json.loads(accuracy.PROSPECTIVE.read_text(encoding="utf-8"))


def test_every_recorded_answer_names_a_corpus_case_once() -> None:
    record = _record()
    names = [c["case"] for b in record["batches"] for c in b["cases"]]
    assert len(names) >= 284 and len(names) == len(set(names))
    assert len({b["batch"] for b in record["batches"]}) == len(record["batches"])
    for b in record["batches"]:
        assert re.fullmatch(r"[0-9a-f]{7}", b["commit"]) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", b["date"])
        for c in b["cases"]:
            assert (accuracy.corpus_case(c["case"]) / "label.json").is_file(), c["case"]
            assert 0.0 <= c["confidence"] <= 1.0 and c["step_ok"] in (None, True, False)
    assert score_unseen.dump(record) == accuracy.PROSPECTIVE.read_text(encoding="utf-8")  # as the tool writes it


def test_accuracy_md_shows_the_recorded_answers_scored_against_the_labels() -> None:
    body = accuracy.render_prospective(_record())
    assert body.strip() in DOC.read_text(encoding="utf-8"), "run: python tools/accuracy.py prospective"
    n = sum(len(b["cases"]) for b in _record()["batches"])
    assert body.strip().splitlines()[-1].startswith(f"| all | | | {n} | "), body


def test_a_recorded_answer_is_scored_against_the_label_of_today(tmp_path: Path) -> None:
    case = "keras-ageron-handson-ml2-398"
    shutil.copytree(accuracy.CORPUS / "logs" / case, tmp_path / case)
    label = json.loads((tmp_path / case / "label.json").read_text(encoding="utf-8"))
    record = {"batches": [{"batch": "T", "commit": "0000000", "date": "2026-01-01", "cases": [
        {"case": case, "category": label["category"], "verdict": "unhealthy", "confidence": 0.9,
         "first_bad_step": None, "step_ok": True}]}]}
    assert "| T | 0000000 | 2026-01-01 | 1 | 1/1 (100%) | 1/1 (100%) | 0 of 0 | 0 | 1/1 (100%) |" in \
        accuracy.render_prospective(record, (tmp_path,))
    label["category"] = "healthy"  # a label corrected later: the same answer is now a false alarm
    (tmp_path / case / "label.json").write_text(json.dumps(label), encoding="utf-8")
    assert "| T | 0000000 | 2026-01-01 | 1 | 0/1 (0%) | 1/1 (100%) | 1 of 1 | 0 | 0/1 (0%) |" in \
        accuracy.render_prospective(record, (tmp_path,))


def test_score_unseen_leaves_out_the_corpus_and_answers_as_diagnose(tmp_path: Path) -> None:
    known = "keras-ageron-handson-ml2-398"
    shutil.copytree(accuracy.CORPUS / "logs" / known, tmp_path / known)
    shutil.copytree(accuracy.CORPUS / "logs" / known, tmp_path / "new-case")
    cases = score_unseen.unseen_cases([tmp_path])
    assert [c.name for c in cases] == ["new-case"]
    assert [c.name for c in score_unseen.unseen_cases([tmp_path / "new-case"])] == ["new-case"]
    [outcome] = score_unseen.score(cases)
    d = diagnose_run(load_run([str(cases[0].path)])[0])
    assert (outcome.result.category, outcome.result.verdict, outcome.result.first_bad) == \
        (str(d.category), d.verdict, d.first_bad_step)
    assert abs(outcome.confidence - d.confidence) < 1e-9


def test_score_unseen_refuses_a_path_that_is_not_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        score_unseen.main([str(tmp_path / "missing")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and err[-1].endswith(f"not a folder: {tmp_path / 'missing'}")


def test_score_unseen_records_nothing_when_every_case_has_been_seen(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    known = "keras-ageron-handson-ml2-398"
    shutil.copytree(accuracy.CORPUS / "logs" / known, tmp_path / known)
    before = accuracy.PROSPECTIVE.read_bytes()
    with pytest.raises(SystemExit) as exc:
        score_unseen.main([str(tmp_path), "--record", "BXX"])
    assert exc.value.code == 2 and "nothing to record" in capsys.readouterr().err
    assert accuracy.PROSPECTIVE.read_bytes() == before
