"""A batch audit's own report: batch.json (the comparison of its members) and batch.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainaudit.batch import BatchResult, compare_members


def render_batch_markdown(cmp: dict[str, Any]) -> str:
    failing = [r for r in cmp["sets"] if r.get("failed", True)]  # a set not audited counts as failing
    fine = [r["name"] for r in cmp["sets"] if not r.get("failed", True)]
    causes = {r["cause"] for r in failing if "cause" in r}
    out = [f"# trainaudit batch: {len(failing)} failure{'s' if len(failing) != 1 else ''}, {len(causes)} distinct "
           f"root cause{'s' if len(causes) != 1 else ''}" + (f" ({len(fine)} set(s) with nothing failing)" if fine else ""),
           ""]
    out += ["## Failures", "| set | verdict | category | first bad step | root cause group | top commit |",
            "|---|---|---|---|---|---|"]
    label = {g["cause"]: f"G{i}" for i, g in enumerate(cmp["groups"], 1)}
    for r in failing:
        if "error" in r:
            out.append(f"| {r['name']} | (not audited) | – | – | – | {r['error'].replace('|', '/')} |")
            continue
        top = r["top_commit"]
        tc = f"`{top['sha'][:10]}` {top['role']}" if top else "–"
        out.append(f"| {r['name']} | {r['verdict']} | {r['category']} | "
                   f"{'–' if r['first_bad_step'] is None else r['first_bad_step']} | {label[r['cause']]} | {tc} |")
    if fine:
        out += ["", f"Nothing failing: {', '.join(fine)}."]
    out += ["", "## Shared root causes"]
    for i, g in enumerate(cmp["groups"], 1):
        if g["cause"] not in causes:
            continue
        n = len(g["members"])
        out.append(f"- **G{i}** {g['label']}: {n} failure{'s' if n > 1 else ''} ({', '.join(g['members'])})")
        for c in g["shared_commits"]:
            out.append(f"  - in common: `{c['sha'][:10]}` {c['role'].replace('_', ' ')}: {c['title']} "
                       f"({', '.join(c['members'])})")
    if cmp["shared_commits"]:
        out += ["", "## Commits several failures have in common",
                "| commit | role | title | failures |", "|---|---|---|---|"]
        for c in cmp["shared_commits"]:
            out.append(f"| `{c['sha'][:10]}` | {c['role']} | {c['title'].replace('|', '/')} | {', '.join(c['members'])} |")
    out.append("")
    return "\n".join(out)


def write_batch(result: BatchResult, out: Path) -> tuple[Path, Path, dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    cmp = compare_members(result)
    jp = out / "batch.json"
    jp.write_text(json.dumps(cmp, indent=2) + "\n", encoding="utf-8")
    mp = out / "batch.md"
    mp.write_text(render_batch_markdown(cmp), encoding="utf-8")
    return jp, mp, cmp
