"""The plots of real CPU runs show the cause: the run before a NaN/Inf tail keeps most of the
x-axis and the tail is a labelled band; an explosion does not flatten the run before it; the learning
rate sits on a right axis; train and validation loss share one axis; long curves are smoothed the
way TensorBoard smooths them; a golden chart has the relative difference with its tolerance beside
it; every chart marks the headline's first bad step. Checked on charts.json and on the matplotlib
Figure (scales, limits, lines, labels), never on pixels."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared_data import REPO, run_cli
from trainaudit.answer.charts import SMOOTHING, Curve, PlotSpec, ema, nonfinite_tail, relative_panel, y_axis
from trainaudit.diagnosis import diagnose_run, plot_specs
from trainaudit.ingest import load_run
from trainaudit.render.plots import figure, tick

MIMO = REPO / "tests" / "fixtures" / "megatron" / "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"


def _diagnose(run_dir: Path, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    res = run_cli("diagnose", str(run_dir), "-o", str(out), "-q")
    assert res.returncode == 1, res.stderr  # unhealthy
    answer = json.loads((out / "answer.json").read_text())
    charts = json.loads((out / "charts.json").read_text())["charts"]
    return answer, charts


def _specs(run_dir: Path) -> list[PlotSpec]:
    run, _ = load_run([str(run_dir)])
    return plot_specs(run, diagnose_run(run))


def _jsonl(path: Path, key: str) -> tuple[list[int], list[float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if key in r]
    return [int(r["step"]) for r in rows], [float(r[key]) if r[key] is not None else math.nan for r in rows]


@contextlib.contextmanager
def _drawn(spec: PlotSpec) -> Iterator[Any]:
    """The spec's matplotlib figure, cleared after the checks."""
    fig = figure(spec)
    try:
        yield fig
    finally:
        fig.clf()


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for leg in fig.legends
                                                                    for t in leg.get_texts()]


def test_nan_run_band_narrow_axis_and_readable_pre_failure_range(synth_runs, tmp_path: Path) -> None:
    """Megatron-style run whose lr jumps x1000: the loss explodes to ~1e18 in 3 steps, then is NaN to
    step 200."""
    case = synth_runs.get("nan-after-lr-jump")
    answer, charts = _diagnose(case.dir, tmp_path / "out")
    headline = answer["final_answer"]["first_bad_step"]
    assert headline is not None and all(c["first_bad_step"] == headline for c in charts)
    steps, loss = _jsonl(case.file("metrics.jsonl"), "loss")
    finite = [s for s, v in zip(steps, loss) if math.isfinite(v)]
    pre = [v for s, v in zip(steps, loss) if s < headline and math.isfinite(v)]
    peak = max((v for v in loss if math.isfinite(v)), key=abs)
    assert peak > 1e6 * max(pre)  # the run really explodes

    chart = next(c for c in charts if c["curves"][0]["label"] == "lm loss")
    tail = chart["nonfinite_tail"]
    assert tail == [max(finite) + 1, max(steps), max(steps) - max(finite)]
    assert chart["yscale"] == "linear" and chart["yrange"][1] < 2 * max(pre)  # the pre-failure range
    assert chart["explosion"][0] > headline - 1 and chart["explosion"][1] == pytest.approx(peak, rel=1e-6)
    assert chart["smoothing"] == SMOOTHING and "EMA 0.6" in chart["smoothing_label"]
    assert len(chart["curves"][0]["smoothed"]) == len(chart["curves"][0]["values"])
    assert [r["label"] for r in chart["right"]] == ["learning-rate"] and chart["right_label"] == "learning rate"

    spec = next(s for s in _specs(case.dir) if s.metric == "lm loss")
    with _drawn(spec) as fig:
        ax, lr_ax = fig.axes
        lo, hi = ax.get_xlim()
        assert hi < max(steps)  # the NaN tail does not take the axis
        assert (hi - tail[0]) / (hi - lo) < 0.25 and (tail[0] - lo) / (hi - lo) > 0.75
        assert ax.get_yscale() == "linear" and ax.get_ylim()[1] < 2 * max(pre)
        red = [p for p in ax.patches if p.get_facecolor()[0] > 0.9 and p.get_facecolor()[1] < 0.1]
        assert red, "the NaN/Inf tail is a shaded band"
        texts = _texts(fig)
        assert any(t.startswith(f"NaN/Inf ({tail[2]} steps)") and f"to step {tail[1]}" in t for t in texts)
        assert any(t.startswith("↑") and f"at step {chart['explosion'][0]}" in t for t in texts)
        assert f"first bad step {headline}" in texts
        # the lr jumps x1000: a log right axis shows both levels
        assert lr_ax.get_ylabel() == "learning rate" and lr_ax.get_yscale() == "log"
        labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        assert "lm loss (raw)" in labels and "lm loss, smoothed (EMA 0.6)" in labels
        assert "learning-rate (right axis)" in labels
        fig.canvas.draw()
        ticks = [t.get_text() for a in fig.axes for t in a.get_yticklabels() if t.get_text()]
        assert ticks and not any("$" in t for t in ticks), ticks  # no raw mathtext


