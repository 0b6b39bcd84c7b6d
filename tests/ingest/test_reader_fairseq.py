"""fairseq / metaseq logs in every --log-format, on the verbatim samples."""

from __future__ import annotations

import math
from pathlib import Path

from shared_data import corpus_log, run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

SIMPLE = sample_block("fairseq.txt", "fairseq/issues/2338")
OVERFLOW = sample_block("fairseq.txt", "fairseq/issues/1967")
OLD_INNER = sample_block("fairseq.txt", "fairseq/issues/940 ")
EPOCH_SUMMARY = sample_block("fairseq.txt", "fairseq/issues/514 ")
OLD_WARNING = corpus_log("fairseq-NVIDIA-DeepLearningExamples-146")[:1]
JSON_2018 = sample_block("fairseq.txt", "fairseq/issues/233 ")
METASEQ = sample_block("fairseq.txt", "metaseq/pull/507")
METASEQ_STEP1 = sample_block("rank_prefixes.txt", "metaseq/pull/507")
NO_TIMESTAMP = sample_block("fairseq.txt", "fairseq/issues/2584")
DISCO = sample_block("fairseq.txt", "DisCo/issues/1")
TQDM = sample_block("fairseq.txt", "fairseq/issues/259 ")
HF = sample_block("hf_transformers.txt", "transformers/pull/35207")
NANOGPT = sample_block("nanogpt.txt", "nanoGPT/issues/167")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def _load(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    log = write_lines(tmp_path / "fs.log", lines)
    run, problems = load_run([str(log)])
    assert problems == []
    return run


def test_simple_format_step_is_num_updates(tmp_path: Path) -> None:
    run = _load(tmp_path, SIMPLE)
    assert run.frameworks == ["fairseq"] and run.meta["framework"] == "fairseq"
    loss = run.series["loss"]
    assert loss.steps.tolist() == [2800, 2900] and loss.values.tolist() == [9.255, 8.979]
    assert loss.lines.tolist() == [1, 2]
    assert run.series["gnorm"].value_at(2900) == 2.39
    assert run.series["lr"].value_at(2800) == 2.8e-05
    assert "num_updates" not in run.series


def test_overflow_notices_after_a_logged_update(tmp_path: Path) -> None:
    run = _load(tmp_path, SIMPLE + OVERFLOW)
    assert run.series["loss_scale"].steps.tolist() == [2901, 2902]
    assert run.series["loss_scale"].values.tolist() == [64.0, 32.0]
    evs = [e for e in run.events if e.kind == EventKind.LOSS_SCALE]
    assert [(e.step, e.line, e.data["new"]) for e in evs] == [(2901, 3, 64.0), (2902, 4, 32.0)]
    assert all(e.data["step_estimated"] for e in evs)


def test_old_overflow_warning(tmp_path: Path) -> None:
    run = _load(tmp_path, OLD_WARNING)
    ev = next(e for e in run.events if e.kind == EventKind.LOSS_SCALE)
    assert ev.data["new"] == 0.5 and ev.step == 1


def test_old_inner_line_and_mid_epoch_valid(tmp_path: Path) -> None:
    run = _load(tmp_path, OLD_INNER)
    assert run.series["loss"].steps.tolist() == [445] and run.series["loss"].values.tolist() == [11.521]
    assert run.series["clip"].value_at(445) == 0.0  # "clip=0%"
    assert run.series["loss_scale"].value_at(445) == 2.0
    assert run.series["valid_loss"].steps.tolist() == [600]
    assert run.series["valid_loss"].values.tolist() == [8.11425]
    assert run.series["valid_ppl"].value_at(600) == 118.06


def test_epoch_summaries_are_prefixed(tmp_path: Path) -> None:
    run = _load(tmp_path, EPOCH_SUMMARY)
    assert run.series["train_loss"].steps.tolist() == [21896]
    assert run.series["train_loss"].values.tolist() == [6.326]
    assert run.series["train_clip"].value_at(21896) == 0.0
    assert run.series["valid_loss"].value_at(21896) == 6.43844
    assert run.series["valid_best"].value_at(21896) == 6.43844
    assert "loss" not in run.series  # epoch averages never mix with train_inner windows


def test_modern_valid_summary_with_best_loss(tmp_path: Path) -> None:
    run = _load(tmp_path, DISCO)
    assert run.series["valid_loss"].steps.tolist() == [72571]
    assert run.series["valid_loss"].values.tolist() == [5.616]
    assert run.series["valid_best_loss"].value_at(72571) == 5.58679
    assert run.series["valid_length_loss"].value_at(72571) == 4.98517


def test_json_format_string_values_and_percent(tmp_path: Path) -> None:
    run = _load(tmp_path, JSON_2018)
    assert run.series["loss"].steps.tolist() == [53749] and run.series["loss"].values.tolist() == [3.097]
    assert run.series["clip"].value_at(53749) == 100.0  # "100%"
    assert run.series["loss_scale"].value_at(53749) == 4.0
    # The valid record has no num_updates: it belongs to the last logged update.
    assert run.series["valid_loss"].steps.tolist() == [53749]
    assert run.series["valid_loss"].values.tolist() == [3.1106161256777836]


def test_metaseq_json_behind_prefixes(tmp_path: Path) -> None:
    run = _load(tmp_path, METASEQ_STEP1 + METASEQ)
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [15.878, 15.864]
    assert run.series["wpb"].value_at(2) == 1.04858e6
    assert run.series["cuda_gb_free"].value_at(1) == 59.6


def test_simple_format_without_timestamp(tmp_path: Path) -> None:
    run = _load(tmp_path, NO_TIMESTAMP)
    assert run.series["loss"].steps.tolist() == [15001] and run.series["loss"].values.tolist() == [6.628]
    assert run.series["wpb"].value_at(15001) == 262143.968


def test_tqdm_two_bars_on_one_line(tmp_path: Path) -> None:
    run = _load(tmp_path, TQDM)
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2] and loss.values.tolist() == [15.106, 15.275]
    assert loss.lines.tolist() == [1, 1]
    assert run.series["ppl"].value_at(2) == 36932.57
    # The first bar's postfix is cut by the next bar: its last pair ("ups=0.0") may be truncated.
    assert run.series["ups"].steps.tolist() == [2]


