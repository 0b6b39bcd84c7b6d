"""PyTorch Lightning with its default progress bar, run as a user runs it. With ``rich`` installed
(a trainaudit dependency) Lightning's default bar is the RichProgressBar; written to a file, Rich
prints the bar once, when the fit ends, after Lightning's banner and model-summary table. The
default logger (TensorBoard, installed here) writes every step and epoch to lightning_logs/.

The run: a wide MLP on 64 noisy training points for 40 epochs (as the synth case
``lightning-overfit`` in tools/synth/frameworks.py), validation every epoch; it overfits."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shared_data import run_cli
from trainaudit.ingest import load_run

TRAIN_PY = '''\
import lightning.pytorch as pl
import torch
from torch import nn

pl.seed_everything(94, verbose=False)
torch.set_num_threads(1)
g = torch.Generator().manual_seed(94)
centres = torch.randn(8, 20, generator=g)


def points(n):
    y = torch.randint(0, 8, (n,), generator=g)
    return centres[y] + 1.6 * torch.randn(n, 20, generator=g), y


x, y = points(64)
flip = torch.rand(64, generator=g) < 0.3
y = torch.where(flip, torch.randint(0, 8, (64,), generator=g), y)
vx, vy = points(1024)


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))

    def training_step(self, batch, batch_idx):
        loss = nn.functional.cross_entropy(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)


train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)
val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(vx, vy), batch_size=256)
trainer = pl.Trainer(max_epochs=40, accelerator="cpu", log_every_n_steps=1, enable_checkpointing=False)
trainer.fit(Classifier(), train, val)
'''
EPOCHS, BATCHES = 40, 4
JUNK = ("Total params", "Trainable params", "Non-trainable params", "col1", "col2", "col3", "using", "it/s",
        "max_epochs", "Modules in train mode", "Total FLOPs", "v_num")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    proj = tmp_path_factory.mktemp("plproj")
    (proj / "train.py").write_text(TRAIN_PY)
    with open(proj / "out.log", "w") as out:  # python train.py > out.log 2>&1
        subprocess.run([sys.executable, "train.py"], cwd=proj, stdout=out, stderr=subprocess.STDOUT, check=True,
                       timeout=600)
    return proj


def _printed(log: str, name: str) -> float:
    """The last value the bar printed for ``name`` (Rich may wrap "name:" and its value apart)."""
    return float(re.findall(rf"\b{name}:\s+([\d.]+)", log)[-1])


def test_the_default_bar_is_rich_and_printed_once(project: Path) -> None:
    log = (project / "out.log").read_text(encoding="utf-8")
    assert "━" in log and "┃ Name" in log and "Total params" in log  # Rich's bar and summary table
    assert len(re.findall(rf"Epoch \d+/{EPOCHS - 1}", log)) == 1


def test_the_rich_bar_gives_the_last_epoch_metrics_and_no_junk(project: Path) -> None:
    log = (project / "out.log").read_text(encoding="utf-8")
    run, problems = load_run([str(project / "out.log")])
    assert problems == []
    assert [s.format for s in run.sources] == ["lightning"] and run.frameworks == ["lightning"]
    assert sorted(run.series) == ["epoch", "train_loss", "val_loss"]
    last = EPOCHS * BATCHES  # the bar's step: epoch 39, batch 4 of 4
    assert run.series["epoch"].steps.tolist() == [last] and run.series["epoch"].values.tolist() == [EPOCHS - 1]
    assert run.series["val_loss"].values.tolist() == [_printed(log, "val_loss")]
    assert run.series["train_loss"].values.tolist() == [_printed(log, "train_loss")]
    assert run.meta["lightning.batches_per_epoch"] == BATCHES
    for junk in JUNK:
        assert junk not in run.series


def test_the_project_folder_is_diagnosed_as_overfitting(project: Path, tmp_path: Path) -> None:
    # the folder as the run left it: train.py, out.log and lightning_logs/version_0/
    run, _ = load_run([str(project)])
    formats = {Path(s.path).name.split(".")[0]: s.format for s in run.sources}
    assert formats == {"out": "lightning", "events": "tensorboard"}
    # the logger's per-step training loss and per-epoch validation loss
    assert len(run.series["val_loss"].values) >= EPOCHS
    assert len(run.series["train_loss"].values) >= EPOCHS * BATCHES
    for junk in JUNK:
        assert junk not in run.series
    res = run_cli("diagnose", project.name, "-o", str(tmp_path / "out"), "--json", cwd=project.parent)
    assert res.returncode == 1, res.stderr  # not healthy
    answer = json.loads(res.stdout)
    assert answer["final_answer"]["verdict"] == "unhealthy"
    assert answer["final_answer"]["category"] == "overfitting", answer["final_answer"]["summary"]
    assert [f["rule"] for f in answer["findings"] if f["category"] == "overfitting"] == ["TA301"]
    assert "train.py" not in json.dumps(answer["findings"])


@pytest.fixture(scope="module")
def terminal_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run on a terminal (a pty, as ``script`` or a CI runner with a TTY records it):
    Rich redraws its live bar in place, so the capture holds the bar of every epoch."""
    import os
    import pty

    proj = tmp_path_factory.mktemp("plterm")
    (proj / "train.py").write_text(TRAIN_PY)
    main, child = pty.openpty()
    env = dict(os.environ, COLUMNS="120", LINES="40")
    proc = subprocess.Popen([sys.executable, "train.py"], cwd=proj, stdout=child, stderr=child, env=env)
    os.close(child)
    captured = bytearray()
    while True:
        try:
            block = os.read(main, 1 << 16)
        except OSError:  # EIO: the child side closed
            break
        if not block:
            break
        captured += block
    os.close(main)
    assert proc.wait(timeout=600) == 0
    (proj / "typescript").write_bytes(bytes(captured))
    return proj / "typescript"


