"""``-`` is standard input for the commands that read logs; any other non-regular file (a FIFO, a
device, ``/dev/stdin`` itself) is still refused. The CLI runs in a real subprocess with the log piped
in, as a user's shell would run it."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainaudit
from trainaudit.errors import InputError
from trainaudit.ingest import sources
from trainaudit.safeio import Limits

SRC = Path(trainaudit.__file__).resolve().parents[1]  # the package under test, not an installed copy


def _log(n: int = 40) -> bytes:
    lines = [f" iteration {i:8d}/{1000:8d} | consumed samples: {i * 8:8d} | lm loss: {2.0 - i / 100:.6E} |"
             f" grad norm: {1.0 + i / 50:.3f} |" for i in range(1, n + 1)]
    lines.append("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
    return ("\n".join(lines) + "\n").encode()


def _cli(*args: str, stdin: bytes | None = None, cwd: Path | None = None,
         tmp: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.run([sys.executable, "-m", "trainaudit", *args], input=stdin, capture_output=True, env=env,
                          cwd=cwd, timeout=120, stdin=None if stdin is not None else subprocess.DEVNULL)


def test_parse_reads_a_log_piped_to_dash(tmp_path: Path) -> None:
    out = tmp_path / "series.csv"
    proc = _cli("parse", "-", "-o", str(out), stdin=_log())
    assert proc.returncode == 0, proc.stderr
    assert b"-: megatron, 120 values, steps 1..40" in proc.stdout
    assert out.read_text().count("lm loss") == 40


def test_diagnose_reads_a_log_piped_to_dash_and_quotes_it(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _cli("diagnose", "-", "--json", "-o", str(tmp_path / "report"), stdin=_log(), tmp=tmp)
    assert proc.returncode == 1, proc.stderr  # the OOM is a finding
    quoted = json.dumps(json.loads(proc.stdout))
    assert '"path": "-"' in quoted and "CUDA out of memory" in quoted  # evidence read back from the copy
    assert not list(tmp.iterdir())  # the copy of standard input is gone


def test_a_gzip_log_can_be_piped_too() -> None:
    proc = _cli("parse", "-", stdin=gzip.compress(_log()))
    assert proc.returncode == 0, proc.stderr
    assert b"-: megatron, 120 values" in proc.stdout


def test_empty_standard_input_is_an_input_error() -> None:
    proc = _cli("parse", "-", stdin=b"")
    assert proc.returncode == 2 and proc.stderr.startswith(b"trainaudit: error: -:"), proc.stderr


def test_dev_stdin_and_fifos_are_still_refused(tmp_path: Path) -> None:
    proc = _cli("parse", "/dev/stdin", stdin=_log())
    assert proc.returncode == 2 and b"not a regular file" in proc.stderr, proc.stderr
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    proc = _cli("diagnose", str(fifo), "-o", str(tmp_path / "r"))  # would block forever if opened for reading
    assert proc.returncode == 2 and b"not a regular file (a FIFO)" in proc.stderr, proc.stderr


def test_a_file_named_dash_is_dot_slash_dash(tmp_path: Path) -> None:
    (tmp_path / "-").write_bytes(_log(5))
    proc = _cli("parse", "./-", cwd=tmp_path, stdin=b"")
    assert proc.returncode == 0 and b"./-: megatron, 15 values" in proc.stdout, proc.stderr


def test_dash_is_a_plain_name_outside_the_log_commands() -> None:
    # The MCP server's standard input is its protocol: there "-" must never read it.
    with pytest.raises(InputError, match="no such file"):
        sources.expand_inputs(["-"])


def test_standard_input_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "LIMITS", Limits(stdin_bytes=1000))
    monkeypatch.setattr(sources, "_STDIN_COPY", [])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(_log())))
    with sources.reading_stdin(), pytest.raises(InputError, match="more than"):
        sources.expand_inputs(["-"])
