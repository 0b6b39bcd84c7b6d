"""The bulk path of the line formats that read by segment shape (``formats/shaped.py``) gives what
their line reader gives: the same series (steps, values bitwise, lines), events and metadata, on
logs built from the pieces real logs mix (tqdm redraws with carriage returns, train and eval dicts,
NaN/inf, quoted values, launcher prefixes, ANSI colours, a traceback in the middle of a line of
redraws, broken UTF-8, blank lines, CRLF), with chunks small enough that their edges fall inside
dicts and runs of redraws. The bulk path must also be used: a test cannot pass with every line
left to the line reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_text_bulk import snapshot as run_snapshot

from trainaudit.ingest import load_run
from trainaudit.ingest.formats import shaped
from trainaudit.ingest.formats.deepspeed import DeepSpeedReader, _WithHF
from trainaudit.ingest.formats.fairseq import FairseqReader
from trainaudit.ingest.formats.hf import HFReader
from trainaudit.ingest.formats.keras import KerasReader
from trainaudit.ingest.formats.lightning import LightningReader
from trainaudit.ingest.formats.shaped import ShapedReader, ShapeTable
from trainaudit.ingest.formats.torchtitan import TorchtitanReader
from trainaudit.model import Run

def snapshot(run: Run) -> tuple:
    """The series, events (their raw text included) and metadata of a run."""
    return run_snapshot(run), [(e.line, e.raw) for e in run.events]


NUMBERS = ["0.5", "10.7052", "1.4999999998982809e-05", "nan", "inf", "-inf", "3", "0.0", "2.5E+00", "1e-3",
           "123456789012345678", ".5", "-0.25"]


@st.composite
def dicts(draw: st.DrawFn) -> str:
    keys = draw(st.lists(st.sampled_from(["loss", "grad_norm", "learning_rate", "epoch", "eval_loss", "step",
                                          "train_runtime", "mean_token_accuracy"]), min_size=1, max_size=4,
                         unique=True))
    quote = draw(st.sampled_from(["", "'"]))
    items = []
    for k in keys:
        v = draw(st.sampled_from(NUMBERS)) if k != "step" else str(draw(st.integers(0, 99)))
        items.append(f"'{k}': {quote}{v}{quote}")
    return "{" + ", ".join(items) + "}"


@st.composite
def bars(draw: st.DrawFn) -> str:
    total = draw(st.sampled_from([50, 200, 1000]))
    n = draw(st.integers(0, total))
    fill = draw(st.sampled_from(["", "█", "##"]))
    return f"{n * 100 // total:3d}%|{fill * (n * 10 // total):10s}| {n}/{total} [00:01<00:09, {draw(st.integers(1, 99))}.00it/s]"


PIECES = st.one_of(
    dicts(), bars(), bars(), bars(),
    st.sampled_from([" " * 20, "", "[rank1]: ", "\x1b[32m", "\x1b[0m", "Traceback (most recent call last):",
                     '  File "train.py", line 3, in main', "RuntimeError: CUDA out of memory", "\xff",
                     "***** Running training *****", "{'eval_loss': 2.5, 'epoch': 1.0}", "}", "noise {"]),
)


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 60))):
        segs = draw(st.lists(PIECES, min_size=0, max_size=5))
        lines.append("\r".join(segs))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    data = ending.join(lines) + draw(st.sampled_from(["", ending]))
    return data.encode("utf-8", "surrogateescape").replace("\xff".encode(), b"\xff")


HEAD = "".join(f"{{'loss': {3 - i / 10}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'epoch': {i / 10}}}\n"
               for i in range(3)).encode()


class Placed:
    """Counts the ROW segments the formats' bulk path found."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        real = ShapeTable.chunk

        def spy(table: ShapeTable, data: bytes) -> shaped.Chunk:
            got = real(table, data)
            self.rows += int(got.segments.shape[1])
            return got

        monkeypatch.setattr(ShapeTable, "chunk", spy)


def written(path: Path, head: str, lines: list[list[str]], ending: str = "\n") -> Path:
    """``head``, then a line of carriage-return segments for each of ``lines``, each ending in
    ``ending`` ("\\xff" as a raw byte: invalid UTF-8)."""
    body = (head + "\n".join("\r".join(segs) for segs in lines) + "\n").replace("\n", ending)
    path.write_bytes(body.encode("utf-8", "surrogateescape").replace("\xff".encode(), b"\xff"))
    return path


