"""Generic CSV/TSV, JSONL and key=value readers: real files forced and detected, NaN spellings,
and that the specific readers win detection over these low-confidence ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs

LIGHTNING_CSV = sample_block("pytorch_lightning.txt", "MLOps_homework")
LIGHTNING_CSV_OLD = sample_block("pytorch_lightning.txt", "pytorchLit15min")
WANDB_SUMMARY = sample_block("wandb_mlflow.txt", "wandb-summary.json")
FAIRSEQ_JSON = sample_block("fairseq.txt", "fairseq/issues/233 ")
I6 = sample_block("rank_prefixes.txt", "i6_core/pull/658")
TORCHTITAN = sample_block("torchtitan.txt", "torchtitan/pull/2389")
NEMO2 = sample_block("nemo.txt", "bionemo-recipes/pull/740")
NANOGPT = sample_block("nanogpt.txt", "nanoGPT/issues/167")
ULTRA = sample_block("ultralytics.txt", "yolo26-nutrition-detector")
HF = sample_block("hf_transformers.txt", "transformers/pull/35207")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


# -- CSV -------------------------------------------------------------------------------------

def test_csv_forced_on_a_real_sparse_csvlogger_file(tmp_path: Path) -> None:
    run, problems = load_run([str(write_lines(tmp_path / "metrics.csv", LIGHTNING_CSV))], fmt="csv")
    assert problems == [] and run.frameworks == ["csv"]
    tl = run.series["train_loss"]
    assert tl.steps.tolist() == [0, 1, 4, 5]
    assert tl.values.tolist() == [944.161865234375, 966.3953247070312, 838.2781982421875, 968.5335083007812]
    assert run.series["val_loss"].steps.tolist() == [4]
    assert run.series["val_loss"].values.tolist() == [681.5775146484375]
    assert run.series["val_loss"].lines.tolist() == [5]
    assert run.series["epoch"].value_at(5) == 1.0 and "step" not in run.series


def test_csv_step_column_anywhere_in_the_header(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "m.csv", LIGHTNING_CSV_OLD))], fmt="csv")
    assert run.series["train_loss"].steps.tolist() == [49, 99]
    assert run.series["train_loss"].values.tolist() == [0.06728213280439377, 0.038861844688653946]


def test_tsv_without_step_column_uses_row_number_and_nan_spellings(tmp_path: Path) -> None:
    rows = ["loss\tacc\tnote", "2.5\t0.1\tok", "nan\tNaN\tx", "-inf\tInfinity\ty", "inf\t0.4"]
    path = write_lines(tmp_path / "m.tsv", rows)
    assert _detected(path) == "csv"
    run, _ = load_run([str(path)])
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2, 3]  # the short last row is not a row of this table
    assert loss.values[0] == 2.5 and math.isnan(loss.values[1]) and loss.values[2] == -math.inf
    assert math.isnan(run.series["acc"].values[1]) and run.series["acc"].values[2] == math.inf
    assert "note" not in run.series


def test_csv_loses_detection_to_specific_readers(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "metrics.csv", LIGHTNING_CSV)) == "lightning_csv"
    assert _detected(write_lines(tmp_path / "results.csv", ULTRA)) == "ultralytics"


# -- JSONL -----------------------------------------------------------------------------------

def test_jsonl_forced_on_a_real_wandb_summary(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "s.json", WANDB_SUMMARY))], fmt="jsonl")
    # Keys are as written; "_step" is the step (no plain step/global_step key at the top level).
    assert run.series["train/loss"].steps.tolist() == [1218]
    assert run.series["train/loss"].values.tolist() == [0.338]
    assert run.series["train/global_step"].value_at(1218) == 1218.0
    assert "_step" not in run.series


def test_jsonl_real_fairseq_lines_forced_use_epoch(tmp_path: Path) -> None:
    run, _ = load_run([str(write_lines(tmp_path / "f.jsonl", FAIRSEQ_JSON))], fmt="jsonl")
    assert run.series["loss"].steps.tolist() == [25] and run.series["loss"].values.tolist() == [3.097]
    assert run.series["num_updates"].value_at(25) == 53749.0
    assert run.series["valid_loss"].value_at(25) == 3.1106161256777836


def test_jsonl_nan_spellings_and_record_index(tmp_path: Path) -> None:
    lines = [json.dumps({"step": 10, "loss": 2.0, "tag": "a"}),
             json.dumps({"step": 20, "loss": float("nan")}),  # Python writes NaN
             '{"step": 30, "loss": nan}',  # not valid JSON, seen in hand-rolled loggers
             json.dumps({"step": 40, "loss": "-inf", "opt": {"lr": 0.1}})]
    path = write_lines(tmp_path / "m.jsonl", lines)
    assert _detected(path) == "jsonl"
    run, _ = load_run([str(path)])
    loss = run.series["loss"]
    assert loss.steps.tolist() == [10, 20, 30, 40]
    assert loss.values[0] == 2.0 and math.isnan(loss.values[1]) and math.isnan(loss.values[2])
    assert loss.values[3] == -math.inf
    assert run.series["opt/lr"].value_at(40) == 0.1 and "tag" not in run.series
    run2, _ = load_run([str(write_lines(tmp_path / "n.jsonl", ['{"loss": 1.5}', '{"loss": 1.25}']))])
    assert run2.series["loss"].steps.tolist() == [1, 2]


def test_jsonl_loses_detection_to_fairseq_and_hf(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "f.log", FAIRSEQ_JSON)) == "fairseq"
    assert _detected(write_lines(tmp_path / "hf.log", HF)) == "hf"


# -- key=value (the format-agnostic extractor) -------------------------------------------------------------------------------

def test_kv_real_i6_lines_with_ranks(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "train.log", I6)
    assert _detected(path) == "text"
    run, problems = load_run([str(path)])
    assert problems == [] and run.frameworks == ["text"]
    assert run.series["ce"].steps.tolist() == [1347] and run.series["ce"].values.tolist() == [0.324]
    assert run.series["ce@rank3"].values.tolist() == [0.355]
    assert run.series["grad_norm:p2"].value_at(1347) == 3.388
    assert run.series["mem_usage:cuda:0"].value_at(1347) == 67.8
    assert run.series["complete"].value_at(1347) == 81.92
    assert "cuda" not in run.series and "elapsed" not in run.series


def test_kv_equals_and_colon_forms_with_nan(tmp_path: Path) -> None:
    lines = ["2024-05-01 10:00:00 INFO step=1 loss=2.50 lr=1e-4", "step: 2, loss: nan, lr: 1e-4",
             "iteration 3 | loss -inf | lr 1e-4", "no numbers here"]
    path = write_lines(tmp_path / "t.log", lines)
    assert _detected(path) == "text"
    run, _ = load_run([str(path)])
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2, 3]
    assert loss.values[0] == 2.5 and math.isnan(loss.values[1]) and loss.values[2] == -math.inf
    assert run.series["lr"].values.tolist() == [1e-4, 1e-4, 1e-4]


def test_kv_loses_detection_to_specific_readers(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "tt.log", TORCHTITAN)) == "torchtitan"
    assert _detected(write_lines(tmp_path / "nemo.log", NEMO2)) == "nemo"
    assert _detected(write_lines(tmp_path / "ng.log", NANOGPT)) == "nanogpt"


def test_cli_parse_generic(tmp_path: Path) -> None:
    res = run_cli("parse", str(write_lines(tmp_path / "train.log", I6)))
    assert res.returncode == 0, res.stderr
    assert "text" in res.stdout and "1347" in res.stdout
    res = run_cli("parse", "--format", "csv", str(write_lines(tmp_path / "m.csv", LIGHTNING_CSV)))
    assert res.returncode == 0, res.stderr
    assert "csv" in res.stdout and "0..5" in res.stdout


# -- pretty-printed JSON objects (a pasted excerpt of trainer_state.json) ------------------------

def _trainer_state_excerpt() -> str:
    """``log_history`` as HF's TrainerState.save_to_json writes it (``json.dumps(..., indent=2,
    sort_keys=True)``: one key a line, ``step`` after the metrics), cut where a paste cuts it: no
    opening brace of the document, no closing brackets."""
    history = [{"epoch": 6.33, "learning_rate": 3.49e-05, "loss": 14.8414, "step": 500},
               {"epoch": 6.33, "eval_loss": float("nan"), "eval_wer": 1.0, "note": "a, b", "step": 500},
               {"epoch": 12.66, "learning_rate": 8.34e-05, "loss": 0.0, "step": 1000},
               {"epoch": 12.66, "eval_loss": float("nan"), "eval_wer": 1.0, "note": "a, b", "step": 1000}]
    text = json.dumps({"global_step": 1000, "log_history": history}, indent=2, sort_keys=True)
    return "\n".join(text.splitlines()[1:-2]) + "\n"


def test_pretty_printed_json_objects_are_one_record_each_at_their_step(tmp_path: Path) -> None:
    path = tmp_path / "state.txt"
    path.write_text(_trainer_state_excerpt(), encoding="utf-8")
    run, problems = load_run([str(path)])
    assert problems == []
    assert run.series["loss"].steps.tolist() == [500, 1000]
    assert run.series["loss"].values.tolist() == [14.8414, 0.0]
    ev = run.series["eval_loss"]
    assert ev.steps.tolist() == [500, 1000] and all(math.isnan(v) for v in ev.values)
    assert run.series["eval_wer"].steps.tolist() == [500, 1000]


def test_a_nested_object_is_not_read_as_a_record(tmp_path: Path) -> None:
    """A key that opens a nested object ends the flat object: its inner keys are not the outer's."""
    path = tmp_path / "nested.txt"
    path.write_text('{\n  "loss": 2.5,\n  "extra": {\n    "loss": 9.0\n  },\n  "step": 10\n}\n'
                    '{\n  "loss": 2.25,\n  "step": 20\n}\n', encoding="utf-8")
    run, _ = load_run([str(path)])
    assert run.series["loss"].steps.tolist()[-1] == 20
    assert run.series["loss"].values.tolist()[-1] == 2.25
    assert 9.0 not in run.series["loss"].values.tolist()