def test_run_that_stays_exploded_gets_a_log_axis_with_plain_ticks(synth_runs, tmp_path: Path) -> None:
    """A tanh RNN whose grad norm jumps 5+ orders of magnitude at step 120 and stays there."""
    case = synth_runs.get("rnn-exploding")
    answer, charts = _diagnose(case.dir, tmp_path / "out")
    gn = next(c for c in charts if c["metric"] == "grad_norm")
    assert gn["yscale"] == "log" and gn["explosion"] is None
    assert gn["first_bad_step"] == answer["final_answer"]["first_bad_step"]
    with _drawn(next(s for s in _specs(case.dir) if s.metric == "grad_norm")) as fig:
        assert fig.axes[0].get_yscale() == "log"
        fig.canvas.draw()
        ticks = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
        assert any("e" in t for t in ticks) and not any("$" in t or "mathdefault" in t for t in ticks), ticks


def test_diverging_run_shows_the_lr_warmup_beside_the_loss(synth_runs, tmp_path: Path) -> None:
    """SGD warming up to lr 1.0: the loss learns, then climbs back to chance level as the lr grows."""
    case = synth_runs.get("lr-too-high")
    answer, charts = _diagnose(case.dir, tmp_path / "out")
    loss = next(c for c in charts if c["metric"] == "loss")
    steps, lr = _jsonl(case.file("metrics.jsonl"), "lr")
    right = loss["right"][0]
    assert right["steps"] == steps and right["values"] == pytest.approx(lr)
    assert loss["first_bad_step"] == answer["final_answer"]["first_bad_step"]
    with _drawn(next(s for s in _specs(case.dir) if s.metric == "loss")) as fig:
        ax, lr_ax = fig.axes
        assert lr_ax.get_yscale() == "linear" and lr_ax.get_ylim()[0] == 0 and lr_ax.get_ylim()[1] >= max(lr)
        raw, smooth = ax.get_lines()[:2]
        assert raw.get_alpha() is not None and raw.get_alpha() < 0.5 and smooth.get_alpha() is None
        assert list(smooth.get_ydata()) == pytest.approx(list(ema(raw.get_ydata(), SMOOTHING)))


def test_overfitting_run_draws_train_and_validation_loss_on_one_axis(synth_runs, tmp_path: Path) -> None:
    """Lightning, a wide MLP on 64 noisy points: val_loss rises while train_loss keeps falling."""
    case = synth_runs.get("lightning-overfit")
    answer, charts = _diagnose(case.dir, tmp_path / "out")
    chart = next(c for c in charts if c["metric"] == "val_loss")
    assert [c["label"] for c in chart["curves"]] == ["val_loss", "train_loss"]
    assert chart["ylabel"] == "loss" and chart["first_bad_step"] == answer["final_answer"]["first_bad_step"]
    with _drawn(next(s for s in _specs(case.dir) if s.metric == "val_loss")) as fig:
        ax = fig.axes[0]
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert {"val_loss, smoothed (EMA 0.6)", "train_loss, smoothed (EMA 0.6)"} <= set(labels)
        assert ax.get_ylabel() == "loss"
        ys = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
        # the gap that shows overfitting: at the end validation loss is far above training loss
        assert ys["val_loss, smoothed (EMA 0.6)"][-1] > 2 * ys["train_loss, smoothed (EMA 0.6)"][-1]


