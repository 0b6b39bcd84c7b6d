"""From files to the page: read answer.json (and charts.json beside it), write report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainaudit.answer.load import load_answer
from trainaudit.errors import InputError
from trainaudit.outdir import write_file
from trainaudit.render.chartdata import CHARTS_NAME, charts_from_answer, load_charts
from trainaudit.render.html import render_html
from trainaudit.answer.schema import Answer
from trainaudit.answer.paths import display_path

HTML_NAME = "report.html"  # the page's name beside answer.json


def charts_for(answer: Answer, answer_path: Path, charts_path: Path | None = None) -> list[dict[str, Any]]:
    """The sidecar's charts when there is one (explicit path, else charts.json beside answer.json),
    otherwise charts rebuilt from the series quoted in answer.json."""
    path = charts_path or answer_path.with_name(CHARTS_NAME)
    if path.is_file():
        try:
            charts = load_charts(path)
        except (ValueError, OSError) as exc:
            if charts_path is not None:
                raise InputError(f"{display_path(path)}: {exc}") from None
            charts = []
        if charts:
            return charts
    elif charts_path is not None:
        raise InputError(f"{display_path(path)}: no such file")
    return charts_from_answer(answer)


def report_html(answer_path: Path, charts_path: Path | None = None) -> str:
    answer = load_answer(answer_path)
    return render_html(answer, charts_for(answer, answer_path, charts_path))


def write_html(answer_path: Path, out: Path, charts_path: Path | None = None) -> Path:
    return write_file(out, report_html(answer_path, charts_path).encode("utf-8"))
