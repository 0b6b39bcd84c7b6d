"""Inputs: files, directories, archives, gzip; and every kind of bad input exits 2 with one line."""

from __future__ import annotations

import gzip
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from shared_data import run_cli, sample_block, write_lines
from trainaudit.errors import InputError
from trainaudit.ingest import load_run

MEGATRON_BLOCK = sample_block("megatron.txt", "Megatron-LM/issues/756")


def _megatron_log(tmp_path: Path, name: str = "train.log") -> Path:
    return write_lines(tmp_path / name, MEGATRON_BLOCK)


def _assert_one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr and len(err.splitlines()) == 1, proc.stderr
    for n in needles:
        assert n in err, err


def test_gzip_zip_and_tar_members_read_with_their_display_paths(tmp_path: Path) -> None:
    log = _megatron_log(tmp_path)
    gz = tmp_path / "train.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    zpath = tmp_path / "artifacts.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.write(log, "job/logs/train.log")
    tpath = tmp_path / "artifacts.tgz"
    with tarfile.open(tpath, "w:gz") as tf:
        tf.add(log, "logs/train.log")
    for path, display in ((gz, str(gz)), (zpath, f"{zpath}!job/logs/train.log"), (tpath, f"{tpath}!logs/train.log")):
        run, problems = load_run([str(path)])
        assert problems == []
        assert [s.path for s in run.sources] == [display]
        loss = run.series["lm loss"]
        assert loss.steps.tolist() == [43, 44, 45]
        assert loss.values.tolist() == [1.825991, 1.875063, 1.834162]
        assert loss.lines.tolist() == [1, 2, 3]


def test_directory_is_scanned_recursively_and_unknown_members_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "run" / "logs").mkdir(parents=True)
    _megatron_log(tmp_path / "run" / "logs")
    (tmp_path / "run" / "model.bin").write_bytes(bytes(range(256)) * 10)
    (tmp_path / "run" / ".git").mkdir()
    (tmp_path / "run" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    run, problems = load_run([str(tmp_path / "run")])
    assert [s.path for s in run.sources] == [f"{tmp_path / 'run'}/logs/train.log"]
    assert [p.fatal for p in problems] == [False] and "model.bin" in problems[0].path


def test_parse_writes_csv_and_jsonl_rows_with_source_and_line(tmp_path: Path) -> None:
    log = _megatron_log(tmp_path)
    proc = run_cli("parse", str(log), "-o", str(tmp_path / "s.csv"))
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "s.csv").read_text().splitlines()
    assert rows[0] == "source,format,line,step,metric,value"
    assert f"{log},megatron,2,44,lm loss,1.875063" in rows
    proc = run_cli("parse", str(log), "-o", str(tmp_path / "s.jsonl"), "--quiet")
    assert proc.returncode == 0 and proc.stdout == ""
    assert '"metric": "grad norm", "value": 1.611' in (tmp_path / "s.jsonl").read_text()


def test_parse_writes_parquet_with_the_same_rows(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    log = _megatron_log(tmp_path)
    proc = run_cli("parse", str(log), "-o", str(tmp_path / "s.parquet"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(tmp_path / "s.parquet").to_pylist()
    assert table[0].keys() == {"source", "format", "line", "step", "metric", "value"}
    loss = sorted((r["step"], r["value"], r["line"]) for r in table if r["metric"] == "lm loss")
    assert loss == [(43, 1.825991, 1), (44, 1.875063, 2), (45, 1.834162, 3)]
    assert {r["source"] for r in table} == {str(log)} and {r["format"] for r in table} == {"megatron"}


def test_parse_summary_table(tmp_path: Path) -> None:
    proc = run_cli("parse", str(_megatron_log(tmp_path)))
    assert proc.returncode == 0 and "megatron" in proc.stdout and "43..45" in proc.stdout


@pytest.mark.parametrize("case", ["missing", "empty", "binary", "unknown", "bad_gzip", "truncated_gzip",
                                  "bad_zip", "truncated_zip", "empty_zip", "bad_format", "bad_out"])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    log = _megatron_log(tmp_path)
    data = gzip.compress(log.read_bytes())
    args: list[str]
    if case == "missing":
        args, needle = [str(tmp_path / "nope.log")], "no such file"
    elif case == "empty":
        (tmp_path / "e.log").write_bytes(b"")
        args, needle = [str(tmp_path / "e.log")], "empty"
    elif case == "binary":
        (tmp_path / "b.bin").write_bytes(bytes(range(256)) * 40)
        args, needle = [str(tmp_path / "b.bin")], "unknown format (binary"
    elif case == "unknown":
        (tmp_path / "notes.txt").write_text("just some words\nnothing about training here\n")
        args, needle = [str(tmp_path / "notes.txt")], "no metrics or events"
    elif case == "bad_gzip":
        (tmp_path / "x.log.gz").write_bytes(data[:10] + b"\x00" * 20 + data[30:])
        args, needle = [str(tmp_path / "x.log.gz")], "corrupt"
    elif case == "truncated_gzip":
        (tmp_path / "x.log.gz").write_bytes(data[: len(data) // 2])
        args, needle = [str(tmp_path / "x.log.gz")], "truncated"
    elif case == "bad_zip":
        (tmp_path / "a.zip").write_bytes(b"PK\x03\x04" + b"\x13" * 200)
        args, needle = [str(tmp_path / "a.zip")], "zip"
    elif case == "truncated_zip":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.write(log, "train.log")
        (tmp_path / "a.zip").write_bytes(buf.getvalue()[:-30])
        args, needle = [str(tmp_path / "a.zip")], "zip"
    elif case == "empty_zip":
        with zipfile.ZipFile(tmp_path / "a.zip", "w"):
            pass
        args, needle = [str(tmp_path / "a.zip")], "empty"
    elif case == "bad_format":
        args, needle = [str(log), "--format", "nosuch"], "unknown format"
    else:
        args, needle = [str(log), "-o", str(tmp_path / "x.xlsx")], ".csv, .jsonl or .parquet"
    _assert_one_line_error(run_cli("parse", *args), needle)


def test_load_run_raises_input_error_for_a_missing_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_run([str(tmp_path / "missing")])
