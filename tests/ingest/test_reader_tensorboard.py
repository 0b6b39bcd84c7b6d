"""TensorBoard event files written by real writers (torch's SummaryWriter, tensorboard's own
TF-free Writer), read by our hand-written reader and cross-checked against tensorboard's
EventAccumulator; damaged copies keep the records before the damage and exit 2 in the CLI."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest
from shared_data import run_cli
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.summary import Writer
from torch.utils.tensorboard import SummaryWriter

from trainaudit.errors import InputError
from trainaudit.ingest import load_run
from trainaudit.ingest.formats.tensorboard import TensorBoardReader
from trainaudit.ingest.sink import RunBuilder
from trainaudit.ingest.sources import expand_inputs
from trainaudit.ingest.tfrecord import _crc32c_py, crc32c, masked_crc32c
from trainaudit.model import EventKind, SourceKind

LOSS = [2.5, 2.25, math.nan, 1.75, 1.5]
GRAD = [1.0, math.inf, 3.0, -math.inf, 5.0]


def _torch_run(path: Path, *, start: int = 0, n: int = 5) -> Path:
    """Megatron-like tags via torch.utils.tensorboard, plus a histogram and text to skip."""
    w = SummaryWriter(str(path))
    for i in range(n):
        step = start + i * 10
        w.add_scalar("lm loss", LOSS[i % len(LOSS)], step)
        w.add_scalar("grad-norm", GRAD[i % len(GRAD)], step)
        w.add_scalar("iteration-time", 0.5 + i, step)
    w.add_histogram("weights", np.arange(10, dtype=np.float32), 0)
    w.add_text("args", "lr=1e-4", 0)
    w.close()
    files = sorted(path.glob("events.out.tfevents.*"))
    assert len(files) == 1
    return files[0]


@pytest.fixture()
def torch_file(tmp_path: Path) -> Path:
    return _torch_run(tmp_path / "run")


def test_crc32c_matches_known_vector_and_fallback() -> None:
    # RFC 3720 test vector: CRC-32C of 32 zero bytes.
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert _crc32c_py(bytes(32)) == 0x8A9136AA
    assert _crc32c_py(b"123456789") == crc32c(b"123456789") == 0xE3069283


def test_sniff_by_name_and_by_content(torch_file: Path) -> None:
    from trainaudit.ingest.base import Sample

    head = torch_file.read_bytes()[:65536]
    r = TensorBoardReader()
    assert r.sniff(Sample.from_head(torch_file.name, head)) == 0.95
    assert r.sniff(Sample.from_head("renamed.bin", head)) == 0.9  # content alone
    assert r.sniff(Sample.from_head("x.bin", b"\x00\x01" * 40)) == 0.0
    assert r.sniff(Sample.from_head("train.log", b"iteration 1/ 10 | lm loss: 1.0 |\n")) == 0.0


def test_torch_summary_writer_scalars_nan_inf(torch_file: Path) -> None:
    run, problems = load_run([str(torch_file)])
    assert problems == []
    assert set(run.series) == {"lm loss", "grad-norm", "iteration-time"}  # histogram, text skipped
    loss = run.series["lm loss"]
    assert loss.steps.tolist() == [0, 10, 20, 30, 40]
    assert loss.values[0] == 2.5 and loss.values[1] == 2.25 and loss.values[4] == 1.5
    assert math.isnan(loss.values[2])
    g = run.series["grad-norm"]
    assert g.values[1] == math.inf and g.values[3] == -math.inf and g.values[4] == 5.0
    # iteration-time 1.5 at step 10: float32 of 1.5 is exact
    assert run.series["iteration-time"].value_at(10) == 1.5
    # Line column = record index (1 = file_version record, then one record per add_scalar call).
    assert loss.lines.tolist() == [2, 5, 8, 11, 14]
    assert g.lines.tolist() == [3, 6, 9, 12, 15]
    assert run.sources[0].kind is SourceKind.TENSORBOARD and run.sources[0].format == "tensorboard"
    assert run.meta["tensorboard.wall_time_start"] > 1.6e9


def test_same_values_as_event_accumulator(torch_file: Path) -> None:
    """Our reader and tensorboard's reference loader agree on every (tag, step, value)."""
    acc = EventAccumulator(str(torch_file), size_guidance={SCALARS: 0})
    acc.Reload()
    run, _ = load_run([str(torch_file)])
    assert sorted(acc.Tags()["scalars"]) == sorted(run.series)
    for tag in acc.Tags()["scalars"]:
        ref = acc.Scalars(tag)
        s = run.series[tag]
        assert s.steps.tolist() == [e.step for e in ref]
        np.testing.assert_array_equal(s.values, np.array([e.value for e in ref]))


