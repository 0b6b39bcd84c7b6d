"""Ultralytics results.csv (8.3+ and 8.0.x padded) and console table, on the verbatim samples."""

from __future__ import annotations

import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs

CSV_83 = sample_block("ultralytics.txt", "yolo26-nutrition-detector")
CSV_80 = sample_block("ultralytics.txt", "YOLOv8-Fire-and-Smoke-Detection")
CONSOLE = sample_block("ultralytics.txt", "ultralytics/issues/7653")
NEGATIVE = sample_block("ultralytics.txt", "ultralytics/issues/21765")
LIGHTNING_CSV = sample_block("pytorch_lightning.txt", "MLOps_homework")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def _load(path: Path):  # type: ignore[no-untyped-def]
    run, problems = load_run([str(path)])
    assert problems == []
    return run


def test_results_csv_83_unpadded_with_time(tmp_path: Path) -> None:
    run = _load(write_lines(tmp_path / "results.csv", CSV_83))
    assert run.frameworks == ["ultralytics"] and run.meta["framework"] == "ultralytics"
    box = run.series["train/box_loss"]
    assert box.steps.tolist() == [1, 2, 49] and box.values.tolist() == [1.01057, 0.90306, 0.56111]
    assert box.lines.tolist() == [2, 3, 4]
    assert run.series["time"].value_at(49) == 1453.6
    assert run.series["metrics/mAP50-95(B)"].value_at(2) == 0.17406
    assert run.series["lr/pg0"].value_at(49) == 8.26832e-05
    assert "epoch" not in run.series


def test_results_csv_80_padded_zero_based(tmp_path: Path) -> None:
    run = _load(write_lines(tmp_path / "results.csv", CSV_80))
    box = run.series["train/box_loss"]
    assert box.steps.tolist() == [0, 1] and box.values.tolist() == [1.6878, 1.267]
    assert run.series["metrics/recall(B)"].values.tolist() == [0.2, 0.30556]
    assert run.series["lr/pg1"].value_at(1) == 0.0063445
    assert "time" not in run.series


def test_results_csv_nan_cells(tmp_path: Path) -> None:
    # save_metrics writes "%.6g": a NaN loss is written as "nan", an infinite one as "inf".
    rows = [CSV_83[0], CSV_83[1].replace(",1.01057,", ",nan,"), CSV_83[2].replace(",7.39181,", ",inf,")]
    run = _load(write_lines(tmp_path / "results.csv", rows))
    assert math.isnan(run.series["train/box_loss"].values[0])
    assert run.series["train/cls_loss"].values.tolist() == [8.41319, math.inf]


def test_console_table_and_val_summary(tmp_path: Path) -> None:
    run = _load(write_lines(tmp_path / "train.log", CONSOLE))
    assert run.series["box_loss"].steps.tolist() == [70] and run.series["box_loss"].values.tolist() == [1.081]
    assert run.series["cls_loss"].value_at(70) == 0.4706
    assert run.series["GPU_mem"].value_at(70) == 6.73
    assert run.series["metrics/precision(B)"].value_at(70) == 0.989
    assert run.series["metrics/mAP50-95(B)"].value_at(70) == 0.681
    assert run.series["metrics/mAP50-95(B)"].lines.tolist() == [4]


def test_console_row_without_header_and_num_classes(tmp_path: Path) -> None:
    # "Overriding model.yaml nc=80 with nc=2" is the trainer's own message (ultralytics
    # nn/tasks.py); the row below is verbatim with its header cut off.
    run = _load(write_lines(tmp_path / "train.log", ["Overriding model.yaml nc=80 with nc=2", *NEGATIVE]))
    assert run.meta["num_classes"] == 2
    assert run.series["box_loss"].steps.tolist() == [21] and run.series["box_loss"].values.tolist() == [-0.2338]
    assert run.series["dfl_loss"].value_at(21) == 2.977


def test_detection_against_other_readers(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "a.csv", CSV_83)) == "ultralytics"
    assert _detected(write_lines(tmp_path / "b.csv", CSV_80)) == "ultralytics"
    assert _detected(write_lines(tmp_path / "c.log", CONSOLE)) == "ultralytics"
    assert _detected(write_lines(tmp_path / "d.log", NEGATIVE)) == "ultralytics"
    assert _detected(write_lines(tmp_path / "metrics.csv", LIGHTNING_CSV)) == "lightning_csv"


def test_cli_parse_ultralytics(tmp_path: Path) -> None:
    res = run_cli("parse", str(write_lines(tmp_path / "results.csv", CSV_83)))
    assert res.returncode == 0, res.stderr
    assert "ultralytics" in res.stdout and "1..49" in res.stdout


RESULTS_TXT = sample_block("ultralytics.txt", "yolov7/issues/741")


def test_yolov5_style_results_txt_without_header(tmp_path: Path) -> None:
    """YOLOv5/YOLOv7 train.py's results.txt: named by position as the script writes it, step = the epoch printed."""
    path = write_lines(tmp_path / "results.txt", RESULTS_TXT)
    assert _detected(path) == "ultralytics"
    run = _load(path)
    total = run.series["train/total_loss"]
    assert total.steps.tolist() == [0, 1, 2, 3, 4, 5]
    assert total.values.tolist() == [0.06724, 0.05241, 0.05253, 0.05176, 0.06077, 0.05782]
    assert run.series["metrics/mAP_0.5"].value_at(4) == 0.0
    assert run.series["val/obj_loss"].value_at(4) == 0.09118
    assert run.series["GPU_mem"].value_at(0) == 11.8


def test_results_txt_row_with_bolded_cells_as_pasted(tmp_path: Path) -> None:
    row = RESULTS_TXT[0].replace("0.9422", "**0.9422**")
    run = _load(write_lines(tmp_path / "results.txt", [row]))
    assert run.series["metrics/precision"].value_at(0) == 0.9422
