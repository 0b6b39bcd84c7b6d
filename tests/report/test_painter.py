"""PNG plots drawn by a forked painter are the bytes the same specs give in process; a painter that
fails or is not used leaves no child behind and the report is drawn in process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from trainaudit.answer.charts import Curve, PlotSpec
from trainaudit.render.painter import Painter
from trainaudit.render.plots import render

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the painter forks on Linux only")


def _specs() -> list[PlotSpec]:
    steps = np.arange(3000)
    loss = 4.0 * np.exp(-steps / 800.0) + 0.05 * np.sin(steps)
    loss[2400:] = np.nan
    lr = np.minimum(1.0, steps / 300.0) * 3e-4
    return [PlotSpec("loss", "loss turns NaN", [Curve("loss", steps, loss)], first_bad_step=2400,
                     markers=[(2400, "TA101")], right=[Curve("lr", steps, lr)], right_label="lr", smoothing=0.6),
            PlotSpec("grad_norm", "grad norm", [Curve("grad norm", steps[::7], np.abs(loss[::7]) * 3, "points")],
                     logy=True)]


def _in_process(specs: list[PlotSpec]) -> list[bytes]:
    out = []
    for spec in specs:
        buf = io.BytesIO()
        render(spec, buf)
        out.append(buf.getvalue())
    return out


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _started() -> Painter:
    assert threading.active_count() == 1, f"a thread left running: {threading.enumerate()}"
    painter = Painter.start()
    assert painter is not None, "a POSIX process with one thread and matplotlib gets a painter"
    return painter


def _isolated(check: str, *args: str) -> None:
    """Run ``check`` of this file in a fresh interpreter: a painter is refused in a process where
    other threads run, as a test process may (a tqdm monitor, a server left by another test)."""
    proc = subprocess.run([sys.executable, __file__, check, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def check_same_bytes() -> None:
    specs = _specs()
    painter = _started()
    pid = painter._pid
    painter.send(specs)
    pngs = painter.receive()
    assert pngs is not None and len(pngs) == 2 and all(p.startswith(b"\x89PNG") for p in pngs)
    assert pngs == _in_process(specs)
    assert not _exists(pid)  # reaped


def check_unused_reaped() -> None:
    painter = _started()
    pid = painter._pid
    assert _exists(pid)
    painter.close()
    assert not _exists(pid)
    painter.close()  # twice is harmless


def check_failing() -> None:
    """A spec the child cannot draw: receive() says so (write_report then draws in process, and
    raises as it always did for a spec that cannot be drawn at all)."""
    painter = _started()
    painter.send([PlotSpec("x", "x", [Curve("x", [1, 2], [1.0, 2.0])], panel=object())])  # type: ignore[arg-type]
    assert painter.receive() is None


def test_specs_are_drawn_by_two_children_in_order_and_a_failure_of_either_is_seen() -> None:
    _isolated("check_two_children")


def check_two_children() -> None:
    """With several specs the painter's child forks a second one for every other spec: the PNGs come
    back in the specs' order, and a spec neither can draw (here one of the second child's) ends in
    None, never in a short or shifted list."""
    specs = [*_specs(), *_specs()[::-1], _specs()[0]]
    painter = _started()
    painter.send(specs)
    assert painter.receive() == _in_process(specs)
    bad = PlotSpec("x", "x", [Curve("x", [1, 2], [1.0, 2.0])], panel=object())  # type: ignore[arg-type]
    painter = _started()
    painter.send([specs[0], bad, specs[1]])
    assert painter.receive() is None


def _diagnosed(log: Path) -> tuple[object, list[PlotSpec]]:
    from trainaudit.diagnosis import build_answer, diagnose_run, plot_specs
    from trainaudit.ingest import load_run
    from trainaudit.rules import load_config

    run, _ = load_run([str(log)], None, None)
    result = diagnose_run(run, load_config(None))
    return build_answer([str(log)], run, result), plot_specs(run, result)


def check_report(tmp: str) -> None:
    from trainaudit.render.write import start_drawing, write_report

    tmp_path = Path(tmp)
    log = tmp_path / "train.log"
    lines = [f" iteration {i:8d}/  100000 | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): 400.0 |"
             f" learning rate: 1.000000E-04 | global batch size:     8 | lm loss: {max(0.5, 8.0 - i / 50):.6E} |"
             f" loss scale: 1.0 | grad norm: {1.0 + (i % 7) / 10:.3f} | number of skipped iterations:   0 |"
             f" number of nan iterations:   0 |" for i in range(1, 400)]
    lines += [f" iteration {i:8d}/  100000 | consumed samples: {i * 8:12d} | elapsed time per iteration (ms): 400.0 |"
              f" learning rate: 1.000000E-04 | global batch size:     8 | lm loss: nan |"
              f" loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 |"
              f" number of nan iterations:   1 |" for i in range(400, 450)]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    answer, specs = _diagnosed(log)
    assert specs, "the NaN run has plots"
    plain = write_report(answer, tmp_path / "plain", specs)  # type: ignore[arg-type]
    painted = write_report(answer, tmp_path / "painted", specs, painter=_started())  # type: ignore[arg-type]
    assert [p.name for p in painted.plots] == [p.name for p in plain.plots] and plain.plots
    names = sorted(p.relative_to(plain.out_dir) for p in plain.out_dir.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(painted.out_dir) for p in painted.out_dir.rglob("*") if p.is_file())
    for name in names:
        assert (plain.out_dir / name).read_bytes() == (painted.out_dir / name).read_bytes(), name
    # handed over before the answer is written (as diagnose does): the same files
    early = _started()
    start_drawing(specs, early)
    assert early.sent is not None and list(early.sent) == specs
    ahead = write_report(answer, tmp_path / "ahead", specs, painter=early)  # type: ignore[arg-type]
    for name in names:
        assert (plain.out_dir / name).read_bytes() == (ahead.out_dir / name).read_bytes(), name
    # a painter handed other plots than the report's is a mistake, not a report with wrong PNGs
    other = _started()
    start_drawing(specs[:1] + _specs(), other)
    try:
        write_report(answer, tmp_path / "other", specs, painter=other)  # type: ignore[arg-type]
    except ValueError as exc:
        assert "other plots" in str(exc)
    else:
        raise AssertionError("write_report drew PNGs of other plots")
    finally:
        other.close()


def test_painter_draws_the_same_bytes_as_in_process() -> None:
    _isolated("check_same_bytes")


def test_an_unused_painter_is_ended_and_reaped() -> None:
    _isolated("check_unused_reaped")


def test_a_failing_painter_gives_none() -> None:
    _isolated("check_failing")


def test_a_report_written_with_a_painter_is_the_report_written_without(tmp_path: Path) -> None:
    _isolated("check_report", str(tmp_path))


def test_no_painter_while_other_threads_run() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert Painter.start() is None
    finally:
        stop.set()
        t.join()


def test_the_painter_loads_before_the_heavy_modules() -> None:
    """The command line starts the painter before the command's imports: importing it loads neither
    matplotlib nor pydantic nor the HTML report (whose names the package still gives on use)."""
    code = ("import sys, trainaudit.render.painter; "
            "print(sorted(m for m in ('matplotlib', 'pydantic', 'trainaudit.render.page') if m in sys.modules)); "
            "from trainaudit.render import report_html, charts_json; print(callable(report_html), callable(charts_json))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout.split("\n")
    assert out[:2] == ["[]", "True True"]


if __name__ == "__main__":  # a check run by _isolated
    globals()[sys.argv[1]](*sys.argv[2:])
