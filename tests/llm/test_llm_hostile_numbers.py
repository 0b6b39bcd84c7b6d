"""An LLM answer holding numbers no float holds (1e999, -1e999, 1e-999, NaN, a 5000-digit integer) in
its text, as an index or as an evidence id: the narrator keeps the engine's answer where the wording
does not check out, and nothing raises (before, ``1e999`` in a sentence ended in OverflowError, exit 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared_data import sample_block, write_lines
from trainaudit.answer.validate import validate
from trainaudit.diagnosis import build_answer, diagnose_run
from trainaudit.ingest import load_run
from trainaudit.llm import narrate, parse_spec

ITER_LINES = sample_block("megatron.txt", "Megatron-LM/issues/756")
OOM_LINE = sample_block("error_signatures.txt", "murong-xu/CADS/issues/4")
HUGE = ["1e999", "-1e999", "1e-999", "NaN", "9" * 5000]


@pytest.mark.parametrize("number", HUGE)
def test_numbers_past_float_in_an_llm_answer(number: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             fake_llm) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    write_lines(tmp_path / "train.log", ITER_LINES + OOM_LINE)
    run, _ = load_run(["train.log"])
    before = build_answer(["train.log"], run, diagnose_run(run))
    # the number as prose, and raw in the JSON where a number or a string is expected
    fake_llm.completion = (
        '{"summary": "The loss reached ' + number + ' at step ' + number + ' [F1].", '
        '"root_causes": [{"index": ' + (number if number[0].isdigit() or number[0] == "-" else "0") + ', '
        '"issue": "Memory grew by ' + number + ' GiB [F1].", "evidence": ["F1"]}], '
        '"hypotheses": [{"text": "A ' + number + '% spike.", "evidence": ["F' + number + '"], "check": "x"}]}')
    spec = parse_spec("openai:test-model", f"{fake_llm.url}/v1", 10.0, environ={})
    after = narrate(before, spec)
    fa, fb = after.final_answer, before.final_answer
    assert (fa.verdict, fa.category, fa.first_bad_step) == (fb.verdict, fb.category, fb.first_bad_step)
    if "e999" in number:  # a number no fact holds is dropped (1e-999 reads as 0, which a fact may hold)
        assert number not in fa.summary
    assert validate(after).all_passed
    assert len(fake_llm.requests) == 1
