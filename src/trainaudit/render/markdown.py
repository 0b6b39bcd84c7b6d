"""answer.md: the page a human reads in a minute. Every claim carries its evidence ids, and the
evidence section quotes the source lines (``path:line``) those ids rest on."""

from __future__ import annotations

from collections.abc import Iterable

from trainaudit.answer.schema import Answer, ExtractedFact
from trainaudit.render.numbers import number, percent
from trainaudit.redact import BACKTICKS, mask_secrets, md_code_block, md_inline

MAX_ROWS = 25


def _cell(text: str) -> str:
    return md_inline(text).replace("|", "\\|")


def _code(text: str) -> str:
    """An inline code span of text from input: literal (no HTML, no links), and a fence longer than
    any backtick run inside so it cannot be closed early (CommonMark 0.31, "Code spans")."""
    body = mask_secrets(text).replace("\n", " ")
    fence = "`" * (max((len(r) for r in BACKTICKS.findall(body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def _ids(ids: Iterable[str]) -> str:
    ids = list(ids)
    return " ".join(f"[{i}](#{i.lower()})" for i in ids) if ids else "-"


def _cited(answer: Answer) -> list[str]:
    """Fact ids cited anywhere (root causes, findings, calculations, comparisons), in order."""
    seen: dict[str, None] = {}
    calcs = {c.id: c for c in answer.calculations}

    def visit(i: str) -> None:
        if i in seen:
            return
        if i.startswith("F"):
            seen[i] = None
        elif i in calcs:
            for j in calcs[i].inputs:
                visit(j)

    for rc in answer.final_answer.root_causes:
        for i in rc.evidence:
            visit(i)
    for d in answer.findings:
        for i in d.evidence:
            visit(i)
    for c in answer.comparisons:
        for i in c.evidence:
            visit(i)
    return list(seen)


def render_markdown(answer: Answer, plot_files: list[str] | None = None) -> str:
    fa = answer.final_answer
    src = {s.id: s for s in answer.source_refs}
    facts = {f.id: f for f in answer.extracted_facts}
    out: list[str] = []
    conf = max((rc.confidence for rc in fa.root_causes), default=None)
    out.append(f"# trainaudit {answer.task}: **{fa.verdict}**")
    out.append("")
    line = f"Category: `{fa.category}`"
    if fa.first_bad_step is not None:
        line += f" · first bad step: **{fa.first_bad_step}**"
    if conf is not None:
        line += f" · confidence {conf:.2f}"
    out += [line, "", md_inline(fa.summary), ""]

    if fa.root_causes:
        out.append("## Root cause" + ("s" if len(fa.root_causes) > 1 else ""))
        for k, rc in enumerate(fa.root_causes, 1):
            out.append(f"{k}. **{md_inline(rc.issue)}** (`{rc.category}`, {rc.severity}, confidence "
                       f"{rc.confidence:.2f}; evidence {_ids(rc.evidence)})")
            out.append(f"   - Fix: {md_inline(rc.fix)}")
            out.append(f"   - Expected impact: {md_inline(rc.expected_impact)}")
            out.append(f"   - Verify: {md_inline(rc.verify)}")
        out.append("")
    if fa.quick_fixes:
        out.append("## Quick fixes")
        out += [f"- {md_inline(q)}" for q in fa.quick_fixes] + [""]

    if answer.comparisons:
        out.append("## Checks")
        out.append("| metric | check | result | failing / allowed | first failing step | max rel err | "
                   "median rel err | medians (golden → actual) | evidence |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for c in answer.comparisons[:MAX_ROWS]:
            med = "-"
            if c.golden_median is not None or c.actual_median is not None:
                med = f"{number(c.golden_median)} → {number(c.actual_median)}"
                if c.window:
                    med += f" (steps {c.window[0]}–{c.window[-1]})"
            out.append(f"| {_cell(c.metric)} | {c.check} ({c.policy}, rtol {c.rtol:g}) | "
                       f"{'pass' if c.passed else '**FAIL**'} | {c.n_failing}/{c.n_steps} (allowed {c.allowed_failing}) | "
                       f"{number(c.first_failing_step)} | {percent(c.max_rel_err)} | {percent(c.median_rel_err)} | {med} | "
                       f"{_ids(c.evidence)} |")
        out.append("")

    if answer.findings:
        out.append("## Findings")
        out.append("| id | rule | severity | metric | first bad step | message | evidence |")
        out.append("|---|---|---|---|---|---|---|")
        for d in answer.findings[:MAX_ROWS]:
            out.append(f"| {d.id} | {d.rule} | {d.severity} | {_cell(d.metric or '-')} | {number(d.first_bad_step)} | "
                       f"{_cell(d.message)} | {_ids(d.evidence)} |")
        if len(answer.findings) > MAX_ROWS:
            out.append(f"\n({len(answer.findings) - MAX_ROWS} more findings in answer.json)")
        out.append("")

    if answer.commits:
        out.append("## Commits")
        out.append("| commit | role | relevance | title | reason |")
        out.append("|---|---|---|---|---|")
        for c in answer.commits[:MAX_ROWS]:
            out.append(f"| `{c.sha[:10]}` | {c.role} | {c.relevance:.2f} | {_cell(c.title)} | {_cell(c.reason)} |")
        out.append("")

    if plot_files:
        out.append("## Plots")
        out += [f"![{p}]({p})" for p in plot_files] + [""]

    cited = _cited(answer)
    if cited:
        out.append("## Evidence")
        for fid in cited[:MAX_ROWS * 2]:
            f = facts.get(fid)
            if f is None:
                continue
            out.append(_fact_md(f, src.get(f.source_ref).path if f.source_ref in src else f.source_ref))
        if len(cited) > MAX_ROWS * 2:
            out.append(f"- ({len(cited) - MAX_ROWS * 2} more facts in answer.json)")
        calcs = [c for c in answer.calculations]
        if calcs:
            out.append("")
            out.append("Calculations (recomputed by validation):")
            for c in calcs[:MAX_ROWS]:
                out.append(f"- <a id=\"{c.id.lower()}\"></a>**{c.id}** {md_inline(c.description)}: {_code(c.formula)} = "
                           f"**{number(c.result, 6)}**{(' ' + md_inline(c.unit)) if c.unit else ''} "
                           f"(inputs {', '.join(c.inputs)})")
        out.append("")

    if fa.needs_more_data:
        out.append("## What would raise the confidence")
        out += [f"- {md_inline(n)}" for n in fa.needs_more_data] + [""]

    out.append("## Sources")
    for s in answer.source_refs:
        extra = f" @ `{s.commit[:12]}`" if s.commit else ""
        sha = f" (sha256 `{s.sha256[:12]}`)" if s.sha256 else ""
        out.append(f"- **{s.id}** {s.kind}: {_code(s.path)}{extra}{sha} {md_inline(s.description)}".rstrip())
    out.append("")
    v = answer.validation
    failed = [c for c in v.checks if not c.passed]
    out.append(f"Validation: {'all checks passed' if v.all_passed else 'FAILED'} "
               f"({', '.join(c.name for c in v.checks)})"
               + ("".join(f"\n- {c.name}: {md_inline(c.detail)}" for c in failed)))
    out.append("")
    return "\n".join(out)


def _fact_md(f: ExtractedFact, path: str) -> str:
    where = f"{path}:{f.line}" if f.line else path
    value = ""
    if f.value is not None:
        value = f" = {number(f.value)}{(' ' + md_inline(f.unit)) if f.unit else ''}"
    elif f.values is not None:
        value = f" ({len(f.values)} values)"
    step = f" at step {f.step}" if f.step is not None and f"step {f.step}" not in f.statement else ""
    text = f"- <a id=\"{f.id.lower()}\"></a>**{f.id}** {md_inline(f.statement)}{step}{value} — {_code(where)}"
    if f.quote:
        q = f.quote if len(f.quote) <= 300 else f.quote[:297] + "..."
        text += "\n" + "\n".join("  " + ln for ln in md_code_block(q.replace("\n", " ")).split("\n"))
    return text
