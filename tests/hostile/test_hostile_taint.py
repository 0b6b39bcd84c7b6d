"""Taint: hostile strings planted in every field of a run that flows to an output (metric names, event
text, file names) and run through diagnose, report, parse -o and post; each sink is checked for what
is active in it. A second test derives the sinks from the code: every encoder of ``trainaudit.redact``
is used by a writer, and no module that writes output serialises JSON or escapes HTML by itself.

Fake secrets are built from pieces at run time (see ``test_hostile_sinks._shapes``).
"""

from __future__ import annotations

import ast
import csv
import inspect
import json
import re
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_hostile_sinks import SHAPES

from harness import run
from trainaudit import redact

SRC = Path(redact.__file__).parent

_GH = "gh" + "p_" + "Tz7" * 12
SECRETS = [(text, secret) for text, secret in SHAPES.values()] + [
    ("gh" + "p_" + "Tz7" * 4 + "\x1b[32m" + "Tz7" * 8, "Tz7" * 8),
]
ACTIVE = [
    "\n::error file=a.py,line=1::pwned", "\n::add-mask::x", "\n##[error]old", "\u202e\u2066rev\u2069",
    "\x1b]0;title\x07", "\x1b[8mhidden", "=HYPERLINK(\"http://e.example\",\"x\")", "+cmd|' /C calc'!A0",
    "<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "[x](javascript:alert(1))",
    "\\| forged |", "<!channel>", "<https://e.example|click>", "@octocat", "$^{x}$", "`` ` ``", "\r\n",
]
PIECES = [t for t, _ in SECRETS] + ACTIVE


def _name_safe(s: str) -> str:
    """The piece as a file name the file system takes (no "/", no NUL, not too long)."""
    return re.sub(r"[/\x00\n\r]", "_", s)[:60] or "x"


def _write_run(work: Path, metric: str, event: str, fname: str) -> Path:
    run_dir = work / "run"
    run_dir.mkdir()
    rows = [{"step": i, "loss": 2.0 - 0.01 * i, metric: 1.0 + 0.01 * i} for i in range(1, 30)]
    rows.append({"step": 30, "loss": float("nan"), metric: float("nan")})
    (run_dir / f"m {_name_safe(fname)}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "train.log").write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
        f"RuntimeError: CUDA out of memory. {event} Tried to allocate 2.00 GiB\n")
    return run_dir


def _secret_free(texts: list[str]) -> None:
    for t in texts:
        for _, secret in SECRETS:
            assert secret not in t, secret


def _terminal(text: str) -> None:
    assert not re.search("[\u202a-\u202e\u2066-\u2069]", text)
    assert "\x1b]" not in text and "\x1b[8m" not in text and "\x07" not in text
    for ln in text.split("\n"):
        s = ln.lstrip()
        if s.startswith(("::", "##[")):  # only the program's own annotations
            assert re.match(r"::(error|warning|notice) (file=[^,:]*,(line=\d+,)?)?title=[^:]*::", s), ln


def _markdown(md: str) -> None:
    assert not re.search("[\u202a-\u202e\u2066-\u2069]", md)
    prose = re.sub(r"```.*?```", "", md, flags=re.S)
    prose = re.sub(r"(`+).*?\1", "", prose)
    assert "<img" not in prose and "<script" not in prose and "<!channel>" not in prose
    assert not re.search(r"(?<!\\)\]\(javascript:", prose)
    for row in md.split("\n"):
        if re.match(r"\| D\d+ ", row):
            assert len(re.split(r"(?<!\\)(?:\\\\)*\|", row)) == 9, row


def _html(page: str) -> None:
    assert "<img src=x" not in page and "<script>alert" not in page
    for attr in re.findall(r'(?:id|href|src)="([^"]*)"', page):
        assert "<" not in attr and not attr.lower().startswith("javascript:"), attr


def _csv(path: Path) -> None:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    for row in rows[1:]:
        for col, cell in zip(head, row):
            if col != "value":
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell


