"""PyTorch Lightning progress-bar stdout and CSVLogger metrics.csv."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

BAR_14094 = sample_block("pytorch_lightning.txt", "pytorch-lightning/issues/14094")
BAR_4225 = sample_block("pytorch_lightning.txt", "pytorch-lightning/issues/4225")
BAR_ANEMOI = sample_block("pytorch_lightning.txt", "anemoi-core/issues/614")
BAR_COLAB = sample_block("pytorch_lightning.txt", "caduceus/issues/47")
CSV_SORTED = sample_block("pytorch_lightning.txt", "DanyaSH759/MLOps_homework")
CSV_INSERTION = sample_block("pytorch_lightning.txt", "Jordi6/pytorchLit15min")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
KERAS_NAN = sample_block("keras.txt", "image-segmentation-keras/issues/50")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def test_bar_postfix_values_and_global_step(tmp_path: Path) -> None:
    run, problems = load_run([str(write_lines(tmp_path / "train.log", BAR_14094))])
    assert problems == [] and run.frameworks == ["lightning"]
    # Validation bar (line 1) carries no training metrics; epoch 0, batches 932 and 933 of 1016.
    assert run.series["loss"].steps.tolist() == [932, 933]
    assert run.series["loss"].values.tolist() == [0.223, 0.223]
    assert run.series["loss"].lines.tolist() == [2, 3]
    assert run.series["acc"].values.tolist() == [0.875, 0.875]
    assert "v_num" not in run.series and run.meta["lightning.v_num"] == "77"
    assert run.meta["lightning.batches_per_epoch"] == 1016
    assert run.events == []

    assert run.series["it/s"].values.tolist() == [27.70, 27.71]  # the bar's speed, as for every tqdm bar

    run, _ = load_run([str(write_lines(tmp_path / "old.log", BAR_4225))])
    assert run.series["loss"].steps.tolist() == [1, 2]  # s/it rate variant
    assert run.series["loss"].values.tolist() == [10.473, 10.224]


def test_later_epochs_offset_by_batches_per_epoch(tmp_path: Path) -> None:
    # The colab-style sample line, and the same line as printed one epoch later.
    later = BAR_COLAB[0].replace("Epoch 0:", "Epoch 1:").replace("loss=1.2", "loss=0.9")
    lines = BAR_COLAB + [later] + BAR_ANEMOI
    run, _ = load_run([str(write_lines(tmp_path / "train.log", lines))])
    # Epoch 1 batch 1020 of 3000 -> 3000 + 1020; anemoi's epoch-0 line (total 150000) comes after.
    assert run.series["loss"].steps.tolist() == [1020, 4020]
    assert run.series["loss"].values.tolist() == [1.2, 0.9]
    assert run.series["epoch"].value_at(4020) == 1.0
    assert run.series["epoch"].value_at(3744) == 0.0  # string v_num and '...' postfix: no metric


def test_carriage_return_states_nan_spellings_and_messages(tmp_path: Path) -> None:
    # Raw terminal framing: bar states joined by \r on one physical line. Lightning's padded
    # NaN/Inf spellings (computed from Lightning's Tqdm.format_num) and the
    # EarlyStopping / fit-stopped messages use the templates of lightning 2.x.
    nan_state = BAR_4225[1].replace("2/18", "3/18").replace("loss=10.224", "loss=nan.0")
    inf_state = BAR_4225[1].replace("2/18", "4/18").replace("loss=10.224", "loss=-inf.")
    physical = "\r".join([BAR_4225[0], BAR_4225[1], nan_state, inf_state])
    messages = ["Monitored metric val_loss = nan is not finite. Previous best value was inf. "
                "Signaling Trainer to stop.",
                "`Trainer.fit` stopped: `max_epochs=1` reached."]
    run, _ = load_run([str(write_lines(tmp_path / "raw.log", [physical] + messages))])
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2, 3, 4]
    assert loss.values.tolist()[:2] == [10.473, 10.224]
    assert math.isnan(loss.values[2]) and loss.values[3] == -math.inf
    assert loss.lines.tolist() == [1, 1, 1, 1]
    kinds = [(e.kind, e.line, e.step) for e in run.events]
    assert kinds == [(EventKind.NAN_CHECK, 2, 4), (EventKind.PHASE, 3, 4)]
    assert run.events[0].data["groups"] == ["val_loss", "nan"]
    assert run.events[1].data["completed"] is True


def test_the_scripts_own_prints_between_redraws_stand_at_their_counter(tmp_path: Path) -> None:
    """A NaN or the last batch before a crash can fall between two redraws of the bar; a print that
    carries the script's step counter says where. Lightning's summary rows, other bars and a
    traceback's lines are no prints; a print counted in epochs is not at the bar's steps."""
    def bar(n: int, loss: str) -> str:
        return f"Epoch 0:  {n * 100 // 200:2d}%|█         | {n}/200 [00:00<00:01, 90.00it/s, v_num=0, train_loss={loss}]"

    lines = [
        "  | Name | Type       | Params | Mode", "0 | net  | Sequential | 5.8 K  | train", "Trainable params: 5.8 K",
        "Sanity Checking ━━━━━━╺━━━━━━ 1/2 0:00:00 • 0:00:00 0.00it/s",
        "\r".join([bar(10, "1.20"), bar(20, "0.90")]) + "step 20 | epoch 0 | loss 0.8871",  # glued to the redraw
        "step 30 | epoch 0 | loss 0.7308",
        "epoch 0 val_loss 0.55",  # counted in epochs: not at the bar's steps
        "step 45 | epoch 0 | loss nan",
        bar(50, "nan.0"),
        "step 90 | epoch 0 | loss nan",
        "Traceback (most recent call last):",
        '  File "train.py", line 991, in <module>',
        "    fit(model, printer=10, max_epochs=5, log_every_n_steps=10)",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    run, problems = load_run([str(write_lines(tmp_path / "train.log", lines))])
    assert problems == [] and run.frameworks == ["lightning"]
    loss = run.series["loss"]
    assert loss.steps.tolist() == [20, 30, 45, 90]
    assert loss.values.tolist()[:2] == [0.8871, 0.7308] and math.isnan(loss.values[2])
    assert run.series["train_loss"].steps.tolist() == [10, 20, 50]
    assert sorted(run.series) == ["epoch", "it/s", "loss", "train_loss"]  # no summary, val-by-epoch or code numbers
    oom = [e for e in run.events if e.kind is EventKind.OOM]
    assert oom and oom[0].step == 90  # after the last print, not the last redraw (50)


def test_a_print_counter_that_restarts_is_not_read_further(tmp_path: Path) -> None:
    def bar(n: int) -> str:
        return f"Epoch 0:  {n // 2:2d}%|█         | {n}/200 [00:00<00:01, 90.00it/s, train_loss=1.0]"

    lines = [bar(10), "step inf | loss 1.0", "step nan | loss 1.0", "step 2.5 | loss 1.0",  # no step: left out
             "step 10 | loss 0.9", "step 20 | loss 0.8", "step 5 | loss 0.7", "step 30 | loss 0.6", bar(40)]
    run, _ = load_run([str(write_lines(tmp_path / "train.log", lines))])
    assert run.series["loss"].steps.tolist() == [10, 20]  # "step" counts within something else: left out


def test_csv_logger_sparse_rows(tmp_path: Path) -> None:
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    path = write_lines(folder / "metrics.csv", CSV_SORTED)
    run, problems = load_run([str(path)])
    assert problems == [] and run.frameworks == ["lightning_csv"]
    tl = run.series["train_loss"]
    assert tl.steps.tolist() == [0, 1, 4, 5]
    assert tl.values.tolist() == [944.161865234375, 966.3953247070312, 838.2781982421875, 968.5335083007812]
    assert tl.lines.tolist() == [2, 3, 4, 6]
    vl = run.series["val_loss"]  # the val row shares step 4 with a train row
    assert vl.steps.tolist() == [4] and vl.values.tolist() == [681.5775146484375] and vl.lines.tolist() == [5]
    assert run.series["epoch"].value_at(5) == 1.0
    assert run.events == []

    # Older insertion-order header (train_loss,step,epoch); NaN cells are kept as NaN.
    path = write_lines(tmp_path / "metrics.csv", CSV_INSERTION + ["nan,149,1"])
    run, _ = load_run([str(path)])
    assert run.series["train_loss"].steps.tolist() == [49, 99, 149]
    assert run.series["train_loss"].values.tolist()[:2] == [0.06728213280439377, 0.038861844688653946]
    assert math.isnan(run.series["train_loss"].values[2])


def test_cli_parse(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "metrics.csv", CSV_SORTED)
    out = tmp_path / "rows.csv"
    proc = run_cli("parse", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "lightning_csv" in proc.stdout
    rows = [r for r in csv.DictReader(out.open()) if r["metric"] == "val_loss"]
    assert [(r["step"], r["value"], r["line"], r["format"]) for r in rows] == [
        ("4", "681.5775146484375", "5", "lightning_csv")]


def test_detection(tmp_path: Path) -> None:
    assert _detected(write_lines(tmp_path / "a.log", BAR_14094)) == "lightning"
    assert _detected(write_lines(tmp_path / "b.log", BAR_COLAB)) == "lightning"
    assert _detected(write_lines(tmp_path / "metrics.csv", CSV_SORTED)) == "lightning_csv"
    assert _detected(write_lines(tmp_path / "whatever.csv", CSV_INSERTION)) == "lightning_csv"
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "k.log", KERAS_NAN)) == "keras"
    # Only a validation bar: no training bar, so not claimed as a Lightning training log.
    assert _detected(write_lines(tmp_path / "v.log", BAR_14094[:1])) != "lightning"


def test_malformed_csv_keeps_rows_before_and_reports_one_problem(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "metrics.csv", CSV_SORTED[:3] + ['0,2,"' + "x" * 200_000])
    run, problems = load_run([str(path)])
    assert run.series["train_loss"].steps.tolist() == [0, 1]
    assert len(problems) == 1 and problems[0].fatal
    assert "malformed CSV at line 4" in str(problems[0])
