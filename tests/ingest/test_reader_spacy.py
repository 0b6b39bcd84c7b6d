"""spaCy's ``spacy train`` console table."""

from __future__ import annotations

import math
from pathlib import Path

from shared_data import corpus_log, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs

DEMO = corpus_log("spacy-explosion-spaCy-examples-ner-demo")  # the NER demo's published output


def test_the_step_is_the_hash_column_and_scores_are_the_evaluations(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "train.log", DEMO)
    assert detect(expand_inputs([str(path)]))[0].reader.name == "spacy"
    run, problems = load_run([str(path)])
    assert problems == [] and run.meta["framework"] == "spacy"
    # the row at step 0 sums one update, the others ten: its losses are left out, its scores kept
    assert run.series["LOSS NER"].steps.tolist() == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert run.series["LOSS NER"].values.tolist()[:4] == [71.07, 22.44, 6.38, 0.0]
    assert run.series["val ENTS_F"].steps.tolist() == list(range(0, 101, 10))
    assert run.series["val SCORE"].values.tolist()[-1] == 1.0
    assert "E" not in run.series and "#" not in run.series


def test_non_finite_losses_and_a_paste_from_mid_run(tmp_path: Path) -> None:
    rows = ["E         #  LOSS TOK2VEC  LOSS TAGGER  TAG_ACC   SCORE ",
            "---  ------  ------------  -----------  -------  ------",
            "  0     800        145.80       416.22    44.20    0.44",
            "  1    1000           nan          nan     0.20    0.00"]
    run, _ = load_run([str(write_lines(tmp_path / "train.log", rows))])
    assert run.series["LOSS TAGGER"].steps.tolist() == [800, 1000]
    assert math.isnan(run.series["LOSS TAGGER"].values[1])
    assert run.series["val TAG_ACC"].values.tolist() == [44.2, 0.2]
    # a row of another width is no row of the table
    run, _ = load_run([str(write_lines(tmp_path / "short.log", [*rows, "  1    1200    1.0"]))])
    assert run.series["LOSS TAGGER"].steps.tolist() == [800, 1000]
