"""A batch audit's own report: batch.json (the comparison of its members) and batch.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainaudit.batch import BatchResult, compare_members
from trainaudit.outdir import OutDir
from trainaudit.redact import json_text, md_inline


def render_batch_markdown(cmp: dict[str, Any]) -> str:
    failing = [r for r in cmp["sets"] if r.get("failed", True)]  # a set not audited counts as failing
    fine = [r["name"] for r in cmp["sets"] if not r.get("failed", True)]
    causes = {r["cause"] for r in failing if "cause" in r}
    out = [f"# trainaudit batch: {len(failing)} failure{'s' if len(failing) != 1 else ''}, {len(causes)} distinct "
           f"root cause{'s' if len(causes) != 1 else ''}" + (f" ({len(fine)} set(s) with nothing failing)" if fine else ""),
           ""]
    h = cmp.get("headline")
    if h:
        what = {"shared_environment_change": "a shared environment change as culprit",
                "shared_culprit": "a shared culprit",
                "environment_change_in_every_range": "an environment change in every range"}[h["kind"]]
        n = len(h["members"]) + len(h["exceptions"])
        out.append(f"**{len(h['members'])} of {n} failures have {what}:** `{h['sha'][:10]}` ({h['role']}) "
                   f"{h['title'].replace('|', '/')}. "
                   + (f"Exceptions: {', '.join(h['exceptions'])}." if h["exceptions"] else "No exception."))
        out.append("")
    out += ["## Failures", "| set | verdict | category | first bad step | root cause group | top commit |",
            "|---|---|---|---|---|---|"]
    label = {g["cause"]: f"G{i}" for i, g in enumerate(cmp["groups"], 1)}
    for r in failing:
        if "error" in r:
            out.append(f"| {md_inline(r['name'])} | (not audited) | – | – | – | {md_inline(r['error'])} |")
            continue
        top = r["top_commit"]
        tc = f"`{top['sha'][:10]}` {top['role']}" if top else "–"
        out.append(f"| {md_inline(r['name'])} | {md_inline(r['verdict'])} | {md_inline(r['category'])} | "
                   f"{'–' if r['first_bad_step'] is None else r['first_bad_step']} | {label[r['cause']]} | {tc} |")
    if fine:
        out += ["", f"Nothing failing: {', '.join(fine)}."]
    out += ["", "## Shared root causes"]
    for i, g in enumerate(cmp["groups"], 1):
        if g["cause"] not in causes:
            continue
        n = len(g["members"])
        out.append(f"- **G{i}** {md_inline(g['label'])}: {n} failure{'s' if n > 1 else ''} ({md_inline(', '.join(g['members']))})")
        for c in g["shared_commits"]:
            out.append(f"  - in common: `{c['sha'][:10]}` {c['role'].replace('_', ' ')}: {md_inline(c['title'])} "
                       f"({md_inline(', '.join(c['members']))})")
    if cmp["shared_commits"]:
        out += ["", "## Commits several failures have in common",
                "| commit | role | title | failures |", "|---|---|---|---|"]
        for c in cmp["shared_commits"]:
            out.append(f"| `{c['sha'][:10]}` | {c['role']} | {md_inline(c['title'])} | {md_inline(', '.join(c['members']))} |")
    out.append("")
    return "\n".join(out)


def write_batch(result: BatchResult, out: Path) -> tuple[Path, Path, dict[str, Any]]:
    cmp = compare_members(result)
    with OutDir.open(out) as folder:
        jp = folder.write_text("batch.json", json_text(cmp, indent=2) + "\n")
        mp = folder.write_text("batch.md", render_batch_markdown(cmp))
    return jp, mp, cmp
