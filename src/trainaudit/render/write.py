"""Write a report folder: answer.json, answer.md and plots/*.png."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.render.chartdata import write_charts
from trainaudit.render.markdown import render_markdown
from trainaudit.answer.charts import PlotSpec
from trainaudit.render.plots import render
from trainaudit.redact import mask_secrets
from trainaudit.answer.schema import Answer


@dataclass
class ReportPaths:
    out_dir: Path
    json: Path
    markdown: Path
    plots: list[Path] = field(default_factory=list)
    charts: Path | None = None  # the plots' data as JSON (issue 8: HTML report)


def write_report(answer: Answer, out_dir: Path, plots: list[PlotSpec] | tuple[PlotSpec, ...] = (), *,
                 md_name: str = "answer.md", json_name: str = "answer.json",
                 charts_name: str | None = "charts.json") -> ReportPaths:
    """``charts_name``: also write the plots' (thinned) data beside answer.json, so
    ``trainaudit report`` can draw interactive charts later; None skips it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_paths: list[Path] = []
    used: set[str] = set()
    for spec in plots:
        name = spec.filename()
        stem, n = name[:-4], 2
        while name in used:
            name, n = f"{stem}_{n}.png", n + 1
        used.add(name)
        plot_paths.append(render(spec, out_dir / "plots" / name))
    json_path = out_dir / json_name
    json_path.write_text(mask_secrets(answer.model_dump_json(indent=2)) + "\n", encoding="utf-8")
    md_path = out_dir / md_name
    rel_plots = [p.relative_to(out_dir).as_posix() for p in plot_paths]
    md_path.write_text(mask_secrets(render_markdown(answer, rel_plots)), encoding="utf-8")
    charts_path = None
    if charts_name is not None and plots:
        charts_path = write_charts(out_dir / charts_name, list(plots))
    return ReportPaths(out_dir, json_path, md_path, plot_paths, charts_path)
