"""CI integration: GitHub Actions job summary and workflow annotations, GitLab code-quality report.

GitHub: ``$GITHUB_STEP_SUMMARY`` is a file the job appends Markdown to (shown on the run page, 1 MiB
per step); a line ``::error file=F,line=N,title=T::message`` on stdout becomes an annotation. Values
are escaped as the runner expects (``%``, CR, LF; in properties also ``:`` and ``,``).
GitLab: a Code Quality report (JSON list of issues with description, check_name, fingerprint,
severity, location.path/lines.begin) declared as ``artifacts:reports:codequality`` shows findings in
the merge request widget. GitLab has no step summary; the HTML report as an artifact plays that role.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainaudit.errors import UsageError
from trainaudit.render.markdown import render_markdown
from trainaudit.redact import json_text, mask_secrets, workflow_line
from trainaudit.answer.locate import Location, locate
from trainaudit.answer.schema import Answer
from trainaudit.outdir import write_file

SUMMARY_LIMIT = 1024 * 1024 - 4096  # GitHub rejects a step summary over 1 MiB
MAX_ANNOTATIONS = 50
_GH_LEVEL = {"critical": "error", "high": "error", "medium": "warning", "low": "notice", "info": "notice"}
_GL_SEVERITY = {"critical": "critical", "high": "major", "medium": "minor", "low": "info", "info": "info"}


@dataclass(frozen=True)
class Annotation:
    level: str  # error | warning | notice
    title: str
    message: str
    location: Location
    severity: str


def annotations_of(answer: Answer) -> list[Annotation]:
    out = []
    for d in answer.findings:
        title = f"{d.rule} {d.category}" + (f" ({d.metric})" if d.metric else "")
        step = f" [first bad step {d.first_bad_step}]" if d.first_bad_step is not None else ""
        out.append(Annotation(_GH_LEVEL[d.severity], title, d.message + step, locate(answer, d.evidence, d.first_bad_step), d.severity))
    for c in answer.comparisons:
        if not c.passed:
            msg = (f"{c.check} check of {c.metric} failed ({c.policy}, rtol {c.rtol:g}): {c.n_failing}/{c.n_steps} "
                   f"steps outside, {c.allowed_failing} allowed; first failing step {c.first_failing_step}")
            out.append(Annotation("error", f"golden {c.metric}", msg, locate(answer, c.evidence), "high"))
    if not out and answer.final_answer.verdict not in ("healthy", "pass"):
        fa = answer.final_answer
        ev = fa.root_causes[0].evidence if fa.root_causes else []
        out.append(Annotation("error", f"trainaudit {fa.verdict}", fa.summary, locate(answer, ev), "high"))
    order = {"error": 0, "warning": 1, "notice": 2}
    return sorted(out, key=lambda a: order[a.level])[:MAX_ANNOTATIONS]


def _esc_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def workflow_command(a: Annotation) -> str:
    props = []
    if a.location.path:
        props.append(f"file={_esc_prop(a.location.path)}")
        if a.location.line:
            props.append(f"line={a.location.line}")
    props.append(f"title={_esc_prop(a.title)}")
    return workflow_line(f"::{a.level} {','.join(props)}::{_esc_data(a.message)}")


def summary_markdown(answer: Answer, html_name: str | None = None) -> str:
    md = render_markdown(answer, None)  # no plot links: PNGs do not exist on the run page
    if html_name:
        md += f"\nInteractive report: `{html_name}` in this job's artifacts.\n"
    if len(md.encode()) > SUMMARY_LIMIT:
        md = md.encode()[:SUMMARY_LIMIT].decode(errors="ignore") + "\n\n(truncated: the full report is answer.md)\n"
    return md


def github_summary(answer: Answer, env: Mapping[str, str] | None = None, html_name: str | None = None) -> tuple[Path | None, list[str]]:
    """Append the summary to $GITHUB_STEP_SUMMARY (when set) and return the annotation lines to print."""
    env = os.environ if env is None else env
    path = env.get("GITHUB_STEP_SUMMARY")
    target = None
    if path:
        target = Path(path)
        try:
            with target.open("a", encoding="utf-8") as f:
                f.write(summary_markdown(answer, html_name) + "\n")
        except OSError as exc:
            raise UsageError(f"GITHUB_STEP_SUMMARY ({path}): cannot append ({exc.strerror})") from None
    return target, [workflow_command(a) for a in annotations_of(answer)]


def gitlab_codequality(answer: Answer) -> list[dict[str, object]]:
    issues: list[dict[str, object]] = []
    for a in annotations_of(answer):
        loc = a.location
        fp = hashlib.md5(f"{a.title}|{loc.path}|{a.message}".encode(), usedforsecurity=False).hexdigest()
        issues.append({"description": mask_secrets(f"{a.title}: {a.message}"), "check_name": a.title.split(" ")[0],
                       "fingerprint": fp, "severity": _GL_SEVERITY[a.severity],
                       "location": {"path": loc.path or "answer.json", "lines": {"begin": loc.line or 1}}})
    return issues


def write_gitlab_codequality(answer: Answer, path: Path) -> Path:
    return write_file(path, (json_text(gitlab_codequality(answer), indent=2) + "\n").encode("utf-8"))
