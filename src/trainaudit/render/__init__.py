"""Self-contained HTML report: ``render_html(answer, charts)``; chart data from the
``charts.json`` sidecar that ``write_report`` writes, or from the series excerpts in answer.json.

    html = report_html(Path("trainaudit-out/answer.json"))
"""

from trainaudit.render.chartdata import charts_from_answer, charts_json, load_charts
from trainaudit.render.page import load_answer, report_html, write_html
from trainaudit.render.html import render_html

__all__ = ["charts_from_answer", "charts_json", "load_answer", "load_charts", "render_html", "report_html",
           "write_html"]
