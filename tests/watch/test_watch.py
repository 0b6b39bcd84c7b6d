"""``trainaudit watch`` on a Megatron log written by another process while watch runs, with a
rotation (rename + new file) and a truncation in the middle, ending with Megatron's completion
marker. The line format is the verbatim fixture line (epfLLM/Megatron-LLM#33); the writer only
changes the iteration number, the loss and the grad norm, and for the NaN iteration drops the
``lm loss`` field as Megatron does (and as that fixture documents)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shared_data import run_cli, sample_block

WRITER = r'''
import math, os, sys, time
template, log, nan_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
def line(i):
    loss = 2.5 * math.exp(-i / 30) + 0.7 + 0.01 * ((i * 7) % 5)
    out = template.replace("iteration     3383/    8000", f"iteration {i:8d}/      45")
    out = out.replace("lm loss: 7.334521E-01", f"lm loss: {loss:.6E}").replace("grad norm: 0.752", "grad norm: %.3f" % (0.8 + 0.01 * (i % 3)))
    if i == nan_at:
        out = out.replace(f"lm loss: {loss:.6E} | ", "").replace("grad norm: %.3f" % (0.8 + 0.01 * (i % 3)), "grad norm: nan")
        out = out.replace("number of nan iterations:   0", "number of nan iterations:   1")
    return out + "\n"
def write(path, lo, hi, mode="a"):
    with open(path, mode) as f:
        for i in range(lo, hi + 1):
            f.write(line(i)); f.flush(); time.sleep(0.01)
write(log, 1, 15)
time.sleep(0.4)
os.rename(log, log + ".1")                      # rotation: rename, then a new file
write(log, 16, 25)
time.sleep(0.4)
open(log, "w").close()                          # truncation (copytruncate style)
time.sleep(0.4)
write(log, 26, 45)
with open(log, "a") as f:
    f.write("[after training is done] datetime: 2024-05-01 10:00:00 \n")
'''


def _watch_then_write(tmp: Path, nan_at: int, *watch_args: str) -> subprocess.CompletedProcess[str]:
    """Start ``watch`` first and the writer only once watch says it waits for the file, so that
    watch sees the first file before it is rotated however slowly the machine starts Python."""
    template = sample_block("megatron.txt", "Megatron-LLM/issues/33")[0]
    script = tmp / "writer.py"
    script.write_text(WRITER)
    log = tmp / "train.log"
    args = [sys.executable, "-m", "trainaudit", "watch", str(log), "--interval", "0.05", *watch_args]
    watch = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert watch.stderr is not None
    first = watch.stderr.readline()
    assert "waiting for" in first, first
    writer = subprocess.Popen([sys.executable, str(script), template, str(log), str(nan_at)], text=True)
    try:
        out, err = watch.communicate(timeout=120)
    finally:
        writer.wait(timeout=60)
    return subprocess.CompletedProcess(args, watch.returncode, out, first + err)


def test_watch_follows_rotation_and_truncation_and_alerts_on_nan(tmp_path: Path) -> None:
    res = _watch_then_write(tmp_path, 36)
    assert res.returncode == 1, res.stderr  # alerts were raised
    out = res.stdout
    # an alert naming the NaN and its first step, printed as it appeared
    alert_lines = [ln for ln in out.splitlines() if ln.startswith("step ") and "TA101" in ln]
    assert alert_lines, out
    assert "since step 36" in alert_lines[0]
    assert "lm loss is NaN from step 36" in alert_lines[0]
    # the summary: ended at the completion marker, saw the rotation and the truncation, last step 45
    summary = next(ln for ln in out.splitlines() if ln.startswith("-- "))
    assert "run ended" in summary and "format megatron" in summary and "last step 45" in summary
    assert "1 rotation(s), 1 truncation(s)" in summary
    # no alert before the NaN: the healthy part of the run raised nothing
    assert not [ln for ln in out.splitlines() if ln.startswith("step ") and "since step" in ln
                and int(ln.split("since step ")[1].split(":")[0]) < 36]


def test_watch_fail_on_exits_1_at_the_alert(tmp_path: Path) -> None:
    res = _watch_then_write(tmp_path, 20, "--fail-on", "critical")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "alert at or above critical" in res.stdout
    assert "since step 20" in res.stdout
    # it stopped at the alert: it did not follow the log to its completion marker at step 45
    summary = next(ln for ln in res.stdout.splitlines() if ln.startswith("-- ") and "last step" in ln)
    assert "run ended" not in summary and int(summary.split("last step ")[1].split(";")[0]) < 45


def test_watch_monitor_jsonl_until_end_record(tmp_path: Path) -> None:
    log = tmp_path / "trainaudit-monitor.jsonl"
    recs = [{"trainaudit_monitor": 1, "type": "start", "params": 10}]
    recs += [{"type": "step", "step": s, "loss": 2.0 - 0.01 * s, "grad_norm": 1.0, "lr": 1e-3} for s in range(1, 40)]
    recs += [{"type": "step", "step": 40, "loss": "nan", "grad_norm": "nan", "lr": 1e-3},
             {"type": "end", "step": 40, "status": "stopped", "completed": False}]
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = run_cli("watch", str(log), "--interval", "0.05")
    assert res.returncode == 1, res.stderr  # the NaN alert
    assert "format trainaudit-monitor" in res.stdout and "run ended" in res.stdout
    assert "loss is NaN from step 40" in res.stdout


def test_watch_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    res = run_cli("watch", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "is a directory" in res.stderr


PLAIN_LOOP = r'''
import math, sys, time
# a hand-rolled training loop's print, redirected to a file (python train.py > train.log)
log, nan_at = sys.argv[1], int(sys.argv[2])
with open(log, "w") as f:
    for step in range(1, 81):
        loss = 2.0 * math.exp(-step / 20) + 0.5 + 0.01 * (step % 3)
        if step >= nan_at:
            loss = float("nan")
        print(f"epoch {step // 40} | step {step:4d} | loss {loss:.4f} | lr 0.001000", file=f, flush=True)
        time.sleep(0.01)
'''


def test_watch_follows_a_plain_loop_log_read_as_text(tmp_path: Path) -> None:
    """A log no specific reader claims is read by the generic extractor, line by line as it grows."""
    script = tmp_path / "loop.py"
    script.write_text(PLAIN_LOOP)
    log = tmp_path / "train.log"
    args = [sys.executable, "-m", "trainaudit", "watch", str(log), "--interval", "0.05", "--idle-timeout", "3"]
    watch = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert watch.stderr is not None
    first = watch.stderr.readline()
    assert "waiting for" in first, first
    writer = subprocess.run([sys.executable, str(script), str(log), "50"], timeout=120, check=True)
    assert writer.returncode == 0
    out, err = watch.communicate(timeout=120)
    assert watch.returncode == 1, first + err  # the NaN alert, not a crash (exit 3)
    assert "Traceback" not in err and "NotImplementedError" not in err
    alerts = [ln for ln in out.splitlines() if ln.startswith("step ") and "TA101" in ln]
    assert alerts and "since step 50" in alerts[0] and "loss is NaN from step 50" in alerts[0], out
    summary = next(ln for ln in out.splitlines() if ln.startswith("-- ") and "format" in ln)
    assert "format text" in summary and "last step 80" in summary
    assert not [ln for ln in out.splitlines() if "since step" in ln
                and int(ln.split("since step ")[1].split(":")[0]) < 50]