def test_tensor_style_scalars(tmp_path: Path) -> None:
    """TF2-style scalars (rank-0 tensor + 'scalars' plugin metadata on the first event only),
    from tensorboard's TF-free Writer and from torch with new_style/double precision."""
    w = Writer(str(tmp_path / "tb"))
    for step, v in [(1, 0.5), (2, 0.25), (3, math.nan)]:
        w.add_scalar("epoch_loss", v, step)
    w.close()
    sw = SummaryWriter(str(tmp_path / "torch_new"))
    sw.add_scalar("acc", 0.125, 7, new_style=True)
    sw.add_scalar("acc", 0.1, 8, new_style=True, double_precision=True)
    sw.close()
    run, problems = load_run([str(tmp_path)])
    assert problems == []
    el = run.series["epoch_loss"]
    assert el.steps.tolist() == [1, 2, 3]
    assert el.values[0] == 0.5 and el.values[1] == 0.25 and math.isnan(el.values[2])
    acc = run.series["acc"]
    assert acc.steps.tolist() == [7, 8]
    assert acc.values[0] == 0.125 and acc.values[1] == 0.1  # double kept at full precision


def test_directory_with_two_files_and_split_folders(tmp_path: Path) -> None:
    """A resumed run (second file re-logs steps 30 and 40 and continues) plus Keras-like train/ and
    validation/ runs with the same tag."""
    first = _torch_run(tmp_path / "run", start=0, n=5)  # steps 0..40
    second_dir = tmp_path / "resume"
    second = _torch_run(second_dir, start=30, n=3)  # steps 30, 40, 50: a resume from step 30
    # Put both files into one directory, in the writer's own time order of names.
    both = tmp_path / "both"
    both.mkdir()
    (both / first.name).write_bytes(first.read_bytes())
    later = second.name if second.name > first.name else first.name + "1"
    (both / later).write_bytes(second.read_bytes())
    for split, v in (("train", 1.0), ("validation", 2.0)):
        w = SummaryWriter(str(both / "keras" / split))
        w.add_scalar("epoch_loss", v, 0)
        w.add_scalar("epoch_loss", v / 2, 1)
        w.close()
    run, problems = load_run([str(both)])
    assert problems == []
    loss = run.series["lm loss"]
    assert loss.steps.tolist() == [0, 10, 20, 30, 40, 50]
    # steps 30 and 40 exist in both files: the later file's values (LOSS[0], LOSS[1]) win
    assert loss.value_at(30) == 2.5 and loss.value_at(40) == 2.25 and math.isnan(loss.values[5])
    assert loss.value_at(20) is not None and math.isnan(loss.value_at(20))  # from the first file
    assert run.sources[int(loss.src[3])].path.endswith(later)
    assert run.sources[int(loss.src[2])].path.endswith(first.name)
    assert run.meta.get("restarts") == [30]
    assert run.series["train/epoch_loss"].values.tolist() == [1.0, 0.5]
    assert run.series["validation/epoch_loss"].values.tolist() == [2.0, 1.0]


def _read_into_builder(path: Path) -> tuple[RunBuilder, str]:
    builder = RunBuilder()
    inp = expand_inputs([str(path)])[0]
    from trainaudit.model import Source

    builder.begin(Source(inp.display, "tensorboard", SourceKind.TENSORBOARD, inp.size))
    with pytest.raises(InputError) as exc:
        TensorBoardReader().read(inp, builder)
    builder.end()
    return builder, str(exc.value)


def _record_offsets(data: bytes) -> list[int]:
    offs, pos = [], 0
    while pos < len(data):
        offs.append(pos)
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 16 + n
    return offs


def test_flipped_byte_bad_crc_keeps_records_before(torch_file: Path, tmp_path: Path) -> None:
    data = bytearray(torch_file.read_bytes())
    offs = _record_offsets(bytes(data))
    bad_rec = 8  # 1-based: the 'lm loss' value at step 20
    flip = offs[bad_rec - 1] + 12 + 5  # a byte inside its data
    data[flip] ^= 0xFF
    bad = tmp_path / torch_file.name
    bad.write_bytes(bytes(data))
    builder, msg = _read_into_builder(bad)
    assert msg.startswith(f"{bad}: record 8 at byte {offs[7]}: bad CRC of the record data")
    assert "7 records before it were read" in msg
    run = builder.build()
    assert run.series["lm loss"].steps.tolist() == [0, 10]
    assert run.series["grad-norm"].steps.tolist() == [0, 10]
    assert run.series["iteration-time"].steps.tolist() == [0, 10]

    # Damage in a length field is caught by the header CRC.
    data2 = bytearray(torch_file.read_bytes())
    data2[offs[3] + 1] ^= 0x01
    bad.write_bytes(bytes(data2))
    builder, msg = _read_into_builder(bad)
    assert "record 4" in msg and "bad CRC of the length field" in msg
    assert builder.build().series["lm loss"].steps.tolist() == [0]


