"""The HTML report in a real headless Chromium: no console errors, charts drawn with the vendored
uPlot (golden band, several runs, first bad step, gated window, rule markers that do not overlap,
y-axis labels that fit, a warm-up spike that does not set the scale), zoom and hover work,
evidence links scroll to the quoted line; a screenshot is kept in tests/artifacts/. Also the page is
self-contained (no network request at all)."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from shared_data import REPO, run_cli
from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.charts import Band, Curve, PlotSpec
from trainaudit.answer.schema import FinalAnswer, RootCause
from trainaudit.render.write import write_report

ARTIFACTS = REPO / "tests" / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    assert Path(path).exists(), "chromium is missing: `make test` installs it (apt-get install chromium)"
    return path


def golden_answer(tmp: Path) -> Path:
    """A compare-like answer: golden vs two actual runs, the second drifting from step 60."""
    steps = list(range(1, 101))
    golden = [10.0 * math.exp(-s / 40) + 2.0 for s in steps]
    run1 = [g * (1 + 0.001 * math.sin(s)) for s, g in zip(steps, golden)]
    run2 = [g if s < 60 else g * (1 + 0.004 * (s - 59)) for s, g in zip(steps, golden)]
    run2[90] = math.nan
    b = AnswerBuilder("compare")
    sg = b.source("golden_values_dev_dgx_h100.json", "golden_values")
    sa = b.source("logs/run2/train.log", "log")
    b.fact(sg, "golden lm loss", metric="lm loss", steps=steps, values=golden)
    fa = b.fact(sa, "actual lm loss (run 2)", metric="lm loss", steps=steps, values=run2)
    f60 = b.fact(sa, "lm loss at the first failing step", metric="lm loss", step=61, value=run2[60], line=1234,
                 quote=f" [2025-03-01 10:00:00] iteration       61/     100 | lm loss: {run2[60]:.6E} |")
    g61 = b.fact(sg, "golden lm loss at step 61", metric="lm loss", step=61, value=golden[60], line=3)
    c1 = b.calc("relative error at step 61", "(F3 - F4) / abs(F4)", [f60, g61], unit="ratio")
    d1 = b.finding(rule="TA701", category="golden_mismatch", severity="high", metric="lm loss", first_bad_step=61,
                   last_step=100, message="lm loss leaves the 5 % band from step 61", evidence=[f60, c1, fa],
                   confidence=0.9)
    b.comparison(metric="lm loss", check="approximate", policy="megatron", passed=False, rtol=0.05, atol=0.0,
                 n_steps=100, n_failing=28, allowed_failing=1, first_failing_step=61, max_rel_err=0.16,
                 median_rel_err=0.01, evidence=[c1])
    b.commit(sha="a" * 40, date="2025-03-01T09:00:00Z", title="Switch attention kernel", files=["megatron/attn.py"],
             role="suspect", relevance=0.8, reason="touches attention numerics between good and bad")
    final = FinalAnswer(verdict="real_regression", category="golden_mismatch", first_bad_step=61,
                        summary="lm loss drifts above the golden values from step 61.",
                        root_causes=[RootCause(issue="attention kernel change", category="golden_mismatch",
                                               severity="high", evidence=[d1, f60], fix="revert aaaaaaa",
                                               expected_impact="loss back on the golden curve",
                                               verify="rerun the functional test", confidence=0.8)])
    answer = b.build(final)
    band_lo = [g * 0.95 for g in golden]
    band_hi = [g * 1.05 for g in golden]
    spec = PlotSpec("lm loss", "lm loss: golden vs actual", [Curve("golden", steps, golden),
                    Curve("run 1", steps, run1), Curve("run 2", steps, run2, "dashed")], first_bad_step=61,
                    band=Band("golden ±5 %", steps, band_lo, band_hi),
                    markers=[(50, "restart"), (51, "TA206 lr jump"), (52, "TA103")])
    paths = write_report(answer, tmp / "out", [spec])
    assert paths.charts is not None and paths.charts.is_file()
    return paths.json


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)
        yield b
        b.close()


def open_page(browser, html: Path):
    page = browser.new_page(viewport={"width": 1366, "height": 800})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:", "about:")) else None)
    page.goto(html.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, errors, requests


def test_report_in_chromium(tmp_path: Path, browser) -> None:
    answer = golden_answer(tmp_path)
    res = run_cli("report", str(answer), "-o", str(tmp_path / "report.html"))
    assert res.returncode == 0, res.stderr
    html = tmp_path / "report.html"
    text = html.read_text()
    assert "<script src" not in text and "<link" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    page, errors, requests = open_page(browser, html)

    # verdict and root cause at the top
    assert page.inner_text(".verdict .badge").lower() == "real regression"
    assert page.locator("#verdict").bounding_box()["y"] < 50
    assert "attention kernel change" in page.inner_text("#root-causes")

    # the chart is drawn by uPlot: 3 curves, the band, first bad step, a NaN marker, three rule
    # markers two steps apart whose labels stack instead of overlapping
    fig = page.locator("#chart-0")
    assert fig.locator(".uplot canvas").count() == 1
    assert fig.get_attribute("data-drawn") == "3"
    assert page.evaluate("window.trainauditCharts[0].u.bands.length") == 1
    assert fig.get_attribute("data-nonfinite") == "1"  # run 2 is NaN at step 91
    assert fig.get_attribute("data-marker-rows") == "3"
    legend = [r for r in fig.locator(".u-legend .u-series").all() if r.is_visible()]
    assert [r.locator(".u-label").inner_text() for r in legend] == ["step", "golden", "run 1", "run 2", "golden ±5 %"]
    _labels_fit(page)

    # hover: the legend shows the value of every run at the cursor's step
    box = fig.locator(".u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    values = fig.locator(".u-legend .u-value").all_inner_texts()
    assert all(v not in ("", "--", "–") for v in values[:4]), values

    # drag to zoom, double-click to reset
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + 40, steps=5)
    page.mouse.up()
    assert fig.get_attribute("data-zoomed") == "1"
    page.mouse.dblclick(box["x"] + 30, box["y"] + 30)
    assert fig.get_attribute("data-zoomed") == "0"

    # legend toggles a curve
    fig.locator(".u-legend .u-series").nth(2).click()
    assert fig.get_attribute("data-drawn") == "2"
    fig.locator(".u-legend .u-series").nth(2).click()
    assert fig.get_attribute("data-drawn") == "3"

    # the screenshot a human looks at
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "html_report.png"), full_page=True)

    # an evidence id in the root cause scrolls to the quoted source line
    page.evaluate("window.scrollTo(0, 0)")
    link = page.locator("#root-causes a.ev[href='#ev-f3']")
    link.click()
    page.wait_for_function("document.getElementById('ev-f3').getBoundingClientRect().top < window.innerHeight")
    target = page.locator("#ev-f3")
    # scrolled: the quoted line is fully on screen, at the top unless the page ends first
    top, bottom, height, scroll_y, max_scroll = page.evaluate(
        "() => { const r = document.getElementById('ev-f3').getBoundingClientRect(); "
        "return [r.top, r.bottom, window.innerHeight, window.scrollY, "
        "document.documentElement.scrollHeight - window.innerHeight]; }")
    assert scroll_y > 0 and top >= 0 and bottom <= height
    assert top < 100 or abs(scroll_y - max_scroll) < 2
    assert "lm loss: " in target.locator("pre.quote").inner_text()
    assert "logs/run2/train.log:1234" in target.inner_text()
    assert "flash" in (target.get_attribute("class") or "")
    assert page.evaluate("location.hash") == "#ev-f3"

    # commits table, checks table
    assert "Switch attention kernel" in page.inner_text("#commits")
    assert "FAIL" in page.inner_text("#checks")
    assert errors == [] and requests == []
    page.close()


def test_report_from_facts_only_and_print(tmp_path: Path, browser) -> None:
    """No sidecar: charts come from the series quoted in answer.json, band from the comparison."""
    answer = golden_answer(tmp_path)
    (answer.parent / "charts.json").unlink()
    html = tmp_path / "r.html"
    assert run_cli("report", str(answer), "-o", str(html)).returncode == 0
    page, errors, _ = open_page(browser, html)
    fig = page.locator("#chart-0")
    assert fig.get_attribute("data-drawn") == "2"  # golden fact + actual fact
    assert page.evaluate("window.trainauditCharts[0].u.bands.length") == 1
    assert page.evaluate("window.trainauditCharts[0].spec.first_bad_step") == 61
    page.emulate_media(media="print")
    assert not page.locator(".chart .tools").first.is_visible()
    pdf = page.pdf(format="A4")
    assert pdf.startswith(b"%PDF") and len(pdf) > 10_000
    assert errors == []
    page.close()


def test_diagnose_html_flag_on_a_real_failure(tmp_path: Path, browser) -> None:
    """`diagnose --html` on a run whose loss turns NaN: report.html beside answer.json, drawn."""
    log = tmp_path / "train.jsonl"
    rows = [{"step": s, "loss": (3.0 * math.exp(-s / 80) + 1.0) if s < 150 else "nan", "lr": 1e-4}
            for s in range(1, 201)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    res = run_cli("diagnose", str(log), "-o", str(out), "--html", "--quiet")
    assert res.returncode == 1, res.stderr  # unhealthy
    page, errors, _ = open_page(browser, out / "report.html")
    assert page.inner_text(".verdict .badge").lower() == "unhealthy"
    fig = page.locator("#chart-0")
    assert fig.get_attribute("data-drawn") == "1"
    # steps 150..200 are NaN: a labelled band, and the x-axis ends a quarter of the run before
    # after its start (it takes 20 % of the width), so the run before the failure keeps most of it
    assert page.evaluate("window.trainauditCharts[0].spec.nonfinite_tail") == [150, 200, 51]
    x_max = page.evaluate("window.trainauditCharts[0].u.scales.x.max")
    assert 150 < x_max < 200 and (x_max - 150) / (x_max - 1) == pytest.approx(0.2, abs=0.01)
    assert fig.get_attribute("data-nonfinite") == str(len(range(150, int(x_max) + 1)))  # those in view
    assert page.evaluate("window.trainauditCharts[0].spec.first_bad_step") == 150
    assert errors == []
    page.close()


def _labels_fit(page) -> None:  # type: ignore[no-untyped-def]
    """Every y tick label of every chart is shorter than its axis (none is cut off) and reads as a
    number (no ".000e+15")."""
    for label_w, axis_w, labels in page.evaluate(
            "window.trainauditCharts.map(c => { const u = c.u, a = u.axes[1]; u.ctx.font = a.font[0]; "
            "const vs = a._values.filter(v => v); "
            "return [Math.max(...vs.map(v => u.ctx.measureText(v).width)) / devicePixelRatio, "
            "a._size - a.ticks.size, vs]; })"):
        assert labels and label_w <= axis_w, (label_w, axis_w, labels)
        assert all(v[0].isdigit() or v[0] == "-" for v in labels), labels


def test_seed_case_charts_focus_on_the_gated_window(tmp_path: Path, browser) -> None:
    """Megatron's iteration-time gate on the seed case (+14.5 % over steps 30-45): the 9 s warm-up
    spike at step 2 does not set the scale, the window is shaded, the PNG and the page agree; a
    loss that grows to 1e15 on a log axis keeps whole tick labels."""
    from tests.compare.helpers import MIMO, MIMO_CONFIG

    out = tmp_path / "seed"
    res = run_cli("compare", "--golden", str(MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"),
                  str(MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"),
                  "--model-config", str(MIMO_CONFIG), "-o", str(out), "--html", "-q")
    assert res.returncode == 1, res.stderr
    charts = json.loads((out / "charts.json").read_text())["charts"]
    it = next(c for c in charts if c["metric"] == "iteration-time")
    assert it["window"] == [30, 45]
    lo, hi = it["yrange"]
    assert hi < 1.1 < 9.0 and lo > 0.7  # both medians (0.79, 0.90) inside, the 9.37 s warm-up step outside
    page, errors, _ = open_page(browser, out / "report.html")
    fig = page.locator("#chart-0")
    assert page.evaluate("window.trainauditCharts[0].u.scales.y.max") < 1.1
    assert int(fig.get_attribute("data-offscale")) >= 2  # the warm-up steps, drawn on the edge
    page.screenshot(path=str(ARTIFACTS / "html_seed_iteration_time.png"), full_page=True)
    assert errors == []
    page.close()

    steps = list(range(1, 201))
    loss = [2.0 * 10 ** (s / 13.0) for s in steps]  # to 2e15
    b = AnswerBuilder("diagnose")
    s = b.source("train.log", "log")
    b.fact(s, "loss", metric="loss", steps=steps, values=loss)
    answer = b.build(FinalAnswer(verdict="unhealthy", category="divergence", first_bad_step=120, summary="diverges"))
    paths = write_report(answer, tmp_path / "div", [PlotSpec("loss", "loss", [Curve("loss", steps, loss)],
                                                             first_bad_step=120, logy=True)])
    assert run_cli("report", str(paths.json)).returncode == 0
    page, errors, _ = open_page(browser, tmp_path / "div" / "report.html")
    _labels_fit(page)
    assert errors == []
    page.close()


def test_real_nan_run_and_golden_shift_in_chromium(tmp_path: Path, browser, synth_runs) -> None:
    """A real CPU run whose lr jumps x1000 (loss to ~1e18, then NaN to the end): every chart marks the
    headline's first bad step, keeps the pre-failure y range with the peak off scale, draws the lr
    on a right axis and the smoothed loss over the raw one. A golden chart with a 6 % shift has its
    relative-difference panel under it, zoomed with it."""
    case = synth_runs.get("nan-after-lr-jump")
    out = tmp_path / "nan"
    res = run_cli("diagnose", str(case.dir), "-o", str(out), "--html", "-q")
    assert res.returncode == 1, res.stderr
    headline = json.loads((out / "answer.json").read_text())["final_answer"]["first_bad_step"]
    page, errors, _ = open_page(browser, out / "report.html")
    n = page.locator("figure.chart").count()
    assert n >= 2
    assert page.evaluate("window.trainauditCharts.map(c => c.spec.first_bad_step)") == [headline] * n
    fig = page.locator("#chart-0")
    assert fig.get_attribute("data-yscale") == "linear" and fig.get_attribute("data-right") == "1"
    assert fig.get_attribute("data-smoothed") == "1" and fig.get_attribute("data-drawn") == "1"
    assert int(fig.get_attribute("data-offscale")) >= 1  # the explosion, on the top edge
    y_max, x_max, tail = page.evaluate("[window.trainauditCharts[0].u.scales.y.max, "
                                       "window.trainauditCharts[0].u.scales.x.max, "
                                       "window.trainauditCharts[0].spec.nonfinite_tail]")
    assert y_max < 10 and tail[1] == 200 and x_max < tail[1]
    page.locator("#charts").screenshot(path=str(ARTIFACTS / "html_nan_run_charts.png"))
    assert errors == []
    page.close()

    golden = REPO / "tests" / "fixtures" / "megatron" / "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
    data = json.loads((golden / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json").read_text())
    for k, v in data["lm loss"]["values"].items():
        if int(k) >= 60 and isinstance(v, (int, float)):
            data["lm loss"]["values"][k] = v * 1.06
    (tmp_path / "actual.json").write_text(json.dumps(data))
    out = tmp_path / "golden"
    res = run_cli("compare", "--golden", str(golden / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"),
                  str(tmp_path / "actual.json"), "--model-config", str(golden / "model_config.yaml"), "-o", str(out),
                  "--html", "-q")
    assert res.returncode == 1, res.stderr
    page, errors, _ = open_page(browser, out / "report.html")
    i = page.evaluate("window.trainauditCharts.findIndex(c => c.spec.title.includes('approximate'))")
    fig = page.locator(f"#chart-{i}")
    assert fig.get_attribute("data-panel") == "1"
    lo, hi = page.evaluate(f"[window.trainauditCharts[{i}].panel.u.scales.y.min, "
                           f"window.trainauditCharts[{i}].panel.u.scales.y.max]")
    assert lo <= -0.05 and 0.06 < hi < 0.2  # the band and the 6 % line, both in view
    page.evaluate(f"window.trainauditCharts[{i}].u.setScale('x', {{min: 50, max: 70}})")
    assert page.evaluate(f"[window.trainauditCharts[{i}].panel.u.scales.x.min, "
                         f"window.trainauditCharts[{i}].panel.u.scales.x.max]") == [50, 70]
    fig.screenshot(path=str(ARTIFACTS / "html_golden_relative_panel.png"))
    assert errors == []
    page.close()
