"""Write a report folder: answer.json, answer.md and plots/*.png.

A folder holds one report. Writing a report into a folder that holds an earlier one replaces it
whole (the earlier report's plots, chart data and HTML page go too), and ``fresh_dir`` picks a
folder that holds none, so two runs of a command never mix or silently overwrite each other.
"""

from __future__ import annotations


from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.render.chartdata import CHARTS_NAME, charts_json
from trainaudit.render.markdown import render_markdown
from trainaudit.render.page import HTML_NAME
from trainaudit.answer.charts import PlotSpec
from trainaudit.render.painter import Painter
from trainaudit.render.plots import PLOTS_EXTRA, png_available, render
from trainaudit.outdir import OutDir
from trainaudit.redact import json_model
from trainaudit.answer.schema import Answer

ANSWER_NAME = "answer.json"
MARKDOWN_NAME = "answer.md"
PLOTS_DIR = "plots"
# What a report folder holds besides plots/*.png: everything a new report replaces.
REPORT_FILES = (ANSWER_NAME, MARKDOWN_NAME, CHARTS_NAME, HTML_NAME)
# PNGs one report draws (the first ones: plot specs come in order of importance). A compare of two
# runs with 300 metrics would otherwise draw 300, at about 0.1 s each; the HTML report's chart data
# keeps them all.
MAX_PLOTS = 24


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


def clear_report(folder: OutDir) -> bool:
    """Remove an earlier report's files from ``folder`` (only those a report writes, and only regular
    files: a link in their place is refused, never followed); True when there was one."""
    had = any(folder.kind(name) != "missing" for name in (ANSWER_NAME, MARKDOWN_NAME))
    for name in REPORT_FILES:
        folder.remove(name)
    if folder.kind(PLOTS_DIR) != "missing":
        with folder.sub(PLOTS_DIR, create=False) as plots:
            for name in plots.names():
                if name.endswith(".png"):
                    plots.remove(name)
    return had


def start_drawing(plots: list[PlotSpec] | tuple[PlotSpec, ...], painter: Painter | None) -> None:
    """Hand the PNGs that :func:`write_report` will draw of ``plots`` to ``painter`` now, so that
    they are drawn while the caller still builds the answer; ``write_report`` (given the same
    ``plots`` and ``painter``) then collects them."""
    if painter is not None and plots and png_available():
        painter.send(list(plots[:MAX_PLOTS]))


def write_report(answer: Answer, out: Path | OutDir, plots: list[PlotSpec] | tuple[PlotSpec, ...] = (), *,
                 charts: bool = True, painter: Painter | None = None) -> ReportPaths:
    """``charts``: also write the plots' (thinned) data beside answer.json, so ``trainaudit
    report`` can draw interactive charts later. An earlier report in ``out`` is replaced. Every
    file is written through ``OutDir``: never through a link. ``painter``: a child process that
    draws the PNGs while this one prepares the other files (the same bytes; it is closed here),
    already drawing them when :func:`start_drawing` handed them over."""
    if isinstance(out, Path):
        with OutDir.open(out) as folder:
            return write_report(answer, folder, plots, charts=charts, painter=painter)
    try:
        out_dir = Path(out.shown)
        replaced = clear_report(out)
        notes: list[str] = []
        plot_paths: list[Path] = []
        if plots and not png_available():
            notes.append(f"no PNG plots: they need matplotlib (pip install 'trainaudit[{PLOTS_EXTRA}]'); "
                         "--html or `trainaudit report` draws the charts without it")
        elif plots:
            if len(plots) > MAX_PLOTS:
                notes.append(f"{len(plots) - MAX_PLOTS} more plot(s) not drawn as PNG (at most {MAX_PLOTS}); "
                             "`trainaudit report` charts them all")
            drawn = list(plots[:MAX_PLOTS])
            if painter is not None:
                sent = painter.sent
                if sent is None:
                    painter.send(drawn)
                elif len(sent) != len(drawn) or any(a is not b for a, b in zip(sent, drawn, strict=True)):
                    raise ValueError("the painter was started on other plots than the report's")
            used: set[str] = set()
            for spec in drawn:
                name = spec.filename()
                stem, n = name[:-4], 2
                while name in used:
                    name, n = f"{stem}_{n}.png", n + 1
                used.add(name)
                plot_paths.append(out_dir / PLOTS_DIR / name)
        # The other files' text is made while a painter draws; the files are written after the PNGs.
        answer_text = json_model(answer) + "\n"
        rel_plots = [p.relative_to(out_dir).as_posix() for p in plot_paths]
        md_text = render_markdown(answer, rel_plots)
        charts_text = charts_json(list(plots)) if charts and plots else None
        if plot_paths:
            pngs = painter.receive() if painter is not None else None
            plots_dir = out.sub(PLOTS_DIR)
            for i, (spec, path) in enumerate(zip(plots, plot_paths, strict=False)):
                if pngs is not None:
                    plots_dir.write_bytes(path.name, pngs[i])
                else:
                    with plots_dir.create(path.name) as fh:
                        render(spec, fh)
            plots_dir.close()
        json_path = out.write_text(ANSWER_NAME, answer_text)
        md_path = out.write_text(MARKDOWN_NAME, md_text)
        charts_path = out.write_text(CHARTS_NAME, charts_text) if charts_text is not None else None
        return ReportPaths(out_dir, json_path, md_path, plot_paths, charts_path, replaced, notes)
    finally:
        if painter is not None:
            painter.close()