# Few examples, no shrinking: the suite's time stays bounded (a failure prints the example as drawn).
@settings(max_examples=4, derandomize=True, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(metric=st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("".join),
       event=st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map(" ".join),
       fname=st.sampled_from(PIECES))
def test_hostile_strings_reach_no_sink_active(tmp_path_factory: object, metric: str, event: str, fname: str) -> None:
    work = tmp_path_factory.mktemp("taint")  # type: ignore[attr-defined]
    run_dir = _write_run(work, metric, event, fname)
    out = work / "out"
    summary = work / "summary.md"
    d = run(["diagnose", str(run_dir), "-o", str(out), "--html", "--github-summary"], work,
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert d.code in (0, 1), d.stderr
    r = run(["report", str(out / "answer.json"), "-o", str(work / "r.html")], work)
    p = run(["parse", str(run_dir), "-o", str(work / "x.csv")], work)
    j = run(["parse", str(run_dir), "-o", str(work / "x.jsonl")], work)
    post = run(["post", str(out / "answer.json"), "--github-issue", "o/r", "--slack-webhook",
                "https://example.invalid/x"], work)
    for o in (r, p, j, post):
        assert o.code in (0, 1), o.stderr
    files = [f for f in out.rglob("*") if f.is_file()] + [work / "r.html", work / "x.csv", work / "x.jsonl", summary]
    texts = [f.read_text(errors="replace") for f in files if f.suffix in (".json", ".md", ".html", ".csv", ".jsonl")]
    terminal = [o.stdout + o.stderr for o in (d, r, p, j, post)]
    _secret_free(texts + terminal + [f.name for f in files])
    for t in terminal:
        _terminal(t)
    for f in (out / "answer.md", summary):
        _markdown(f.read_text())
    for f in (out / "report.html", work / "r.html"):
        _html(f.read_text())
    _csv(work / "x.csv")
    for f in (out / "plots").glob("*") if (out / "plots").is_dir() else []:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", f.name), f.name
    bodies = [json.loads(m) for m in re.findall(r"^\{\n.*?^\}$", post.stdout, re.S | re.M)]
    for b in bodies:
        if "blocks" in b:
            assert "<!channel>" not in b["text"] and "<https://e.example" not in b["text"]
        if "body" in b:
            assert not re.search(r"(?<![\w`])@octocat", b["body"])
            _markdown(b["body"])


# -- the sinks, from the code ------------------------------------------------------------------------
ENCODERS = {name for name, fn in inspect.getmembers(redact, inspect.isfunction)
            if fn.__module__ == redact.__name__ and not name.startswith("_")}
# Serialisation outside the encoder module, each with why it is not an output of input text.
RAW_JSON_ALLOWED = {
    ("ingest/export.py", "write_values"): "per-row values of one series; its text cells are masked once above",
    ("ingest/export.py", "write_event"): "normalises the row's types before json_text masks it",
    ("ingest/golden.py", "*"): "error messages, written through the terminal encoder on stderr",
    ("ingest/formats/wandb.py", "*"): "run metadata kept in memory, not written",
    ("diagnosis/model.py", "to_json"): "the fitted model's weights written by tools/fit_diagnosis.py, no input text",
    ("monitor/writer.py", "*"): "the training-side callback writing the user's own metrics log",
    ("answer/validate.py", "*"): "the text checked for secrets, not written",
    ("audit/pipeline.py", "_as_mapping"): "a golden file converted for the reader, in a temporary folder",
    ("render/write.py", "write_report"): "json.loads of the model's JSON, handed to json_model",
}


def _functions_calling(tree: ast.AST, attr: str, module: str) -> list[str]:
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == module):
                    out.append(fn.name)
    return out


def test_every_encoder_has_a_writer() -> None:
    used: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path.name == "redact.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "trainaudit.redact":
                used |= {a.name for a in node.names}
    internal = {"strip_controls", "entropic", "json_clean"}  # steps of the encoders, not sinks
    assert ENCODERS - internal - used == set()


def test_no_writer_bypasses_the_encoders() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel == "redact.py":
            continue
        text = path.read_text()
        tree = ast.parse(text)
        for fn in _functions_calling(tree, "dumps", "json") + _functions_calling(tree, "model_dump_json", "answer"):
            if (rel, fn) not in RAW_JSON_ALLOWED and (rel, "*") not in RAW_JSON_ALLOWED:
                offenders.append(f"{rel}:{fn} json")
        if re.search(r"^from html import|html\.escape\(", text, re.M):
            offenders.append(f"{rel}: html escaping outside redact")
        if re.search(r"csv\.(?:Dict)?[Ww]riter\(", text) and "csv_cell" not in text:  # readers may import csv
            offenders.append(f"{rel}: CSV written without csv_cell")
        for node in ast.walk(tree):  # an HTTP client's json= serialises the body itself, unmasked
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("post", "patch", "put", "request") and any(k.arg == "json" for k in node.keywords)):
                offenders.append(f"{rel}:{node.lineno} HTTP body serialised by the client (use redact.json_body)")
    assert offenders == []
