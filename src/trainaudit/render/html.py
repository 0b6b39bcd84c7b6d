"""One self-contained HTML page from an answer.json (and its charts): verdict and root causes first,
interactive charts, checks, findings, commits, then the evidence with the quoted source lines.

Nothing is loaded from the network: CSS, the charting library (uPlot, vendored in ``assets/``
with its MIT licence) and the chart script (``assets/report.js``) are inlined, and the chart data
sits in a ``<script type="application/json">`` block.
Every evidence id is a link to an element with id ``ev-<id>`` (facts, calculations, findings), so a
click scrolls to the quoted line even with scripts disabled.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from trainaudit.redact import anchor_id, html_text, json_text
from trainaudit.render.numbers import number, percent, values_in_words
from trainaudit.answer.verdicts import verdict_info
from trainaudit.answer.schema import SEVERITY_ORDER, Answer, ExtractedFact

MAX_FINDINGS = 200
MAX_FACTS = 400


def _asset(name: str) -> str:
    return files("trainaudit.render").joinpath("assets", name).read_text(encoding="utf-8")


def _e(v: object) -> str:
    return html_text(v)


def _fmt(v: float | str | None) -> str:
    return number(v, 6, missing="–")


def _pct(v: float | None) -> str:
    return percent(v, missing="–")


def _anchor(i: str) -> str:
    return f"ev-{anchor_id(i)}"


def _ids(ids: list[str], known: set[str]) -> str:
    if not ids:
        return "–"
    out = []
    for i in ids:
        if i in known:
            out.append(f'<a class="ev" href="#{_anchor(i)}">{_e(i)}</a>')
        else:
            out.append(f'<span class="ev missing">{_e(i)}</span>')
    return " ".join(out)


def _json_script(data: Any) -> str:
    # "<" escaped so no "</script>" or "<!--" inside the data can end the block
    text = json_text(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="ta-data">{text}</script>'


def render_html(answer: Answer, charts: list[dict[str, Any]] | None = None, *, title: str | None = None) -> str:
    fa = answer.final_answer
    facts = {f.id: f for f in answer.extracted_facts}
    src = {s.id: s for s in answer.source_refs}
    known = set(facts) | {c.id for c in answer.calculations} | {d.id for d in answer.findings[:MAX_FINDINGS]}
    charts = charts or []
    page_title = title or f"trainaudit {answer.task}: {fa.verdict}"
    conf = max((rc.confidence for rc in fa.root_causes), default=None)
    body: list[str] = []

    # -- verdict ---------------------------------------------------------------------------
    meta = [f"category <b>{_e(fa.category)}</b>"]
    if fa.first_bad_step is not None:
        meta.append(f"first bad step <b>{fa.first_bad_step}</b>")
    if conf is not None:
        meta.append(f"confidence <b>{conf:.2f}</b>")
    meta.append(f"task {_e(answer.task)}")
    body.append(f'<header class="verdict {verdict_info(fa.verdict).tone}" id="verdict">'
                f'<div class="badge">{_e(fa.verdict.replace("_", " "))}</div>'
                f'<div class="meta">{" · ".join(meta)}</div>'
                f'<p class="summary">{_e(fa.summary)}</p></header>')
    body.append('<nav class="toc">' + " ".join(
        f'<a href="#{a}">{t}</a>' for a, t, ok in [
            ("root-causes", "Root causes", fa.root_causes), ("charts", "Charts", charts),
            ("checks", "Checks", answer.comparisons), ("findings", "Findings", answer.findings),
            ("commits", "Commits", answer.commits), ("evidence", "Evidence", facts), ("sources", "Sources", True)]
        if ok) + "</nav>")

    if fa.root_causes:
        body.append('<section id="root-causes"><h2>Root cause' + ("s" if len(fa.root_causes) > 1 else "") + "</h2>")
        for k, rc in enumerate(fa.root_causes, 1):
            body.append(f'<article class="cause sev-{rc.severity}"><h3>{k}. {_e(rc.issue)}</h3>'
                        f'<div class="meta"><span class="pill">{_e(rc.category)}</span> '
                        f'<span class="pill sev">{_e(rc.severity)}</span> confidence {rc.confidence:.2f} · '
                        f'evidence {_ids(rc.evidence, known)}</div>'
                        f'<dl><dt>Fix</dt><dd>{_e(rc.fix)}</dd><dt>Expected impact</dt><dd>{_e(rc.expected_impact)}</dd>'
                        f'<dt>Verify</dt><dd>{_e(rc.verify)}</dd></dl></article>')
        if fa.quick_fixes:
            body.append("<h3>Quick fixes</h3><ul>" + "".join(f"<li>{_e(q)}</li>" for q in fa.quick_fixes) + "</ul>")
        if fa.needs_more_data:
            body.append("<h3>What would raise the confidence</h3><ul>"
                        + "".join(f"<li>{_e(n)}</li>" for n in fa.needs_more_data) + "</ul>")
        body.append("</section>")

    if charts:
        body.append('<section id="charts"><h2>Charts</h2><p class="hint no-print">Drag across a chart to zoom, '
                    "double-click (or Reset) to zoom out, hover for values, click a legend entry to hide a curve.</p>")
        for i, chart in enumerate(charts):
            panel = chart.get("panel")
            below = (f'<div class="panel-title">{_e(panel.get("title"))}</div><div class="plot panel"></div>'
                     if isinstance(panel, dict) else "")
            body.append(f'<figure class="chart" id="chart-{i}" data-index="{i}"><figcaption>{_e(chart.get("title"))}'
                        f'</figcaption><div class="plot"></div>{below}</figure>')
        body.append("</section>")

    if answer.comparisons:
        body.append('<section id="checks"><h2>Checks</h2><div class="scroll"><table><thead><tr><th>metric</th>'
                    "<th>check</th><th>result</th><th>failing / allowed</th><th>first failing step</th>"
                    "<th>max rel err</th><th>median rel err</th><th>medians (golden → actual)</th><th>evidence</th>"
                    "</tr></thead><tbody>")
        for c in answer.comparisons:
            med = "–"
            if c.golden_median is not None or c.actual_median is not None:
                med = f"{_fmt(c.golden_median)} → {_fmt(c.actual_median)}"
                if c.window:
                    med += f" (steps {c.window[0]}–{c.window[-1]})"
            res = '<span class="pass">pass</span>' if c.passed else '<span class="fail">FAIL</span>'
            body.append(f"<tr><td>{_e(c.metric)}</td><td>{_e(c.check)} ({_e(c.policy)}, rtol {c.rtol:g}, "
                        f"atol {c.atol:g})</td><td>{res}</td><td>{c.n_failing}/{c.n_steps} (allowed {c.allowed_failing})"
                        f"</td><td>{_fmt(c.first_failing_step)}</td><td>{_pct(c.max_rel_err)}</td>"
                        f"<td>{_pct(c.median_rel_err)}</td><td>{_e(med)}</td><td>{_ids(c.evidence, known)}</td></tr>")
        body.append("</tbody></table></div></section>")

    if answer.findings:
        body.append('<section id="findings"><h2>Findings</h2><div class="scroll"><table><thead><tr><th>id</th>'
                    "<th>rule</th><th>severity</th><th>category</th><th>metric</th><th>first bad step</th>"
                    "<th>message</th><th>confidence</th><th>evidence</th></tr></thead><tbody>")
        order = sorted(answer.findings[:MAX_FINDINGS], key=lambda d: -SEVERITY_ORDER[d.severity])
        for d in order:
            body.append(f'<tr id="{_anchor(d.id)}" class="sev-{d.severity}"><td>{_e(d.id)}</td><td>{_e(d.rule)}</td>'
                        f'<td><span class="pill sev">{_e(d.severity)}</span></td><td>{_e(d.category)}</td>'
                        f"<td>{_e(d.metric or '–')}</td><td>{_fmt(d.first_bad_step)}</td><td>{_e(d.message)}</td>"
                        f"<td>{d.confidence:.2f}</td><td>{_ids(d.evidence, known)}</td></tr>")
        body.append("</tbody></table></div>")
        if len(answer.findings) > MAX_FINDINGS:
            body.append(f"<p>{len(answer.findings) - MAX_FINDINGS} more findings in answer.json.</p>")
        body.append("</section>")

    if answer.commits:
        body.append('<section id="commits"><h2>Commits</h2><div class="scroll"><table><thead><tr><th>commit</th>'
                    "<th>date</th><th>role</th><th>relevance</th><th>title</th><th>reason</th><th>files</th>"
                    "</tr></thead><tbody>")
        for cm in answer.commits:
            files_ = ", ".join(cm.files[:6]) + (f" (+{len(cm.files) - 6})" if len(cm.files) > 6 else "")
            body.append(f'<tr class="role-{cm.role}"><td><code title="{_e(cm.sha)}">{_e(cm.sha[:10])}</code></td>'
                        f"<td>{_e(cm.date[:10])}</td><td>{_e(cm.role.replace('_', ' '))}</td>"
                        f'<td><span class="bar" style="--w:{cm.relevance * 100:.0f}%"></span>{cm.relevance:.2f}</td>'
                        f"<td>{_e(cm.title)}</td><td>{_e(cm.reason)}</td><td class='files'>{_e(files_)}</td></tr>")
        body.append("</tbody></table></div></section>")

    if facts or answer.calculations:
        body.append('<section id="evidence"><h2>Evidence</h2>')
        for f in answer.extracted_facts[:MAX_FACTS]:
            body.append(_fact_html(f, src[f.source_ref].path if f.source_ref in src else f.source_ref))
        if len(answer.extracted_facts) > MAX_FACTS:
            body.append(f"<p>{len(answer.extracted_facts) - MAX_FACTS} more facts in answer.json.</p>")
        if answer.calculations:
            body.append("<h3>Calculations</h3><p>Recomputed from their inputs by validation.</p>")
            for calc in answer.calculations:
                unit = f" {_e(calc.unit)}" if calc.unit else ""
                body.append(f'<div class="calc" id="{_anchor(calc.id)}"><b>{_e(calc.id)}</b> {_e(calc.description)}: '
                            f"<code>{_e(calc.formula)}</code> = <b>{_fmt(calc.result)}</b>{unit} "
                            f"(inputs {_ids(calc.inputs, known)})</div>")
        body.append("</section>")

    body.append('<section id="sources"><h2>Sources</h2><ul class="sources">')
    for s in answer.source_refs:
        extra = f" @ <code>{_e(s.commit[:12])}</code>" if s.commit else ""
        sha = f' <span class="dim">sha256 {_e(s.sha256[:12])}</span>' if s.sha256 else ""
        body.append(f'<li id="src-{_e(s.id.lower())}"><b>{_e(s.id)}</b> {_e(s.kind)}: <code>{_e(s.path)}</code>'
                    f"{extra}{sha} {_e(s.description)}</li>")
    body.append("</ul>")
    v = answer.validation
    checks = ", ".join(f"{_e(c.name)} {'✓' if c.passed else '✗ ' + _e(c.detail)}" for c in v.checks)
    body.append(f'<p class="validation {"ok" if v.all_passed else "bad"}">Validation: '
                f"{'all checks passed' if v.all_passed else 'FAILED'} ({checks})</p></section>")
    body.append(f'<footer>trainaudit {_e(answer.tool.version)} · schema {_e(answer.schema_version)}</footer>')

    page = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(page_title)}</title><style>{_asset('uPlot.min.css')}\n{_asset('report.css')}</style>"
            "</head><body><main>",
            # every value from input in body went through html_text (masked, then escaped) and the
            # data through json_text (masked, then serialised): masking the encoded page again would
            # read "&quot;" after a masked value as more of it
            "\n".join(body), "</main>", _json_script({"charts": charts}),
            f"<script>{_asset('uPlot.iife.min.js')}</script>", f"<script>{_asset('report.js')}</script>",
            "</body></html>"]
    return "\n".join(page)


def _fact_html(f: ExtractedFact, path: str) -> str:
    where = f"{path}:{f.line}" if f.line else path
    value = ""
    if f.value is not None:
        value = f" = <b>{_e(_fmt(f.value))}</b>{(' ' + _e(f.unit)) if f.unit else ''}"
    elif f.values is not None:
        value = f": {_e(values_in_words(f.values, f.steps))}"
    step = f" at step {f.step}" if f.step is not None else ""
    quote = ""
    if f.values is not None and f.quote and f.step is not None:
        step += f" (the line quoted: step {f.step})"
    if f.quote:
        lineno = f'<span class="ln">{f.line}</span>' if f.line else ""
        quote = f'<pre class="quote">{lineno}{_e(f.quote)}</pre>'
    return (f'<div class="fact" id="{_anchor(f.id)}"><div><b>{_e(f.id)}</b> {_e(f.statement)}{step}{value} '
            f'<code class="where">{_e(where)}</code></div>{quote}</div>')
