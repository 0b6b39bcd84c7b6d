"""The HTML report in a real headless Chromium: no console errors, charts drawn (golden band, several
runs, first bad step), zoom and hover work, evidence links scroll to the quoted line; a screenshot is
kept in tests/artifacts/. Also the page is self-contained (no network request at all)."""

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
    fg = b.fact(sg, "golden lm loss", metric="lm loss", steps=steps, values=golden)
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
                    band=Band("golden ±5 %", steps, band_lo, band_hi), markers=[(50, "restart")])
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

    # the chart is drawn: 3 curves, the band, first bad step, a NaN marker
    fig = page.locator("#chart-0")
    assert fig.get_attribute("data-drawn") == "3"
    assert fig.locator("path.band").count() >= 1
    assert fig.locator("line.first-bad").count() == 1
    assert fig.locator("path.nonfinite").count() == 1  # run 2 is NaN at step 91
    assert page.locator("#chart-0 .legend button").count() == 3
    d = fig.locator("path.curve").first.get_attribute("d")
    assert d.count("L") >= 99  # golden: 100 points joined

    # hover shows the values of every run at the nearest step
    box = fig.locator("rect.hit").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    tip = fig.locator(".tip")
    assert tip.is_visible()
    assert "golden" in tip.inner_text() and "run 2" in tip.inner_text()

    # drag to zoom, double-click to reset
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + 40, steps=5)
    page.mouse.up()
    assert fig.get_attribute("data-zoomed") == "1"
    page.mouse.dblclick(box["x"] + 30, box["y"] + 30)
    assert fig.get_attribute("data-zoomed") == "0"

    # legend toggles a curve
    page.locator("#chart-0 .legend button").nth(1).click()
    assert fig.get_attribute("data-drawn") == "2"
    page.locator("#chart-0 .legend button").nth(1).click()
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
    assert scroll_y > 0 and 0 <= top and bottom <= height
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
    assert fig.locator("path.band").count() >= 1
    assert fig.locator("line.first-bad").count() == 1
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
    assert res.returncode == 0, res.stderr
    page, errors, _ = open_page(browser, out / "report.html")
    assert page.inner_text(".verdict .badge").lower() == "unhealthy"
    fig = page.locator("#chart-0")
    assert fig.get_attribute("data-drawn") == "1"
    assert fig.locator("path.nonfinite").count() == 51  # steps 150..200
    assert "first bad step 150" in fig.inner_text()
    assert errors == []
    page.close()
