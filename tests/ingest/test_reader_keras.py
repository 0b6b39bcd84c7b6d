"""Keras fit() stdout (Keras 3, tf.keras, verbose=2, TerminateOnNaN) and CSVLogger files."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from shared_data import corpus_log, run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

K3 = sample_block("keras.txt", "addition_rnn.md")
K2 = sample_block("keras.txt", "mnist_convnet.md")
VERBOSE2 = sample_block("keras.txt", "keras-complex/issues/22")
SCI = sample_block("keras.txt", "Progbar prints a value below 1e-3")
NAN = sample_block("keras.txt", "image-segmentation-keras/issues/50")
TERMINATE = sample_block("keras.txt", "Mobilenet-ssd-keras/issues/21")
SAMPLES = sample_block("keras.txt", "keras/pull/8169")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
LIGHTNING_CSV = sample_block("pytorch_lightning.txt", "DanyaSH759/MLOps_homework")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def _run(tmp_path: Path, lines: list[str], name: str = "fit.log"):  # type: ignore[no-untyped-def]
    run, problems = load_run([str(write_lines(tmp_path / name, lines))])
    assert problems == []
    return run


def test_keras3_final_bars_without_headers(tmp_path: Path) -> None:
    run = _run(tmp_path, K3)
    assert run.frameworks == ["keras"]
    # predict() bars (1/1, no metrics) are skipped; the two epoch-end bars are epochs 1 and 2.
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [1.8852, 1.4301]
    assert run.series["val_accuracy"].values.tolist() == [0.4116, 0.5708]
    assert run.series["loss"].lines.tolist() == [1, 4]
    assert run.events == []


def test_tf_keras_headers_and_interrupted_epoch(tmp_path: Path) -> None:
    run = _run(tmp_path, K2)
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [0.7840, 0.1199]
    assert run.series["val_accuracy"].values.tolist() == [0.9780, 0.9843]
    assert run.series["loss"].lines.tolist() == [2, 4]
    assert run.meta["keras.epochs"] == 15
    # The in-progress ETA bar is not an epoch value; it marks an epoch that never finished.
    [ev] = run.events
    assert ev.kind is EventKind.PHASE and ev.step == 3 and ev.line == 5
    assert ev.data["batch"] == 237 and ev.data["running_values"] == {"loss": 0.0398, "accuracy": 0.9877}


def test_verbose2_scientific_and_nan(tmp_path: Path) -> None:
    run = _run(tmp_path, VERBOSE2, "v2.log")
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [0.2431, 0.2135]
    assert run.series["loss"].lines.tolist() == [3, 5]  # TF C++ log line in between is ignored

    run = _run(tmp_path, SCI, "sci.log")
    assert run.series["acc"].values.tolist() == [0.0, 0.004]  # 0.0000e+00
    assert run.series["val_loss"].values.tolist() == [0.0291, 0.0544]

    run = _run(tmp_path, NAN, "nan.log")
    for name in ("loss", "acc", "val_loss", "val_acc"):
        assert run.series[name].steps.tolist() == [1]
        assert math.isnan(run.series[name].values[0])


def test_a_name_abbreviated_with_a_period(tmp_path: Path) -> None:
    # a Keras 0.x era progress line (written here in that shape): "val. loss" is the validation loss,
    # not a name cut at its period (the line's value was dropped)
    text = ("Train on 5823 samples, validate on 648 samples\nEpoch 0\n"
            "5823/5823 [==============================] - 322s - loss: 678.7651 - val. loss: 91479.6172\nEpoch 1\n"
            "5823/5823 [==============================] - 321s - loss: 619.2658 - val. loss: 95824.9844\n")
    run = _run(tmp_path, text.splitlines(), "abbr.log")
    assert run.series["val. loss"].values.tolist() == [91479.6172, 95824.9844]
    assert run.series["loss"].values.tolist() == [678.7651, 619.2658]


def test_an_evaluate_bar_after_the_last_epoch_is_no_training_value(tmp_path: Path) -> None:
    # fit() then evaluate() in Keras 3 (keras-4bumuhammad-python-keras-multivariate-regression-readme):
    # the bar after the epoch's validation is the test set's loss, not epoch 100's training loss
    lines = corpus_log("keras-4bumuhammad-python-keras-multivariate-regression-readme")
    run = _run(tmp_path, lines, "fit.log")
    loss = run.series["loss"]
    assert loss.steps[-1] == 100 and loss.values[-1] == 15.6716
    assert run.series["val_loss"].values[-1] == 27.3941
    # read in bulk (shaped rows) as line by line
    many = _run(tmp_path, lines * 40, "many.log")
    assert many.series["loss"].values[-1] == 15.6716


def test_terminate_on_nan_glued_to_bar(tmp_path: Path) -> None:
    run = _run(tmp_path, TERMINATE, "t.log")
    assert "loss" not in run.series  # only in-progress running averages were printed
    nan_ev, phase = run.events
    assert nan_ev.kind is EventKind.NAN_CHECK and nan_ev.line == 1 and nan_ev.step == 1
    assert nan_ev.data["batch"] == 3 and run.meta["step_text"] == {1: "epoch 1, batch 3"}
    assert phase.kind is EventKind.PHASE and phase.data["interrupted"] is True
    assert phase.data["batch"] == 4 and phase.data["nonfinite_metrics"] == ["loss"]
    assert phase.data["running_values"]["loss"] == math.inf


def test_sample_based_and_unknown_target(tmp_path: Path) -> None:
    run = _run(tmp_path, SAMPLES, "s.log")
    assert run.series["loss"].steps.tolist() == [1, 2]
    assert run.series["loss"].values.tolist() == [0.3437, 0.3281]
    assert run.series["val_acc"].values.tolist() == [0.9771, 0.9769]


def test_raw_terminal_redraws(tmp_path: Path) -> None:
    # Keras 3 on Linux writes "\b"*width + "\r" before each redraw and ANSI bold/colour codes
    # (keras' ProgbarLogger); the fixture's copy had them stripped, so rebuild one physical line.
    final = K3[0]
    in_progress = final.replace(" 1407/1407", "  700/1407").replace("loss: 1.8852", "loss: 2.5000")
    ansi = final.replace("1407/1407", "\x1b[1m1407/1407\x1b[0m").replace("8s", "\x1b[1m8s\x1b[0m")
    physical = in_progress + "\b" * len(in_progress) + "\r" + ansi
    run = _run(tmp_path, ["Epoch 1/2", physical], "raw.log")
    assert run.series["loss"].steps.tolist() == [1]
    assert run.series["loss"].values.tolist() == [1.8852]
    assert run.series["accuracy"].lines.tolist() == [2]
    assert run.events == []


def _csv_logger_file(tmp_path: Path) -> Path:
    # CSVLogger layout (keras.callbacks.CSVLogger): epoch (0-based) + sorted keys, NA for missing;
    # values are those of the Keras 3 sample's two epochs, then a diverged epoch.
    rows = ["epoch,accuracy,loss,val_accuracy,val_loss",
            "0,0.3224,1.8852,0.4116,1.5662",
            "1,0.4672,1.4301,NA,NA",
            "2,nan,nan,nan,inf"]
    return write_lines(tmp_path / "training.log.csv", rows)


def test_csv_logger(tmp_path: Path) -> None:
    run, problems = load_run([str(_csv_logger_file(tmp_path))])
    assert problems == [] and run.frameworks == ["keras_csv"]
    assert run.series["loss"].steps.tolist() == [0, 1, 2]
    assert run.series["loss"].values.tolist()[:2] == [1.8852, 1.4301]
    assert math.isnan(run.series["loss"].values[2])
    assert run.series["val_loss"].steps.tolist() == [0, 2]  # NA is "not logged", not a value
    assert run.series["val_loss"].values.tolist() == [1.5662, math.inf]
    assert run.series["val_loss"].lines.tolist() == [2, 4]
    assert run.meta["keras_csv.epoch_base"] == 0


def test_cli_parse(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    proc = run_cli("parse", str(write_lines(tmp_path / "fit.log", K2)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "keras" in proc.stdout
    rows = [(r["step"], r["value"], r["line"]) for r in csv.DictReader(out.open()) if r["metric"] == "loss"]
    assert rows == [("1", "0.784", "2"), ("2", "0.1199", "4")]


def test_detection(tmp_path: Path) -> None:
    for i, block in enumerate((K3, K2, VERBOSE2, SCI, NAN, TERMINATE, SAMPLES)):
        assert _detected(write_lines(tmp_path / f"k{i}.log", block)) == "keras"
    assert _detected(_csv_logger_file(tmp_path)) == "keras_csv"
    assert _detected(write_lines(tmp_path / "metrics.csv", LIGHTNING_CSV)) == "lightning_csv"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    # "Epoch 1/3" alone is printed by hand-written loops as much as by Keras: the generic reader takes it
    assert _detected(write_lines(tmp_path / "e.log", ["Epoch 1/3", "Traceback (most recent call last):"])) == "text"


def test_a_bar_past_its_total_closes_the_epoch(tmp_path: Path) -> None:
    # Keras 1's fit_generator prints "52/51" when the generator overshoots samples_per_epoch
    lines = ["Epoch 1/5", "52/51 [==============================] - 1423s - loss: 1.0097 - val_loss: 1.0082",
             "Epoch 2/5", "52/51 [==============================] - 1417s - loss: 1.0090 - val_loss: 1.0080"]
    run, _ = load_run([str(write_lines(tmp_path / "train.log", lines))])
    assert run.series["loss"].values.tolist() == [1.0097, 1.0090]
    assert run.series["val_loss"].steps.tolist() == [1, 2]


def test_a_running_value_that_turns_nan_mid_epoch_is_a_nan_check(tmp_path: Path) -> None:
    # tf.keras bars as posted in keras-team/keras#3664: the paste ends inside epoch 1
    lines = ["Epoch 1/2", "128/15998 [..............................] - ETA: 165s - loss: 2.9967 - acc: 0.0625",
             "256/15998 [..............................] - ETA: 150s - loss: nan - acc: 0.0508",
             "384/15998 [..............................] - ETA: 145s - loss: nan - acc: 0.0573"]
    run = _run(tmp_path, lines)
    nan_ev, phase = run.events
    assert nan_ev.kind is EventKind.NAN_CHECK and nan_ev.line == 3 and nan_ev.step == 1
    assert nan_ev.data == {"batch": 256, "epoch": 1, "metrics": ["loss"]}
    assert run.meta["step_text"] == {1: "epoch 1, batch 256/15998"}  # the step is the epoch; the line says more
    assert phase.kind is EventKind.PHASE and phase.data["nonfinite_metrics"] == ["loss"]
    # finite running values say nothing
    run = _run(tmp_path, [*lines[:2], lines[1].replace("128/", "256/")], "ok.log")
    assert [e.kind for e in run.events] == [EventKind.PHASE]


def test_a_history_dump_is_read_per_epoch_with_its_lines(tmp_path: Path) -> None:
    # json.dump(history.history, f, indent=...) as a Hugging Face model repository keeps it
    from shared_data import CORPUS_LOGS
    path = CORPUS_LOGS / "keras-hf-Alimustoofaa-chatgpt-detector-history" / "history.json"
    assert _detected(path) == "keras_history"
    run, problems = load_run([str(path)])
    assert problems == [] and sorted(run.series) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2, 3, 4, 5] and loss.lines.tolist() == [10, 11, 12, 13, 14]
    # the same on one line, with a NaN as json.dump writes it
    one = tmp_path / "history.json"
    one.write_text('{"loss": [0.9, 0.7, NaN], "val_loss": [1.0, 0.8, NaN]}', encoding="utf-8")
    run, _ = load_run([str(one)])
    assert math.isnan(run.series["loss"].values[-1]) and run.series["val_loss"].lines.tolist() == [1, 1, 1]


def test_json_that_is_no_history_is_not_claimed(tmp_path: Path) -> None:
    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"loss": [1.0], "step": 1}]}', encoding="utf-8")
    assert _detected(state) == "hf_trainer_state"
    bad = tmp_path / "history.json"
    bad.write_text('{"loss": [0.5, 0.4], "val_loss": [0.6, ', encoding="utf-8")  # cut short
    assert _detected(bad) == "keras_history"
    res = run_cli("diagnose", str(bad), "--out", str(tmp_path / "o"))
    # a cut file is still read, line by line, and says so in one line
    assert res.returncode == 0 and res.stderr.count("invalid Keras history JSON") == 1