def test_a_terminal_capture_gives_every_epoch_and_overfitting(terminal_log: Path, tmp_path: Path) -> None:
    data = terminal_log.read_bytes()
    assert b"\x1b[" in data and data.count(b"Epoch ") > EPOCHS  # redrawn with cursor controls
    run, problems = load_run([str(terminal_log)])
    assert problems == [] and [s.format for s in run.sources] == ["lightning"]
    assert sorted(run.series) == ["epoch", "train_loss", "val_loss"]
    epochs = run.series["epoch"]
    # every epoch's bar, each at the step of its batch (epoch * 4 + n)
    assert set(epochs.values.tolist()) == set(range(EPOCHS))
    for step, epoch in zip(epochs.steps.tolist(), epochs.values.tolist(), strict=True):
        assert (step - 1) // BATCHES == epoch
    val_steps = set(run.series["val_loss"].steps.tolist())
    assert len({(s - 1) // BATCHES for s in val_steps}) >= EPOCHS - 1  # validation from epoch 1 on
    res = run_cli("diagnose", terminal_log.name, "-o", str(tmp_path / "out"), "--json", cwd=terminal_log.parent)
    answer = json.loads(res.stdout)
    assert answer["final_answer"]["category"] == "overfitting", answer["final_answer"]["summary"]


def test_a_banner_without_a_bar_still_reads_the_scripts_own_prints(tmp_path: Path) -> None:
    # enable_progress_bar=False and a script that prints its own epoch lines: the banner claims the
    # file for Lightning, the prints are still read
    log = tmp_path / "out.log"
    log.write_text("GPU available: False, used: False\nTPU available: False, using: 0 TPU cores\n"
                   + "".join(f"epoch {e} train_loss {2.0 - 0.4 * e:.2f} val_loss {1.9 - 0.1 * e:.2f}\n"
                             for e in range(5)))
    run, problems = load_run([str(log)])
    assert problems == [] and [s.format for s in run.sources] == ["lightning"]
    assert run.series["train_loss"].values.tolist() == [2.0, 1.6, 1.2, 0.8, 0.4]
    assert run.series["val_loss"].steps.tolist() == [0, 1, 2, 3, 4]