def both(path: Path, reader: type[ShapedReader | DeepSpeedReader], monkeypatch: pytest.MonkeyPatch) -> tuple[Run, tuple]:
    """The run ``reader`` reads in bulk and its snapshot, once the line reader has read the same:
    series, events, metadata and input problems (a reader's error is a problem of the input)."""
    bulk, problems = load_run([str(path)], reader.name)
    with monkeypatch.context() as m:
        m.setattr(reader, "bulk", False)
        lines, problems_lines = load_run([str(path)], reader.name)
    got = snapshot(bulk)
    assert got == snapshot(lines)
    assert problems == problems_lines
    return bulk, got


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=logs(), chunk=st.sampled_from([64, 301, 4096]))
# a bar's rate flushed with the head's last dict, and a dict with a new key in the same run of lines: the
# series come in the same order as the line reader's
@example(body=b"  6%|          | 3/50 [00:01<00:09, 1.00it/s]\r  0%|          | 0/50 [00:01<00:09, 1.00it/s]\r"
              b"{'mean_token_accuracy': 0.5}\n  0%|          | 0/50 [00:01<00:09, 1.00it/s]\n", chunk=4096)
def test_hf_bulk_reads_what_the_line_reader_reads(body: bytes, chunk: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    path = tmp_path / "r.log"
    path.write_bytes(HEAD + body)
    both(path, HFReader, monkeypatch)


def test_a_plain_hf_log_is_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    lines = []
    for step in range(1, 301):
        redraws = "".join(f"\r{step * 100 // 300:3d}%|{'█' * (step // 30):10s}| {k}/300 [00:01<00:09,  2.{k % 10}0it/s]"
                          for k in range(step, step + 3))
        lines.append(redraws + f"\r{{'loss': {10 / step!r}, 'grad_norm': {'nan' if step > 250 else 1 / step!r}, "
                     f"'learning_rate': {step * 1e-6!r}, 'epoch': {step / 100:.2f}}}")
        if step % 100 == 0:
            lines.append(f"{{'eval_loss': {step / 7:.4f}, 'epoch': {step / 100:.2f}}}")
    path = tmp_path / "hf.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, got = both(path, HFReader, monkeypatch)
    assert placed.rows > 250
    series = {k: (steps, lines_) for k, steps, _, lines_ in got[0][0]}
    assert series["loss"][0][:3] == [2, 3, 4]  # each dict at the count of the bar after it
    assert "eval_loss" in series


@st.composite
def lightning_bars(draw: st.DrawFn) -> str:
    total = draw(st.sampled_from([40, 1000]))
    n = draw(st.integers(0, total))
    desc = draw(st.sampled_from(["Epoch 0", "Epoch 1", "Epoch 3", "Validation DataLoader 0", "Sanity Checking"]))
    loss = draw(st.sampled_from(["10.8", "2.31", "nan.0", "inf.0", "-inf.", "0.5", "1.63e+6", "x"]))
    items = draw(st.sampled_from([f"v_num={draw(st.integers(0, 9))}, train_loss={loss}", f"train_loss={loss}",
                                  f"loss={loss}, acc=0.{draw(st.integers(0, 99))}", ""]))
    postfix = f", {items}" if items else ""
    # the bar's speed: iterations a second, seconds an iteration once slower than 1 it/s, or not known yet
    rate = draw(st.sampled_from(["27.42it/s", "1.61s/it", "?it/s", "0.00it/s"]))
    return f"{desc}: {n * 100 // total:3d}%|{'█' * (n * 10 // total):10s}| {n}/{total} [00:01<00:09, {rate}{postfix}]"


LIGHTNING_PIECES = st.one_of(
    lightning_bars(), lightning_bars(), lightning_bars(),
    st.sampled_from([" " * 20, "", "[rank1]: ", "\x1b[32m", "Traceback (most recent call last):",
                     '  File "train.py", line 3, in main', "RuntimeError: CUDA out of memory", "\xff",
                     "The loss returned in `training_step` is nan.", "`Trainer.fit` stopped: `max_epochs=2` reached.",
                     "Epoch 1/1 ━━━━━━━━ 4/4 0:00:00 • 0:00:00 801.66it/s v_num: 0.000", "    train_loss: 0.500",
                     "GPU available: True (cuda), used: True", "Epoch 2: 50%|█████     | 2/4 [00:01<?, ?it/s]",
                     "Epoch 4: 0%|          | 17/? [00:01<?, ?it/s, train_loss=0.5]",
                     "Epoch 1: 0%|          | 9/? [00:01<?, ?it/s, train_loss=0.25]",
                     # the script's own prints: alone, glued to a redraw, without a counter, a summary row
                     "step 145 | epoch 0 | loss nan", "step 12 | loss 0.5", "iteration 3 loss=0.25 lr=1e-3",
                     "Epoch 0:  50%|█████     | 20/40 [00:00<00:00, 27.42it/s, train_loss=0.269]step 20 | loss 0.2694",
                     "Validation DataLoader 0: 100%|██████████| 3/3 [00:00<00:00, 145.03it/s][val] step 60 val_loss=0.0039",
                     "loss 0.25 acc 0.5", "0 | net  | Sequential | 5.8 K", "Trainable params: 5.8 K"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(st.lists(LIGHTNING_PIECES, min_size=0, max_size=8), min_size=1, max_size=30),
       chunk=st.sampled_from([64, 301, 4096]))
def test_lightning_bulk_reads_what_the_line_reader_reads(segments: list[list[str]], chunk: int, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    head = "\r".join(f"Epoch 0:   {k}%|          | {k}/40 [00:00<00:36, 27.42it/s, v_num=3, train_loss=10.8]"
                     for k in range(1, 4))
    both(written(tmp_path / "l.log", head + "\n", segments), LightningReader, monkeypatch)


def test_a_plain_lightning_log_is_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    epochs = []
    for epoch in range(3):
        bars = [f"Epoch {epoch}: {k * 100 // 200:3d}%|{'█' * (k // 20):10s}| {k}/200 [00:01<00:09, 27.42it/s, "
                f"v_num=3, train_loss={'nan.0' if epoch == 2 and k > 100 else f'{10 / k:.4g}'}]" for k in range(1, 201)]
        val = [f"Validation DataLoader 0: {k * 10}%|          | {k}/10 [00:00<00:00, 90.00it/s]" for k in range(11)]
        epochs.append("\r".join(bars + val))
    path = tmp_path / "l.log"
    path.write_text("\n".join(epochs) + "\n", encoding="utf-8")
    bulk, _ = both(path, LightningReader, monkeypatch)
    assert placed.rows >= 400
    loss = bulk.series["train_loss"]
    assert loss.steps[-1] == 600 and np.isnan(loss.values[-1])
    assert bulk.series["it/s"].steps[-1] == 600 and bulk.series["it/s"].values[-1] == 27.42  # the bar's speed


def test_lightning_bars_without_total_count_on_from_the_bulk_rows(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A bar of unknown total starts its epoch where the last epoch's count ended (its last ``n``,
    kept by the bulk rows since the epoch changed)."""
    first = "\r".join(f"Epoch 0: {k}%|          | {k}/40 [00:00<00:36, 27.42it/s, train_loss={10 - k / 10}]"
                      for k in range(1, 31))
    second = "\r".join(f"Epoch 1: {k}%|          | {k}/40 [00:00<00:36, 27.42it/s, train_loss={5 - k / 10}]"
                       for k in range(1, 6))
    path = tmp_path / "l.log"
    path.write_text(f"{first}\n{first}\r{second}\nEpoch 2: 0%|          | 7/? [00:01<?, ?it/s, train_loss=0.5]\n",
                    encoding="utf-8")
    bulk, _ = both(path, LightningReader, monkeypatch)
    assert bulk.series["train_loss"].steps[-1] == 40 + 5 + 7


@st.composite
def keras_bars(draw: st.DrawFn) -> str:
    total = draw(st.sampled_from(["120", "8", "Unknown"]))
    size = int(total) if total.isdigit() else 50
    n = draw(st.one_of(st.integers(0, 130), st.sampled_from([size - 1, size, size + 1])))
    loss = draw(st.sampled_from(["10.8040", "nan", "inf", "0.5", "1.5e-05", "7"]))
    bar = draw(st.sampled_from(["[>.........] - ", "━━━━━━━━━━ ", "- "]))
    timing = draw(st.sampled_from(["ETA: 2s - ", "1s 8ms/step - ", "0s - ", ""]))
    metrics = draw(st.sampled_from([f"loss: {loss} - accuracy: 0.4861", f"loss: {loss}", "", f"loss: {loss} - loss: 1.0"]))
    return f"{n:3d}/{total} {bar}{timing}{metrics}" + "\b" * draw(st.sampled_from([0, 3, 40]))


KERAS_PIECES = st.one_of(
    *[keras_bars()] * 8,
    st.sampled_from(["Epoch 1/3", "Epoch 2/3", "Epoch 3/3", "", " " * 5, "\b\b\b", "[rank1]: ", "\x1b[32m",
                     "Batch 3: Invalid loss, terminating training", "Traceback (most recent call last):",
                     '  File "train.py", line 3, in main', "RuntimeError: boom", "\xff", 'Model: "sequential"']),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(st.lists(KERAS_PIECES, min_size=0, max_size=8), min_size=1, max_size=30),
       chunk=st.sampled_from([64, 301, 4096]))
def test_keras_bulk_reads_what_the_line_reader_reads(segments: list[list[str]], chunk: int, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    # a first epoch with its final bar: the format has found something, the rest may be read in bulk
    head = ("Epoch 1/3\n" + "\r".join(f"  {k}/8 [>.......] - ETA: 2s - loss: 1.{k}" for k in range(1, 8))
            + "\r  8/8 [========] - 1s 8ms/step - loss: 1.0\n")
    both(written(tmp_path / "k.log", head, segments), KerasReader, monkeypatch)


def test_a_plain_keras_log_is_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    out = []
    for epoch in range(1, 6):
        loss = "nan" if epoch == 5 else f"{3 / epoch:.4f}"
        bars = [f"{k:3d}/40 [{'=' * (k // 4)}>{'.' * (10 - k // 4)}] - ETA: 1s - loss: {loss}" + "\b" * 50
                for k in range(1, 40)]
        out.append(f"Epoch {epoch}/6\n" + "\r".join(bars) + f"\r 40/40 [==========] - 1s 8ms/step - loss: {loss}")
    out.append("Epoch 6/6\n" + "\r".join(f"{k:3d}/40 [>.........] - ETA: 1s - loss: 0.{k:02d}" for k in range(1, 9)))
    path = tmp_path / "k.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    bulk, _ = both(path, KerasReader, monkeypatch)
    assert placed.rows >= 150
    assert bulk.series["loss"].steps.tolist() == [1, 2, 3, 4, 5] and np.isnan(bulk.series["loss"].values[-1])
    interrupted = [e for e in bulk.events if e.kind.value == "phase"]
    assert interrupted and interrupted[-1].data["batch"] == 8


@st.composite
def titan_lines(draw: st.DrawFn) -> str:
    step = draw(st.integers(1, 6))
    loss = draw(st.sampled_from(["10.79512", "nan", "inf", "3.2", "1e-3"]))
    tps = draw(st.sampled_from(["10,003", "9,955", "812", "1,234,567", "N/A"]))
    mfu = draw(st.sampled_from(["14.05%", "N/A", "0.17%"]))
    validate = draw(st.sampled_from(["", "validate "]))
    body = (f"{validate}step: {step:2d}  loss: {loss}  grad_norm:  0.7758  memory: 66.91GiB(37.51%)  tps: {tps}  "
            f"tflops: 315.51  mfu: {mfu}")
    colour = draw(st.booleans())
    if colour:
        body = f"\x1b[32m{body}\x1b[39m"
    line = f"[titan] 2026-02-24 19:46:11,684 - root - INFO - {body}"
    prefix = draw(st.sampled_from(["", "[rank0]:", "[rank1]:", "[rank12]:", "3: ", "[default2]:"]))
    return prefix + line


TITAN_PIECES = st.one_of(
    *[titan_lines()] * 6,
    st.sampled_from(["", " " * 4, "[titan] 2026-02-24 19:46:10,000 - root - INFO - Starting job: Llama 3 8B training",
                     "Traceback (most recent call last):", '  File "train.py", line 3, in main', "RuntimeError: boom",
                     "\xff", "W0224 19:46:09.113000 1234 torch/distributed/run.py:793] Setting OMP_NUM_THREADS"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.lists(TITAN_PIECES, min_size=1, max_size=2), min_size=1, max_size=40),
       chunk=st.sampled_from([64, 301, 4096]))
def test_torchtitan_bulk_reads_what_the_line_reader_reads(lines: list[list[str]], chunk: int, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    head = "[titan] 2026-02-24 19:46:11,684 - root - INFO - step:  1  loss: 10.79512  grad_norm:  0.7758\n"
    both(written(tmp_path / "t.log", head, lines), TorchtitanReader, monkeypatch)


def test_torchrun_ranks_are_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    out = ["[titan] 2026-02-24 19:46:10,000 - root - INFO - Starting job"]
    for step in range(1, 101):
        for rank in (0, 1, 2):
            loss = "nan" if step > 90 else f"{10 - step / 20:.5f}"
            out.append(f"[rank{rank}]:[titan] 2026-02-24 19:46:11,684 - root - INFO - \x1b[32mstep: {step:3d}  "
                       f"loss: {loss}  memory: 66.91GiB(37.51%)  tps: {9000 + rank * 700 + step:,}\x1b[39m")
        out.append(out[-1])  # a copy of the same rank's line
    path = tmp_path / "t.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    bulk, _ = both(path, TorchtitanReader, monkeypatch)
    assert placed.rows >= 390
    assert list(bulk.series)[:4] == ["loss", "memory(GiB)", "memory(%)", "tps"]
    assert bulk.series["tps@rank2"].values[0] == 10401.0 and np.isnan(bulk.series["loss@rank1"].values[-1])
    assert bulk.meta["torchtitan.lines_per_step"] == 2


TS = "[2024-05-02 09:14:07,311] [INFO] "


@st.composite
def engine_lines(draw: st.DrawFn) -> str:
    """DeepSpeed's own lines, as the engine, its loss scaler and its timers print them, and the
    spellings beside them that the line reader reads differently (more learning rates, NaN, the
    hysteresis and fused-optimizer overflows, a minimum scale)."""
    step = draw(st.integers(0, 99999))
    lr = draw(st.sampled_from(["5e-05", "0.000298", "1.5e-4", "nan", "1e-05, 2e-05", "3e-05, 3e-05", ""]))
    value = draw(st.sampled_from(["81.03", "nan", "79.5", "1e3"]))
    scale = draw(st.sampled_from(["65536", "32768.0", "1", "4096"]))
    bar = draw(bars())
    progress = (f"{TS}[logging.py:96:log_dist] [Rank 0] step={step}, skipped={draw(st.integers(0, 99))}, "
                f"lr=[{lr}], mom=[(0.9, 0.95)]")
    overflow = (f"{bar}{TS}[loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {step % 8} Skipping step. "
                f"Attempted loss scale: {scale}, reducing to {scale}")
    return draw(st.sampled_from([
        progress, progress, overflow, overflow, f"{TS}[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
        f"{scale}, reducing to 1", "[deepspeed] OVERFLOW! Rank 1 Skipping step.",
        f"{TS}[logging.py:96:log_dist] [Rank 0] step={step}, skipped={draw(st.integers(0, 99))}, lr=[{lr}], "
        "mom=[(0.9, 0.95)]",
        f"step={step}, skipped=0, lr=[{lr}]",
        f"{TS}[timer.py:260:stop] epoch=0/micro_step={step * 4}/global_step={step}, RunningAvgSamplesPerSec={value}, "
        f"CurrSamplesPerSec={value}, MemAllocated=17.52GB, MaxMemAllocated=31.4GB",
        f"{TS}[timer.py:199:stop] {step}/{step + 10}, SamplesPerSec={value}, MemAllocated=0.26GB",
        f"{bar}{TS}[loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {step % 8} Skipping step. "
        f"Attempted loss scale: {scale}, reducing to {scale}",
        f"{TS}[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to 2048",
        f"[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, but hysteresis is 2. "
        "Reducing hysteresis to 1",
        f"Overflow detected. Skipping step. Attempted loss scale: {scale}, reducing to 1024",
        "[deepspeed] OVERFLOW! Rank 1 Skipping step.",
        f"{TS}[logging.py:96:log_dist] [Rank 0] Current loss scale already at minimum - training can't continue",
        f"{TS}[logging.py:96:log_dist] [Rank 0] time (ms) | forward_microstep: {value} | backward: 1.5",
        f"steps: {step} loss: 2.5 iter time (s): 0.4 samples/sec: {value}",
        f"{TS}[logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2",
    ]))


DS_PIECES = st.one_of(dicts(), bars(), bars(), engine_lines(), engine_lines(), engine_lines(), engine_lines(),
                      st.sampled_from([" " * 20, "", "[rank1]: ", "\x1b[32m", "Traceback (most recent call last):",
                                       "RuntimeError: CUDA out of memory", "\xff", "{'eval_loss': 2.5, 'epoch': 1.0}",
                                       "[deepspeed] noise", "step=3 skipped"]))
DS_HEAD = (f"{TS}[logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n" + HEAD.decode())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.lists(DS_PIECES, min_size=0, max_size=3), min_size=1, max_size=40),
       chunk=st.sampled_from([64, 301, 4096]), ending=st.sampled_from(["\n", "\r\n"]))
def test_deepspeed_bulk_reads_what_the_line_reader_reads(lines: list[list[str]], chunk: int, ending: str,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    path = written(tmp_path / "d.log", DS_HEAD, lines, ending)
    both(path, DeepSpeedReader, monkeypatch)


def test_a_plain_deepspeed_log_is_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF's redraws and dicts with the engine's lines between them: the engine's and HF's rows are
    placed in bulk, each dict at the count of the next bar (past a line the engine takes), each
    overflow one step after the bar it is glued to."""
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    out = [DS_HEAD.rstrip("\n")]
    scale = 65536
    for step in range(1, 301):
        bar = f"\r{step * 100 // 300:3d}%|          | {step}/300 [00:01<00:09,  2.50it/s]"
        if step > 280:
            out.append(f"{bar}{TS}[loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                       f"Attempted loss scale: {scale}, reducing to {max(1, scale // 2)}")
            scale = max(1, scale // 2)
            bar = ""
        if step % 10 == 0:
            out.append(f"{bar}{TS}[logging.py:96:log_dist] [Rank 0] step={step}, skipped={max(0, step - 280)}, "
                       f"lr=[{step * 1e-6!r}], mom=[(0.9, 0.95)]")
            out.append(f"\r{' ' * 40}\r{{'loss': {10 / step!r}, 'grad_norm': {'nan' if step > 280 else 1 / step!r}, "
                       f"'learning_rate': {step * 1e-6!r}, 'epoch': {step / 100:.2f}}}")
            out.append(f"{TS}[timer.py:260:stop] epoch=0/micro_step={step * 4}/global_step={step}, "
                       f"RunningAvgSamplesPerSec={80 + step / 7:.14g}, CurrSamplesPerSec=81.5, MemAllocated=17.52GB")
        elif step % 10 == 1:
            out.append(bar)
    path = tmp_path / "d.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    bulk, _ = both(path, DeepSpeedReader, monkeypatch)
    assert fast_and_row_by_row(path, monkeypatch)[1] >= 3
    assert placed.rows >= 100
    assert bulk.series["loss"].steps[3:6].tolist() == [11, 21, 31]  # the bar after the dict, past the engine's line
    assert bulk.series["lr"].steps[-1] == 300 and bulk.series["CurrSamplesPerSec"].values[0] == 81.5
    overflows = [e for e in bulk.events if e.kind.value == "loss_scale"]
    assert len(overflows) == 20 and overflows[0].step == 282 and overflows[-1].data["at_minimum"]


def fast_and_row_by_row(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Run, int]:
    """The run read with DeepSpeed's runs placed with arrays, once the same has been read with
    them placed a line at a time (the same series, events, their data, metadata and problems),
    and how many runs the arrays placed."""
    placed = []
    real = _WithHF._bulk

    def spy(self: _WithHF, *args: object) -> bool:
        got = real(self, *args)  # type: ignore[arg-type]
        placed.append(got)
        return got

    with monkeypatch.context() as m:
        m.setattr(_WithHF, "_bulk", spy)
        fast, problems = load_run([str(path)], "deepspeed")
    with monkeypatch.context() as m:
        m.setattr(_WithHF, "fast", False)
        rows, problems_rows = load_run([str(path)], "deepspeed")
    assert snapshot(fast) == snapshot(rows)
    assert repr([e.to_dict() for e in fast.events]) == repr([e.to_dict() for e in rows.events])  # data in order, NaN too
    assert repr(fast.meta) == repr(rows.meta) and problems == problems_rows
    return fast, sum(placed)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.lists(DS_PIECES, min_size=0, max_size=3), min_size=1, max_size=40),
       chunk=st.sampled_from([64, 301, 4096]))
def test_deepspeed_runs_placed_with_arrays_as_line_by_line(lines: list[list[str]], chunk: int, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    fast_and_row_by_row(written(tmp_path / "d.log", DS_HEAD, lines), monkeypatch)


@st.composite
def ds_steps(draw: st.DrawFn) -> str:
    """The lines an HF run under DeepSpeed prints, an optimizer step at a time: its bar (an overflow
    glued to it or not), and on some steps the engine's step and timer lines, a train or an eval
    dict, a loose overflow. The bar counts mostly go up by one."""
    out = []
    step = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(1, 40))):
        step = max(0, step + draw(st.sampled_from([1, 1, 1, 1, 2, 0, -2])))
        bar = f"\r{step % 100:3d}%|          | {step}/{draw(st.sampled_from([90, 90, 90, 91]))} [00:01<00:09,  2.50it/s]"
        scale = draw(st.sampled_from(["65536", "1", "2048"]))
        over = f"{TS}[loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. " \
            f"Attempted loss scale: {scale}, reducing to {scale if scale == '1' else '1024'}"
        out.append(bar + over if draw(st.booleans()) else bar)
        for piece in draw(st.lists(st.sampled_from(["progress", "tput", "train", "train", "eval", "over", "blank"]),
                                   max_size=4)):
            near = step + draw(st.sampled_from([0, 1, -1, 3]))
            if piece == "progress":
                out.append(f"{TS}[logging.py:96:log_dist] [Rank 0] step={near}, skipped=1, "
                           f"lr=[{draw(st.sampled_from(['5e-05', 'nan']))}], mom=[(0.9, 0.95)]")
            elif piece == "tput":
                out.append(f"{TS}[timer.py:260:stop] epoch=0/micro_step={step * 4}/global_step={near}, "
                           f"RunningAvgSamplesPerSec=81.5, CurrSamplesPerSec={draw(st.sampled_from(['80.25', 'nan']))}")
            elif piece == "train":
                out.append(f"\r{' ' * 8}\r{{'loss': {draw(st.sampled_from(NUMBERS))}, 'epoch': 0.5}}")
            elif piece == "eval":
                out.append(f"{{'eval_loss': {draw(st.sampled_from(NUMBERS))}, 'epoch': 0.5}}")
            elif piece == "over":
                out.append(over)
            else:
                out.append("")
    return "\n".join(out) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=ds_steps(), chunk=st.sampled_from([128, 301, 4096]))
def test_deepspeed_steps_placed_with_arrays_as_line_by_line(body: str, chunk: int, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of lines in the order an HF run under DeepSpeed prints them, with the cases where the
    arrays must follow the line reader exactly: overflows glued to a bar and loose ones, a dict
    flushed at the step an overflow just wrote (it does not move the overflow count), steps that
    go back, a bar of another total, eval dicts among them."""
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    path = tmp_path / "d.log"
    path.write_text(DS_HEAD + body, encoding="utf-8")
    fast_and_row_by_row(path, monkeypatch)


@st.composite
def fairseq_lines(draw: st.DrawFn) -> str:
    """fairseq's records (pipe summaries of train and of a subset, with and without
    ``num_updates``, simple, JSON and tqdm records, overflow notices) and lines that only name an
    epoch, with values and keys the bulk path must leave to the line reader."""
    epoch = draw(st.integers(0, 999))
    value = draw(st.sampled_from(["6.326", "nan", "1,234", "12%", "-0.5", "2e-05", "3", "x1"]))
    key = draw(st.sampled_from(["loss", "nll_loss", "ppl", "wps", "layer2", "lr", "update", "epoch", "train_loss"]))
    updates = draw(st.sampled_from(["", f" | num_updates {draw(st.integers(0, 99999))}", " | num_updates nan"]))
    subset = draw(st.sampled_from(["", "valid on 'valid' subset | ", "valid on 'test2' subset | "]))
    return draw(st.sampled_from([
        f"| epoch {epoch:03d} | {subset}{key} {value} | loss 6.5{updates} | best 6.4",
        f"[2024-03-05 10:11:15] epoch {epoch} | step {epoch * 7} | {key} {value} | grad_norm 0.864 | lr 9.0e-07",
        f"epoch {epoch:03d} | {key} {value}{updates}",
        f"epoch {epoch:03d}:   2800 / 160368 loss=9.255, {key}={value}, num_updates=2800",
        f'{{"epoch": {epoch}, "loss": "3.1", "num_updates": "40"}}',
        f"epoch {epoch:03d}:  10%|█ | 5/50 [00:01<00:09, loss={value}, ppl=5.6]",
        "overflow detected, setting loss scale to: 64.0",
        f"{{'loss': {value}, 'epoch': 0.{epoch}}}",
    ]))


FAIRSEQ_PIECES = st.one_of(fairseq_lines(), fairseq_lines(), fairseq_lines(), bars(),
                           st.sampled_from(["", " " * 8, "[rank1]: ", "\x1b[32m", "Traceback (most recent call last):",
                                            "RuntimeError: CUDA out of memory", "\xff", "noise 12 | 3",
                                            "Saving checkpoint to /checkpoints/run-108/step_24.pt"]))
FAIRSEQ_HEADS = ["| epoch 001 | loss 9.5 | nll_loss 9.1 | num_updates 100\n", "| epoch 002 | loss 9.5 | nll_loss 9.1\n"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.lists(FAIRSEQ_PIECES, min_size=0, max_size=2), min_size=1, max_size=40),
       chunk=st.sampled_from([64, 301, 4096]), ending=st.sampled_from(["\n", "\r\n"]),
       head=st.sampled_from(FAIRSEQ_HEADS))
def test_fairseq_bulk_reads_what_the_line_reader_reads(lines: list[list[str]], chunk: int, ending: str, head: str,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    path = written(tmp_path / "f.log", head, lines, ending)
    both(path, FairseqReader, monkeypatch)


def test_fairseq_pipe_summaries_are_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipe summaries among lines fairseq does nothing with: the summaries with ``num_updates``
    are at that step, those without at the last one, the subset's named after it."""
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    out = []
    for k in range(1, 301):
        out.append(f"| epoch {k // 100 + 1:03d} | loss {10 / k!r} | nll_loss {'nan' if k > 280 else 9 / k!r} "
                   f"| num_updates {k * 10}")
        out.append(f"{{'loss': 2.5, 'epoch': {k / 100:.2f}}}")
        if k % 50 == 0:
            out.append(f"| epoch {k // 100 + 1:03d} | valid on 'valid' subset | loss {5 / k:.5f} | best 1.5")
    path = tmp_path / "f.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    bulk, _ = both(path, FairseqReader, monkeypatch)
    assert placed.rows >= 300
    assert bulk.series["train_loss"].steps[-1] == 3000 and np.isnan(bulk.series["train_nll_loss"].values[-1])
    assert bulk.series["valid_loss"].steps.tolist()[:2] == [500, 1000] and "valid_best" in bulk.series


def test_keras_nan_running_values_after_the_first_are_placed_in_bulk(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The first in-progress bar whose running loss is NaN is the line reader's (it reports it);
    the NaN bars of the epochs after it are read in bulk, as the line reader reads them."""
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    out = []
    for epoch in range(1, 7):
        bars = []
        for k in range(1, 40):
            loss = "nan" if epoch >= 3 and (epoch > 3 or k >= 20) else f"{3 / epoch + k / 1000:.4f}"
            bars.append(f"{k:3d}/40 [{'=' * (k // 4)}>{'.' * (10 - k // 4)}] - ETA: 1s - loss: {loss}" + "\b" * 50)
        last = "nan" if epoch >= 3 else f"{3 / epoch:.4f}"
        out.append(f"Epoch {epoch}/7\n" + "\r".join(bars) + f"\r 40/40 [==========] - 1s 8ms/step - loss: {last}")
    out.append("Epoch 7/7\n" + "\r".join(f"{k:3d}/40 [>.........] - ETA: 1s - loss: nan" for k in range(1, 9)))
    path = tmp_path / "k.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    placed = Placed(monkeypatch)
    bulk, _ = both(path, KerasReader, monkeypatch)
    nan_checks = [e for e in bulk.events if e.kind.value == "nan_check"]
    assert len(nan_checks) == 1 and nan_checks[0].data["epoch"] == 3 and nan_checks[0].data["batch"] == 20
    # epochs 4 to 7 (39 + 39 + 39 + 8 NaN bars and three final bars) among the rows placed in bulk
    assert placed.rows >= 2 * 40 + 3 * 40 + 8
    assert bulk.series["loss"].steps.tolist() == [1, 2, 3, 4, 5, 6] and np.isnan(bulk.series["loss"].values[2:]).all()


@settings(max_examples=300, deadline=None)
@given(bars_seen=st.lists(st.tuples(st.integers(0, 30), st.sampled_from([(30, 2), (30, 3), (50, 2), (0, 0)])),
                          max_size=30),
       start=st.fixed_dictionaries({"n_train": st.integers(0, 2), "last_step": st.integers(0, 5),
                                    "interval": st.sampled_from([0, 1, 10]), "bar_total": st.sampled_from([None, "30"])}))
def test_hf_bar_steps_number_dicts_as_one_at_a_time(bars_seen: list[tuple[int, tuple[int, int]]], start: dict) -> None:
    """Train dicts numbered at once by the bars that flush them (counts going up, back, bars of
    another total or width, no bar) get the steps and leave the state that numbering them one
    at a time gives."""
    counts = np.array([c for c, _ in bars_seen], dtype=np.int64)
    totals = np.array([t for _, (t, _) in bars_seen], dtype=np.int64)
    widths = np.array([w for _, (_, w) in bars_seen], dtype=np.int64)
    at_once, one_by_one = dict(start), dict(start)
    steps = HFReader.bar_steps(at_once, counts, totals, widths)
    expected = []
    for c, (t, w) in bars_seen:
        one_by_one["n_train"] += 1
        expected.append(HFReader._step(one_by_one, c if w else None, str(t).zfill(w) if w else None))
    assert steps.tolist() == expected
    assert at_once == one_by_one
