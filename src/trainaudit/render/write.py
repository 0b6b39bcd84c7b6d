"""Write a report folder: answer.json, answer.md and plots/*.png.

A folder holds one report. Writing a report into a folder that holds an earlier one replaces it
whole (the earlier report's plots, chart data and HTML page go too), and ``fresh_dir`` picks a
folder that holds none, so two runs of a command never mix or silently overwrite each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.render.chartdata import CHARTS_NAME, write_charts
from trainaudit.render.markdown import render_markdown
from trainaudit.render.page import HTML_NAME
from trainaudit.answer.charts import PlotSpec
from trainaudit.render.plots import PLOTS_EXTRA, png_available, render
from trainaudit.redact import mask_secrets
from trainaudit.answer.schema import Answer

ANSWER_NAME = "answer.json"
MARKDOWN_NAME = "answer.md"
PLOTS_DIR = "plots"
# What a report folder holds besides plots/*.png: everything a new report replaces.
REPORT_FILES = (ANSWER_NAME, MARKDOWN_NAME, CHARTS_NAME, HTML_NAME)


@dataclass
class ReportPaths:
    out_dir: Path
    json: Path
    markdown: Path
    plots: list[Path] = field(default_factory=list)
    charts: Path | None = None  # the plots' data as JSON, for the HTML report
    replaced: bool = False  # the folder held an earlier report, which this one replaced
    notes: list[str] = field(default_factory=list)  # e.g. why there are no PNG plots


def holds_report(folder: Path) -> bool:
    return any((folder / name).exists() for name in (ANSWER_NAME, MARKDOWN_NAME))


def fresh_dir(base: Path) -> Path:
    """``base``, else ``base-2``, ``base-3``, ...: the first folder that holds no report."""
    if not holds_report(base):
        return base
    n = 2
    while holds_report(base.with_name(f"{base.name}-{n}")):
        n += 1
    return base.with_name(f"{base.name}-{n}")


def clear_report(folder: Path) -> bool:
    """Remove an earlier report's files from ``folder`` (only those a report writes); True when
    there was one."""
    had = holds_report(folder)
    for name in REPORT_FILES:
        (folder / name).unlink(missing_ok=True)
    plots = folder / PLOTS_DIR
    if plots.is_dir():
        for p in plots.glob("*.png"):
            p.unlink()
    return had


def write_report(answer: Answer, out_dir: Path, plots: list[PlotSpec] | tuple[PlotSpec, ...] = (), *,
                 charts: bool = True) -> ReportPaths:
    """``charts``: also write the plots' (thinned) data beside answer.json, so ``trainaudit
    report`` can draw interactive charts later. An earlier report in ``out_dir`` is replaced."""
    replaced = clear_report(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    plot_paths: list[Path] = []
    if plots and not png_available():
        notes.append(f"no PNG plots: they need matplotlib (pip install 'trainaudit[{PLOTS_EXTRA}]'); "
                     "--html or `trainaudit report` draws the charts without it")
    elif plots:
        used: set[str] = set()
        for spec in plots:
            name = spec.filename()
            stem, n = name[:-4], 2
            while name in used:
                name, n = f"{stem}_{n}.png", n + 1
            used.add(name)
            plot_paths.append(render(spec, out_dir / PLOTS_DIR / name))
    json_path = out_dir / ANSWER_NAME
    json_path.write_text(mask_secrets(answer.model_dump_json(indent=2)) + "\n", encoding="utf-8")
    md_path = out_dir / MARKDOWN_NAME
    rel_plots = [p.relative_to(out_dir).as_posix() for p in plot_paths]
    md_path.write_text(mask_secrets(render_markdown(answer, rel_plots)), encoding="utf-8")
    charts_path = write_charts(out_dir / CHARTS_NAME, list(plots)) if charts and plots else None
    return ReportPaths(out_dir, json_path, md_path, plot_paths, charts_path, replaced, notes)
