"""answer.md: the page a human reads in a minute. Every claim carries its evidence ids, and the
evidence section quotes the source lines (``path:line``) those ids rest on.

Every page (diagnose, compare, audit) opens with at most :data:`TOP_LINES` lines: the verdict,
what failed by how much or what happened, why this verdict (the statements that decided it), the
commit that explains it and why, what to do and how to verify. Everything else (all checks, the evidence, calculations, the commits, findings,
plots, sources) follows in collapsible sections, each fact listed once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from trainaudit.answer.locate import culprit
from trainaudit.answer.schema import SEVERITY_ORDER, Answer, Comparison, ExtractedFact
from trainaudit.compare.build import check_in_words
from trainaudit.rules.gate import RunConfigDiffers
from trainaudit.render.numbers import coverage_line, decision_line, number, percent, values_in_words
from trainaudit.redact import BACKTICKS, anchor_id, mask_secrets, md_code_block, md_inline

MAX_ROWS = 25
MAX_QUOTE = 2000  # a source line quoted whole (a Megatron iteration line is about 400 characters); bounded for hostile input
TOP_LINES = 12
TOP_COMMITS = 5
TOP_EVIDENCE = 6  # evidence ids at the top; the Root causes section has them all
DECIDES = "decides the verdict: "
NOTE = "note: "


def _cell(text: str) -> str:
    return md_inline(text)  # "|" and "\\" escaped there


def _code(text: str) -> str:
    """An inline code span of text from input: literal (no HTML, no links), and a fence longer than
    any backtick run inside so it cannot be closed early (CommonMark 0.31, "Code spans")."""
    body = mask_secrets(text).replace("\n", " ")
    fence = "`" * (max((len(r) for r in BACKTICKS.findall(body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def _ids(ids: Iterable[str]) -> str:
    ids = list(ids)
    return " ".join(f"[{md_inline(i)}](#{anchor_id(i)})" for i in ids) if ids else "-"


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


def _checks_table(comparisons: list[Comparison]) -> list[str]:
    rows = ["| metric | check | result | failing / allowed | first failing step | max rel err | median rel err | "
            "medians (golden → actual) | evidence |", "|---|---|---|---|---|---|---|---|---|"]
    for c in comparisons[:MAX_ROWS]:
        med = "-"
        if c.golden_median is not None or c.actual_median is not None:
            med = f"{number(c.golden_median)} → {number(c.actual_median)}"
            if c.window:
                med += f" (steps {c.window[0]}–{c.window[-1]})"
        rows.append(f"| {_cell(c.metric)} | {c.check} ({c.policy}, rtol {c.rtol:g}) | "
                    f"{'pass' if c.passed else '**FAIL**'} | {c.n_failing}/{c.n_steps} (allowed {c.allowed_failing}) | "
                    f"{number(c.first_failing_step)} | {percent(c.max_rel_err)} | {percent(c.median_rel_err)} | "
                    f"{med} | {_ids(c.evidence)} |")
    return rows


def render_markdown(answer: Answer, plot_files: list[str] | None = None) -> str:
    """The same page for every task: at most :data:`TOP_LINES` lines that say what happened, why
    and what to do, then everything else in collapsible sections."""
    return render_audit(answer, plot_files)


def _fact_md(f: ExtractedFact, path: str) -> str:
    where = f"{path}:{f.line}" if f.line else path
    value = ""
    if f.value is not None:
        value = f" = {number(f.value)}{(' ' + md_inline(f.unit)) if f.unit else ''}"
    elif f.values is not None:
        value = f": {md_inline(values_in_words(f.values, f.steps))}"
    step = f" at step {f.step}" if f.step is not None and f"step {f.step}" not in f.statement else ""
    line_of = f" (the line quoted: step {f.step})" if f.values is not None and f.quote and f.step is not None else ""
    text = (f"- <a id=\"{anchor_id(f.id)}\"></a>**{md_inline(f.id)}** {md_inline(f.statement)}{step}{value} — "
            f"{_code(where)}{line_of}")
    if f.quote:
        q = f.quote if len(f.quote) <= MAX_QUOTE else f.quote[:MAX_QUOTE - 3] + "..."
        text += "\n" + "\n".join("  " + ln for ln in md_code_block(q.replace("\n", " ")).split("\n"))
    return text


# -- the audit page ------------------------------------------------------------------------------
def _cut(text: str) -> str:
    """Text on one line, whole (never cut: a cut sentence loses the number it ends with)."""
    return " ".join(text.split())


def counts_in_words(answer: Answer) -> str:
    by = Counter(d.severity for d in answer.findings)
    return ", ".join(f"{by[k]} {k}" for k in sorted(by, key=lambda k: -SEVERITY_ORDER[k]))


def audit_top(answer: Answer) -> list[str]:
    """The first lines of answer.md (at most TOP_LINES): the verdict, what failed or happened,
    why, the culprit commit, what to do and how to verify."""
    fa = answer.final_answer
    facts = {f.id: f for f in answer.extracted_facts}
    rc = fa.root_causes[0] if fa.root_causes else None
    conf = f" · confidence {rc.confidence:.2f}" if rc else ""
    step = f" · first bad step {fa.first_bad_step}" if fa.first_bad_step is not None else ""
    out = [f"# trainaudit {answer.task}: **{fa.verdict}** (`{fa.category}`{step}{conf})", ""]
    gd = fa.gate_disagreement
    if gd is not None:  # one line more than TOP_LINES: it adds to the page, it does not push the fix off it
        out.append(f"**Two gates disagree:** {md_inline(_cut(gd.summary))} "
                   f"{_ids(gd.at_run.evidence + gd.today.evidence)}")
    if not answer.comparisons:  # a run on its own: what happened, with the evidence it rests on
        out.append(f"**What happened:** {md_inline(_cut(fa.summary))}")
        if rc is not None and rc.evidence:
            more = f" and {len(rc.evidence) - TOP_EVIDENCE} more below" if len(rc.evidence) > TOP_EVIDENCE else ""
            out.append(f"**Evidence:** {_ids(rc.evidence[:TOP_EVIDENCE])}{more}")
        if answer.findings:
            out.append(f"**Findings:** {counts_in_words(answer)} (all in Findings below)")
    # run vs run: how the runs' own configuration differs explains what follows, so it comes first
    config = [d for d in answer.findings if d.rule == RunConfigDiffers.id and d.severity not in ("info", "low")]
    if config:
        more = f"; and {len(config) - 2} more" if len(config) > 2 else ""
        out.append("**Configuration differs:** " + md_inline("; ".join(
            _cut(d.message).removeprefix("configuration differs: ") for d in config[:2]) + more))
    failed = [c for c in answer.comparisons if not c.passed]
    passed = list(dict.fromkeys(c.metric for c in answer.comparisons if c.passed
                                and c.metric not in {f.metric for f in failed}))
    if failed:
        more = f"; and {len(failed) - 2} more check(s)" if len(failed) > 2 else ""
        out.append("**What failed:** " + md_inline("; ".join(check_in_words(c) for c in failed[:2]) + more)
                   + (f". Pass: {md_inline(', '.join(passed[:6]))}." if passed else "."))
    elif answer.comparisons:
        # every check passes, some only through the comparator's budget of failing steps
        lenient = [c for c in answer.comparisons if c.n_failing and fa.verdict != "pass"]
        if lenient:
            out.append(f"**What failed:** no check under the {md_inline(lenient[0].policy)} comparator, whose budget "
                       "lets these pass: " + md_inline("; ".join(check_in_words(c) for c in lenient[:2])) + ".")
        else:
            out.append(f"**What failed:** nothing the replayed checks show; pass: {md_inline(', '.join(passed[:8]))}.")
    why = [facts[i].statement[len(DECIDES):] for i in (rc.evidence if rc else [])
           if i in facts and facts[i].statement.startswith(DECIDES)]
    if why:
        out.append(f"**Why {fa.verdict}:**")
        out += [f"- {md_inline(_cut(w))}" for w in list(dict.fromkeys(why))[:4]]
    elif rc is not None and answer.comparisons:
        out.append(f"**Why {fa.verdict}:** {md_inline(_cut(rc.issue))}")
    c = culprit(answer)
    if c is not None:
        named = fa.culprit
        sure = f"relevance {c.relevance:.2f}"
        if named is not None:
            sure = f"probability {named.confidence:.2f}" + (
                f" against {named.runner_up.confidence:.2f} for `{named.runner_up.sha[:10]}`" if named.runner_up else "")
        out.append(f"**Culprit:** `{c.sha[:10]}` {md_inline(_cut(c.title))} ({c.role}, {sure}): "
                   f"{md_inline(_cut(c.reason))}")
    elif answer.commits and fa.verdict != "pass":
        out.append("**Culprit:** none of the commits between --good and --bad explains it.")
    if rc is not None:
        out.append(f"**What to do:** {md_inline(_cut(rc.fix))}")
        if rc.verify:
            out.append(f"**How to verify:** {md_inline(_cut(rc.verify))}")
    if fa.needs_more_data:
        out.append(f"**Would raise the confidence:** {md_inline(_cut('; '.join(fa.needs_more_data)))}")
    return out[:TOP_LINES + (1 if gd is not None else 0)]


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>", ""]


def render_audit(answer: Answer, plot_files: list[str] | None = None) -> str:
    fa = answer.final_answer
    src = {s.id: s for s in answer.source_refs}
    facts = {f.id: f for f in answer.extracted_facts}
    out = audit_top(answer) + [""]
    checked = [line for line in (coverage_line(fa.coverage), decision_line(fa.decision)) if line]
    if checked:
        out += _details("What was checked, and how it was decided", [md_inline(line) + "  " for line in checked])
    if answer.comparisons:
        rows = _checks_table(answer.comparisons)
        out += _details(f"All checks ({len(answer.comparisons)}, {sum(not c.passed for c in answer.comparisons)} "
                        "failing)", rows)
    if fa.root_causes:
        body = []
        for k, rc in enumerate(fa.root_causes, 1):
            body.append(f"{k}. **{md_inline(rc.issue)}** (`{rc.category}`, {rc.severity}, confidence "
                        f"{rc.confidence:.2f}; evidence {_ids(rc.evidence)})")
            body.append(f"   - Fix: {md_inline(rc.fix)}")
            if rc.expected_impact:
                body.append(f"   - Expected impact: {md_inline(rc.expected_impact)}")
            if rc.verify:
                body.append(f"   - Verify: {md_inline(rc.verify)}")
        out += _details(f"Root causes ({len(fa.root_causes)})", body + ["", md_inline(fa.summary)])
    if answer.commits:
        ranked = [c for c in answer.commits if c.role != "fix"]
        fixes = [c for c in answer.commits if c.role == "fix"]
        rows = ["| commit | role | relevance | title | reason |", "|---|---|---|---|---|"]
        rows += [f"| `{c.sha[:10]}` | {c.role} | {c.relevance:.2f} | {_cell(c.title)} | {_cell(c.reason)} |"
                 for c in ranked[:TOP_COMMITS] + fixes[:3]]
        if len(ranked) > TOP_COMMITS:
            rows.append(f"\n{len(ranked) - TOP_COMMITS} more ranked commit(s) in answer.json.")
        out += _details(f"Commits (top {min(TOP_COMMITS, len(ranked))} of {len(ranked)} ranked"
                        + (f", {len(fixes)} later fix(es)" if fixes else "") + ")", rows)
    if answer.findings:
        rows = ["| id | rule | severity | metric | first bad step | message | evidence |", "|---|---|---|---|---|---|---|"]
        rows += [f"| <a id=\"{anchor_id(d.id)}\"></a>{_cell(d.id)} | {_cell(d.rule)} | {d.severity} | {_cell(d.metric or '-')} | {number(d.first_bad_step)} | "
                 f"{_cell(d.message)} | {_ids(d.evidence)} |" for d in answer.findings[:MAX_ROWS]]
        out += _details(f"Findings ({len(answer.findings)})", rows)
    cited = _cited(answer)
    shown: set[tuple[str, str, int | None, int | None]] = set()
    lines = []
    for fid in cited:
        f = facts.get(fid)
        if f is None or f.statement.startswith(NOTE):
            continue
        key = (f.source_ref, f.statement, f.line, f.step)
        if key in shown:  # the same fact twice (two checks of one metric quote the same series)
            continue
        shown.add(key)
        lines.append(_fact_md(f, src[f.source_ref].path if f.source_ref in src else f.source_ref))
    if lines:
        out += _details(f"Evidence ({len(lines)} facts)", lines[:MAX_ROWS * 4])
    if answer.calculations:
        rows = [f"- <a id=\"{anchor_id(c.id)}\"></a>**{md_inline(c.id)}** {md_inline(c.description)}: {_code(c.formula)} = "
                f"**{number(c.result, 6)}**{(' ' + md_inline(c.unit)) if c.unit else ''} (inputs {', '.join(c.inputs)})"
                for c in answer.calculations[:MAX_ROWS * 2]]
        out += _details(f"Calculations ({len(answer.calculations)}, recomputed by validation)", rows)
    notes = [f.statement[len(NOTE):] for f in answer.extracted_facts if f.statement.startswith(NOTE)]
    if notes:
        out += _details(f"Notes ({len(notes)})", [f"- {md_inline(n)}" for n in notes])
    if plot_files:
        out += _details(f"Plots ({len(plot_files)})", [f"![{p}]({p})" for p in plot_files])
    rows = []
    for s in answer.source_refs:
        extra = f" @ `{s.commit[:12]}`" if s.commit else ""
        sha = f" (sha256 `{s.sha256[:12]}`)" if s.sha256 else ""
        rows.append(f"- **{s.id}** {s.kind}: {_code(s.path)}{extra}{sha} {md_inline(s.description)}".rstrip())
    v = answer.validation
    failed_v = [c for c in v.checks if not c.passed]
    rows += ["", f"Validation: {'all checks passed' if v.all_passed else 'FAILED'} "
                 f"({', '.join(c.name for c in v.checks)})"
             + "".join(f"\n- {c.name}: {md_inline(c.detail)}" for c in failed_v)]
    out += _details(f"Sources ({len(answer.source_refs)}) and validation", rows)
    return "\n".join(out)