def test_golden_chart_has_the_relative_difference_beside_it(tmp_path: Path) -> None:
    """Real Megatron golden values against a copy whose lm loss is 6 % higher from step 60: on the
    absolute axis (loss 3.3 to 8) the shift is a hair; the panel shows 0.06 against a +-0.05 band."""
    golden = MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
    data = json.loads(golden.read_text())
    for k, v in data["lm loss"]["values"].items():
        if int(k) >= 60 and isinstance(v, (int, float)):
            data["lm loss"]["values"][k] = v * 1.06
    actual = tmp_path / "actual.json"
    actual.write_text(json.dumps(data))
    out = tmp_path / "out"
    res = run_cli("compare", "--golden", str(golden), str(actual), "--model-config", str(MIMO / "model_config.yaml"),
                  "-o", str(out), "-q")
    assert res.returncode == 1, res.stderr
    charts = json.loads((out / "charts.json").read_text())["charts"]
    chart = next(c for c in charts if c["metric"] == "lm loss" and "approximate" in c["title"])
    panel = chart["panel"]
    assert panel["ylabel"] == "relative difference" and panel["band"]["label"] == "tolerance ±0.05"
    rel = dict(zip(panel["curves"][0]["steps"], panel["curves"][0]["values"]))
    assert rel[59] == pytest.approx(0.0, abs=1e-12) and rel[60] == pytest.approx(0.06, abs=1e-9)
    assert set(panel["band"]["high"]) == {0.05} and set(panel["band"]["low"]) == {-0.05}
    assert panel["first_bad_step"] == chart["first_bad_step"] == 60
    png = out / "plots" / "lm_loss_approximate.png"
    assert png.is_file()

    spec = PlotSpec("lm loss", "lm loss", [Curve("golden", [1, 2, 3], [3.0, 3.0, 3.0]),
                                           Curve("actual", [1, 2, 3], [3.0, 3.18, 3.18])], first_bad_step=2,
                    panel=relative_panel("lm loss", [1, 2, 3], [3.0, 3.18, 3.18], [3.0, 3.0, 3.0], 0.05, 0.0, 2))
    with _drawn(spec) as fig:
        top, low = fig.axes
        assert low.get_ylabel() == "relative difference" and low.get_xlabel() == "step" and top.get_xlabel() == ""
        assert low.get_ylim()[0] <= -0.05 and 0.06 <= low.get_ylim()[1] < 0.2  # band and shift both readable
        assert list(low.get_lines()[0].get_ydata()) == pytest.approx([0.0, 0.06, 0.06])


def test_ema_is_tensorboards_smoothing() -> None:
    """Debiased EMA (TensorBoard's vz_line_chart2 smoothing, W&B's default): non-finite values kept,
    left out of the average."""
    out = ema([1.0, 2.0, math.nan, 4.0], 0.5)
    # last = 0.5 -> 0.5 / 0.5; last = 0.25 + 1 -> 1.25 / 0.75; NaN kept; last = 0.625 + 2 -> 2.625 / 0.875
    assert out[0] == pytest.approx(1.0) and out[1] == pytest.approx(1.25 / 0.75)
    assert math.isnan(out[2]) and out[3] == pytest.approx(2.625 / 0.875)
    assert list(ema([5.0] * 4, 0.9)) == pytest.approx([5.0] * 4)  # no pull towards 0 at the start