def test_nan_and_inf_spellings(tmp_path: Path) -> None:
    lines = [SIMPLE[0].replace("loss=9.255", "loss=nan"),
             JSON_2018[0].replace('"loss": "3.097"', '"loss": "inf"')]
    run = _load(tmp_path, lines)
    loss = run.series["loss"]
    assert loss.steps.tolist() == [2800, 53749]
    assert math.isnan(loss.values[0]) and loss.values[1] == math.inf


def test_detection_against_other_readers(tmp_path: Path) -> None:
    blocks = (SIMPLE, OVERFLOW, OLD_INNER, EPOCH_SUMMARY, OLD_WARNING, JSON_2018, METASEQ, NO_TIMESTAMP, DISCO, TQDM)
    for i, block in enumerate(blocks):
        assert _detected(write_lines(tmp_path / f"fs{i}.log", block)) == "fairseq"
    assert _detected(write_lines(tmp_path / "hf.log", HF)) == "hf"
    assert _detected(write_lines(tmp_path / "nanogpt.log", NANOGPT)) == "nanogpt"


def test_cli_parse_fairseq(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "fs.log", SIMPLE + OVERFLOW)
    res = run_cli("parse", str(log))
    assert res.returncode == 0, res.stderr
    assert "fairseq" in res.stdout and "loss_scale=2" in res.stdout and "2800..2902" in res.stdout


def test_a_loops_step_epoch_loss_pipes_are_no_fairseq_summary(tmp_path: Path) -> None:
    # fairseq pads its epoch to 3 digits ("epoch 008 |"); NeMo Automodel's and many hand-written loops'
    # "step 4 | epoch 0 | loss 1.5514 | ..." are read by their step, every line a point
    lines = corpus_log("nemo-NVIDIA-NeMo-Automodel-docs-finetune-sample")
    log = write_lines(tmp_path / "train.log", lines)
    assert _detected(log) != "fairseq"
    run, _ = load_run([str(log)])
    assert run.series["loss"].steps.tolist()[:3] == [4, 8, 12]
    assert run.series["loss"].values.tolist()[:3] == [1.5514, 0.7913, 0.4358]