def test_truncated_file_keeps_records_before(torch_file: Path, tmp_path: Path) -> None:
    data = torch_file.read_bytes()
    offs = _record_offsets(data)
    cut = tmp_path / torch_file.name
    cut.write_bytes(data[:offs[10] + 20])  # in the middle of record 11
    builder, msg = _read_into_builder(cut)
    assert "record 11" in msg and "truncated record" in msg and "file cut short" in msg
    run = builder.build()
    assert run.series["lm loss"].steps.tolist() == [0, 10, 20]
    assert run.series["grad-norm"].steps.tolist() == [0, 10, 20]
    assert run.series["iteration-time"].steps.tolist() == [0, 10, 20]
    assert "lm loss" in run.series and 30 not in run.series["lm loss"].steps.tolist()
    cut.write_bytes(data[:offs[10] + 5])  # inside the 12-byte header
    _, msg = _read_into_builder(cut)
    assert "record 11" in msg and "truncated header" in msg


def test_cli_damaged_file_table_one_error_line_exit_2(torch_file: Path, tmp_path: Path) -> None:
    data = bytearray(torch_file.read_bytes())
    offs = _record_offsets(bytes(data))
    data[offs[7] + 14] ^= 0x55
    bad = tmp_path / "damaged" / torch_file.name
    bad.parent.mkdir()
    bad.write_bytes(bytes(data))
    proc = run_cli("parse", str(bad))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("trainaudit: error: ")
    assert "record 8" in errors[0] and "bad CRC" in errors[0]
    assert "tensorboard" in proc.stdout and "lm loss" in proc.stdout
    assert "0..10" in proc.stdout  # the steps read before the damage are summarised

    # The same through a directory and -o: rows before the damage are written.
    out = tmp_path / "rows.csv"
    proc = run_cli("parse", str(bad.parent), "-o", str(out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == "source,format,line,step,metric,value"
    assert len(rows) == 1 + 6  # 3 tags x 2 steps


def test_cli_good_file_ok(torch_file: Path) -> None:
    proc = run_cli("parse", str(torch_file.parent))
    assert proc.returncode == 0, proc.stderr
    assert "tensorboard" in proc.stdout and "0..40" in proc.stdout


def test_session_log_start_becomes_phase_event(tmp_path: Path) -> None:
    """tensorboard's EventFileWriter writing a SessionLog START (what TF writes on a restart)."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(tmp_path))
    w.add_event(Event(step=5, summary=Summary(value=[Summary.Value(tag="loss", simple_value=0.5)])))
    w.add_event(Event(step=3, session_log=SessionLog(status=SessionLog.START)))
    w.add_event(Event(step=3, summary=Summary(value=[Summary.Value(tag="loss", simple_value=0.75)])))
    w.close()
    run, _ = load_run([str(tmp_path)])
    # the restart supersedes what the session before it logged from step 3 on, as TensorBoard purges
    # orphaned data (EventAccumulator's purge_orphaned_data drops the earlier events at or past the restart)
    assert run.series["loss"].steps.tolist() == [3]
    assert run.series["loss"].values.tolist() == [0.75]
    assert run.meta["restarts"] == [3]
    phases = [e for e in run.events if e.kind is EventKind.PHASE]
    assert len(phases) == 1 and phases[0].step == 3 and phases[0].line == 3
    assert phases[0].data["phase"] == "session_start"


def test_masked_crc_roundtrip_on_writer_header(torch_file: Path) -> None:
    data = torch_file.read_bytes()
    assert struct.unpack_from("<I", data, 8)[0] == masked_crc32c(data[:8])


def test_long_tags_and_large_steps_take_the_generic_path(tmp_path: Path) -> None:
    """Records of 128+ bytes (long tag) are decoded by the generic protobuf path; large and
    zero steps (step absent from the proto) come out right on both paths."""
    long_tag = "validation/" + "x" * 150
    w = SummaryWriter(str(tmp_path))
    w.add_scalar(long_tag, 0.5, 0)
    w.add_scalar(long_tag, 0.25, 3_000_000_000)
    w.add_scalar("loss", 1.5, 0)
    w.add_scalar("loss", 0.75, 3_000_000_000)
    w.close()
    run, problems = load_run([str(tmp_path)])
    assert problems == []
    for tag, values in ((long_tag, [0.5, 0.25]), ("loss", [1.5, 0.75])):
        assert run.series[tag].steps.tolist() == [0, 3_000_000_000]
        assert run.series[tag].values.tolist() == values
    assert run.series[long_tag].lines.tolist() == [2, 3]
    assert run.series["loss"].lines.tolist() == [4, 5]
