"""Self-contained HTML report: ``render_html(answer, charts)``; chart data from the
``charts.json`` sidecar that ``write_report`` writes, or from the series excerpts in answer.json.

    html = report_html(Path("trainaudit-out/answer.json"))
"""

import importlib
from typing import Any

# name -> the module that defines it. Loaded on first use (PEP 562): importing a module of this
# package (the painter a command starts before its imports, cli.py) does not load the HTML page,
# pydantic and the chart data with it.
_EXPORTS = {"charts_from_answer": "chartdata", "charts_json": "chartdata", "load_charts": "chartdata",
            "load_answer": "page", "report_html": "page", "write_html": "page", "render_html": "html"}

__all__ = ["charts_from_answer", "charts_json", "load_answer", "load_charts", "render_html", "report_html",
           "write_html"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
