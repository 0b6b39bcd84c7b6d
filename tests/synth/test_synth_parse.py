"""`trainaudit parse` reads every file the generator writes, with the expected format and metrics."""

from __future__ import annotations

import csv
import io

import pytest
from shared_data import run_cli
from synth_fixture import SynthRuns

from synth import catalogue

PARSE_FORMAT = {"megatron": "megatron", "hf": "hf", "jsonl": "jsonl", "tensorboard": "tensorboard",
                "hf_trainer_state": "hf_trainer_state", "lightning": "lightning"}  # framework cases (synth/frameworks.py)


@pytest.mark.parametrize("name", list(catalogue()))
def test_parse_reads_every_file(synth_runs: SynthRuns, name: str, tmp_path) -> None:
    case = synth_runs.get(name)
    files = [f for f in case.label["files"] if f["format"] in PARSE_FORMAT]
    out = tmp_path / "series.csv"
    res = run_cli("parse", *(str(case.dir.parent / f["path"]) for f in files), "-o", str(out))
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    for f in files:
        path = str(case.dir.parent / f["path"])
        mine = [r for r in rows if r["source"] == path]
        assert mine, f"no series from {f['path']}"
        assert {r["format"] for r in mine} == {PARSE_FORMAT[f["format"]]}
        missing = set(f["metrics"]) - {r["metric"] for r in mine}
        assert not missing, f"{f['path']}: metrics not parsed: {sorted(missing)}"
        steps = {int(float(r["step"])) for r in mine}
        assert min(steps) >= 1 and len(steps) >= 30  # a restart's second event file starts at 101