def test_y_axis_choices() -> None:
    steps = list(range(1, 101))
    calm = [2.0 - 0.005 * s for s in steps]
    # stays exploded and crosses zero: symlog, linear within the pre-failure scale
    crossing = [v if s < 60 else (-1) ** s * 1e6 for s, v in zip(steps, calm)]
    y = y_axis(PlotSpec("x", "x", [Curve("x", steps, crossing)], first_bad_step=60))
    assert y.scale == "symlog" and y.linthresh == pytest.approx(max(abs(v) for v in calm[:59]))
    # a short spike at the end: the pre-failure range, the peak marked
    short = [v if s < 95 else 1e9 for s, v in zip(steps, calm)]
    y = y_axis(PlotSpec("x", "x", [Curve("x", steps, short)], first_bad_step=95))
    assert y.scale == "linear" and y.limits is not None and y.limits[1] < 3 and y.explosion == (95, 1e9)
    # a healthy curve: no special scale
    assert y_axis(PlotSpec("x", "x", [Curve("x", steps, calm)], first_bad_step=None)) == y_axis(
        PlotSpec("x", "x", [Curve("x", steps, calm)]))
    assert y_axis(PlotSpec("x", "x", [Curve("x", steps, calm)], first_bad_step=50)).explosion is None
    # a run that ends finite has no NaN tail; one that ends NaN has one
    assert nonfinite_tail(PlotSpec("x", "x", [Curve("x", steps, calm)])) is None
    assert nonfinite_tail(PlotSpec("x", "x", [Curve("x", steps, [*calm[:90], *[math.nan] * 10])])) == (91, 100, 10)
    assert [tick(v) for v in (1e18, 0.25, 2e-4, 0.0)] == ["1e18", "0.25", "2e-4", "0"]
    assert np.isfinite(ema(calm, 0.6)).all()


def test_audit_run_vs_run_chart_has_the_relative_difference(tmp_path: Path) -> None:
    """The audit demo (real tiny runs): the candidate's loss is about 6 % above the baseline from
    step 40, inside a +-5 % band on the absolute axis; the panel shows it leave the band."""
    demo = REPO / "examples" / "audit-demo"
    out = tmp_path / "audit"
    res = run_cli("audit", str(demo / "failing"), "--passing", str(demo / "passing"), "-o", str(out), "-q")
    assert res.returncode == 1, res.stderr
    chart = next(c for c in json.loads((out / "charts.json").read_text())["charts"] if c["metric"] == "lm loss")
    panel = chart["panel"]
    assert panel["title"] == "lm loss: relative difference to baseline"
    assert [c["label"] for c in panel["curves"]] == ["candidate / baseline - 1"]
    band = panel["band"]["high"][0]
    rel = dict(zip(panel["curves"][0]["steps"], panel["curves"][0]["values"]))
    first = chart["first_bad_step"]
    assert panel["first_bad_step"] == first
    assert all(abs(v) <= band for s, v in rel.items() if s < first)
    assert all(v > band for s, v in rel.items() if s >= first)


def test_report_without_sidecar_marks_the_headline_step(tmp_path: Path) -> None:
    """A loss that climbs back as the lr warms up to 1.0, with a spike near the end (written here, so that
    the findings do not depend on a CPU's floats): the headline's first bad step (where the loss stops
    falling) is far before the loss-spike finding; charts rebuilt from answer.json alone (no charts.json)
    mark the headline's step, as the sidecar's charts do."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = []
    for i in range(1, 61):
        loss = 2.0 * math.exp(-min(i, 25) / 6) + 0.5 + 0.06 * max(i - 25, 0)
        lines.append(f"step {i} loss {9.0 if i == 52 else loss:.4f} lr {min(1.0, i / 25):.3f}\n")
    (run_dir / "train.log").write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    answer, charts = _diagnose(run_dir, out)
    headline = answer["final_answer"]["first_bad_step"]
    loss_findings = [f["first_bad_step"] for f in answer["findings"] if f["metric"] == "loss"]
    assert headline is not None and any(s != headline for s in loss_findings)  # the case that once differed
    assert all(c["first_bad_step"] == headline for c in charts)
    (out / "charts.json").unlink()
    res = run_cli("report", str(out / "answer.json"), "-o", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "r.html").read_text()
    start = html.index('<script type="application/json" id="ta-data">') + len('<script type="application/json" id="ta-data">')
    rebuilt = json.loads(html[start:html.index("</script>", start)])["charts"]
    assert rebuilt and all(c["first_bad_step"] == headline for c in rebuilt)
