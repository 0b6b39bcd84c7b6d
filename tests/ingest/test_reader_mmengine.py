"""MMEngine / mmcv 1.x / mmdet 0.x text logs on the verbatim samples."""

from __future__ import annotations

import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs

XTUNER = sample_block("mmengine.txt", "xtuner/issues/187")
MMDET3 = sample_block("mmengine.txt", "mmdetection/issues/10164")
YOLO_WORLD = sample_block("mmengine.txt", "YOLO-World/issues/359")
EARLY = sample_block("mmengine.txt", "mmengine/pull/155")
MMCV1 = sample_block("mmengine.txt", "mmdetection/issues/4090")
MMCLS_VAL = sample_block("mmengine.txt", "ASL/issues/90")
MMDET0 = sample_block("mmengine.txt", "mmdetection/issues/64")
KERAS = sample_block("keras.txt", "mnist_convnet")
LIGHTNING = sample_block("pytorch_lightning.txt", "pytorch-lightning/issues/14094")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def _load(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    log = write_lines(tmp_path / "mm.log", lines)
    run, problems = load_run([str(log)])
    assert problems == []
    return run


def test_mmengine_train_lines_global_iteration_and_nan(tmp_path: Path) -> None:
    run = _load(tmp_path, XTUNER)
    assert run.frameworks == ["mmengine"] and run.meta["framework"] == "mmengine"
    assert run.meta["iters_per_epoch"] == 735
    loss = run.series["loss"]
    assert loss.steps.tolist() == [200, 230, 240]
    assert loss.values.tolist() == [2.7522, 2.7682, 2.5128]
    gn = run.series["grad_norm"]
    assert gn.values[0] == 3.0608 and gn.values[1] == 2.5099 and math.isnan(gn.values[2])
    assert run.series["lr"].value_at(200) == 1.9870e-04
    assert run.series["memory"].value_at(230) == 10762.0
    assert "eta" not in run.series


def test_mmdet3_right_aligned_epoch_and_eta_with_days(tmp_path: Path) -> None:
    run = _load(tmp_path, MMDET3)
    assert run.series["loss"].steps.tolist() == [8600]
    assert run.series["loss"].values.tolist() == [0.3249]
    assert run.series["loss_bbox_rf"].value_at(8600) == 0.1006
    assert run.series["time"].value_at(8600) == 0.8205
    assert "eta" not in run.series and "days" not in " ".join(run.series)


def test_early_mmengine_negative_loss(tmp_path: Path) -> None:
    run = _load(tmp_path, EARLY)
    assert run.series["loss"].steps.tolist() == [10, 30]
    assert run.series["loss"].values.tolist() == [11.4723, -6.0185]


def test_coco_copypaste_keeps_minus_one_sentinel(tmp_path: Path) -> None:
    run = _load(tmp_path, YOLO_WORLD)
    # The val progress line carries only timing: no series from it.
    assert "time" not in run.series and "val/time" not in run.series
    assert run.series["bbox_mAP"].steps.tolist() == [104]
    assert run.series["bbox_mAP"].values.tolist() == [0.753]
    assert run.series["bbox_mAP_50"].value_at(104) == 0.985
    assert run.series["bbox_mAP_s"].value_at(104) == -1.0
    assert run.series["bbox_mAP_l"].lines.tolist() == [3]
    assert run.meta["val_step_unit"] == "epoch"


def test_mmcv1_comma_format(tmp_path: Path) -> None:
    run = _load(tmp_path, MMCV1)
    assert run.meta["framework"] == "mmdet"
    assert run.series["loss"].steps.tolist() == [2150] and run.series["loss"].values.tolist() == [1.0037]
    assert run.series["acc"].value_at(2150) == 90.0684
    assert run.series["loss_rpn_bbox"].value_at(2150) == 0.0825
    assert run.series["memory"].value_at(2150) == 3946.0
    assert "eta" not in run.series


def test_mmcls_epoch_val_line(tmp_path: Path) -> None:
    run = _load(tmp_path, MMCLS_VAL)
    assert run.series["mAP"].steps.tolist() == [32] and run.series["mAP"].values.tolist() == [0.8237]
    assert run.series["OF1_top3"].value_at(32) == 0.7390


def test_val_metrics_land_at_the_end_of_their_epoch_when_iterations_are_known(tmp_path: Path) -> None:
    run = _load(tmp_path, MMCV1 + MMCLS_VAL)
    assert run.series["mAP"].steps.tolist() == [32 * 29317]
    assert run.meta["val_step_unit"] == "iteration"


def test_mmdet0_without_logger_name(tmp_path: Path) -> None:
    run = _load(tmp_path, MMDET0)
    # epoch 3, iteration 50 of 2500
    assert run.series["loss"].steps.tolist() == [2 * 2500 + 50]
    assert run.series["loss"].values.tolist() == [0.0394]
    assert run.series["lr"].value_at(5050) == 0.02
    assert run.meta["framework"] == "mmcv"


def test_detection_against_other_readers(tmp_path: Path) -> None:
    for i, block in enumerate((XTUNER, MMDET3, YOLO_WORLD, EARLY, MMCV1, MMCLS_VAL, MMDET0)):
        assert _detected(write_lines(tmp_path / f"mm{i}.log", block)) == "mmengine"
    assert _detected(write_lines(tmp_path / "keras.log", KERAS)) == "keras"
    assert _detected(write_lines(tmp_path / "pl.log", LIGHTNING)) == "lightning"


def test_cli_parse_mmengine(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "mm.log", XTUNER)
    out = tmp_path / "series.jsonl"
    res = run_cli("parse", str(log), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert "mmengine" in res.stdout
    text = out.read_text()
    assert '"step": 240' in text and '"metric": "grad_norm"' in text and '"nan"' in text
