"""Taint through every command: hostile strings (secret shapes, split by escapes; workflow commands;
bidi and terminal controls; HTML, Markdown, Slack and GitHub markup; CSV formulas; mathtext) planted in
every field that flows from input to an output (metric names, event text, file and folder names,
golden keys, model_config.yaml values, commit titles, bodies, authors and branch names, module names
of a model, ids and text of a stranger's answer.json, a watched log) and run through every command:
diagnose, report, parse, post (dry run and sent to a real HTTP server on 127.0.0.1), compare (run vs
run and golden values), audit (a real git repository), batch, watch (a log growing while it is
followed), inspect (a real torch model and state dict), rules, the MCP tools (through the SDK's
client) and LLM requests (to the same local server). Each sink is checked for what is active in it:
no secret anywhere, nothing a terminal, GitHub Actions, Markdown, HTML, a spreadsheet, Slack or GitHub
would run or render, no exit 3.

The sinks are derived from the code (``writers.find_writers``): every function that writes output
must have run during these commands, or the last test fails naming it.

Fake secrets are built from pieces at run time (``test_hostile_sinks._shapes``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from test_hostile_taint import ACTIVE, SECRETS, _csv, _html, _markdown, _terminal

from harness import Outcome, run
from writers import Recorder, Writer, find_writers
from trainaudit.mcp.roots import Roots
from trainaudit.mcp.server import build_server

CASE = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1"
CASE_NAME = "gpt3_tp1_pp1"
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Writers that write no output of input text, each with why.
NOT_OUTPUTS = {
    ("fetch/http.py", "Fetcher._fetch_one"): "downloads CI artifacts into a private cache: input, read back by the readers",
    ("ingest/sources.py", "_stdin_copy"): "copies standard input into a private temporary file: input",
    ("audit/inputs.py", "Staging._stage_one"): "copies an input into the audit's temporary folder: input",
    ("audit/pipeline.py", "_as_mapping"): "a golden file converted for the reader, in the audit's temporary folder",
    ("monitor/core.py", "*"): "the training-side callback writing the training's own metrics log (an input of diagnose)",
    ("monitor/writer.py", "*"): "the training-side callback's JSONL writer",
    ("rules/docs.py", "main"): "writes docs/rules.md from the rule classes (a developer tool, no input)",
    ("render/painter.py", "_write_all"): "plot specs and PNG bytes between the parent and its plot-drawing child "
                                         "(a pipe); the parent writes the files, through write_report",
}


def piece(i: int) -> str:
    """A hostile value: one secret shape between two pieces active in some sink, different for each i."""
    return f"{ACTIVE[i % len(ACTIVE)]} {SECRETS[i % len(SECRETS)][0]} {ACTIVE[(7 * i + 3) % len(ACTIVE)]}"


def one_line(s: str) -> str:
    return s.replace("\r", " ").replace("\n", " ")


def name_safe(s: str) -> str:
    """The piece as a file or folder name the file system takes."""
    return re.sub(r"[/\x00\n\r]", "_", s)[:150] or "x"


# -- a local server for every HTTP body the program sends ---------------------------------------------
@dataclass
class Sent:
    method: str
    path: str
    body: bytes


@dataclass
class Capture:
    url: str = ""
    sent: list[Sent] = field(default_factory=list)


@pytest.fixture(scope="module")
def server() -> Iterator[Capture]:
    cap = Capture()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: Any, ctype: str = "application/json") -> None:
            data = (json.dumps(body) if ctype == "application/json" else str(body)).encode()
            self.send_response(201 if self.command == "POST" and "/issues" in self.path else 200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer([])  # GitHub: no open issue with this fingerprint

        def _write(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            cap.sent.append(Sent(self.command, self.path, body))
            if self.path.endswith("/chat/completions"):
                self._answer({"id": "c1", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}]})
            elif "/repos/" in self.path:
                self._answer({"number": 7, "html_url": "https://github.example/o/r/issues/7"})
            else:
                self._answer("ok", "text/plain")

        do_POST = do_PATCH = _write

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    cap.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield cap
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- the inputs ------------------------------------------------------------------------------------
def _jsonl(path: Path, names: list[str], bad_from: int | None = 30, n: int = 40) -> None:
    rows = []
    for s in range(1, n + 1):
        loss = 2.0 * 0.97 ** s + 0.5
        row: dict[str, Any] = {"step": s, "loss": loss, **dict.fromkeys(names, 1.0 + 0.01 * s)}
        if bad_from is not None and s >= bad_from:
            row = {**row, "loss": float("nan"), **{m: float("nan") for m in names}}
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _runs(work: Path) -> tuple[Path, Path]:
    failing, passing = work / "runs" / name_safe(piece(1)), work / "runs" / "passing"
    failing.mkdir(parents=True)
    passing.mkdir(parents=True)
    names = [piece(2), one_line(piece(3))]
    _jsonl(failing / f"metrics {name_safe(piece(4))}.jsonl", names)
    _jsonl(passing / "metrics.jsonl", names, bad_from=None)
    (failing / "train.log").write_text(
        "Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
        f"RuntimeError: CUDA out of memory. {one_line(piece(5))} Tried to allocate 2.00 GiB\n{piece(6)}\n")
    return failing, passing


def _golden_block(values: dict[int, float]) -> dict[str, Any]:
    return {"start_step": 1, "end_step": max(values), "step_interval": 1, "values": {str(k): v for k, v in values.items()}}


def _goldens(up: float) -> str:
    loss = {s: round(2.0 + 8.0 * 0.96 ** s * (1 + (up if s >= 20 else 0.0)), 5) for s in range(1, 51)}
    return json.dumps({"lm loss": _golden_block(loss), one_line(piece(7)): _golden_block(loss),
                       piece(8): _golden_block({s: 100.0 + s for s in range(1, 51)})}, indent=2) + "\n"


def _config(value: str, metric: str | None = None) -> str:
    return ("MODEL_ARGS:\n  --num-layers: 2\n"
            f"  --{name_safe(piece(9)).replace(':', '_').replace(' ', '_')[:40]}: {json.dumps(value)}\n"
            f"  --tokenizer-type: {json.dumps(one_line(piece(10)))}\nMETRICS:\n  - lm loss\n"
            + (f"  - {json.dumps(metric)}\n" if metric else "") + "TEST_TYPE: regular\n")


def _git(repo: Path, *args: str, author: str = "dev", email: str = "dev@example.org", date: str = "") -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": author,
           "GIT_COMMITTER_EMAIL": email, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str, date: str, author: str = "dev",
            email: str = "dev@example.org") -> str:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-verify", "-m", message, author=author, email=email, date=date)
    return _git(repo, "rev-parse", "HEAD")


def _repo(root: Path) -> dict[str, str]:
    """A Megatron-like repository whose commits carry hostile titles, bodies, authors, e-mails, paths
    and config values, and whose branches have hostile names."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    shas = {"good": _commit(root, {f"{CASE}/golden_values_dev_dgx_h100.json": _goldens(0.0),
                                   f"{CASE}/model_config.yaml": _config("a"),
                                   "megatron/core/transformer/attention.py": "x = 1\n"},
                            "Initial import", "2026-04-01T10:00:00+00:00")}
    hostile_path = f"megatron/core/{name_safe(piece(11))[:80]}.py"
    shas["model"] = _commit(root, {"megatron/core/transformer/attention.py": "x = 2\n", hostile_path: "y = 1\n"},
                            f"{one_line(piece(12))}\n\n{piece(13)}\n{piece(14)}", "2026-04-02T10:00:00+00:00",
                            author=one_line(piece(15)), email=one_line(piece(16)).replace(" ", "") + "@example.org")
    shas["config"] = _commit(root, {f"{CASE}/model_config.yaml": _config(one_line(piece(17))),
                                    "docker/Dockerfile.ci": f"FROM nvcr.io/nvidia/pytorch:26.04-py3\n# {one_line(piece(18))}\n"},
                             f"Bump the image {one_line(piece(19))}", "2026-04-03T10:00:00+00:00")
    shas["bad"] = shas["config"]
    shas["fix"] = _commit(root, {"megatron/core/transformer/attention.py": "x = 1\n"},
                          f"Revert {one_line(piece(20))}\n\nThis reverts commit {shas['model']}.",
                          "2026-04-04T10:00:00+00:00")
    for i, name in enumerate(("<script>alert(1)</script>", "=HYPERLINK(\"x\")@octocat\u202e", "<!channel>|x")):
        _git(root, "branch", f"{name}{i}", shas["fix"])
    _git(root, "checkout", "-q", "-b", "release", shas["bad"])
    return shas


MODEL_PY = '''
import torch
from torch import nn

NAMES = {names!r}

def build():
    torch.manual_seed(0)
    m = nn.Sequential()
    for i, name in enumerate(NAMES):
        block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        with torch.no_grad():
            block[0].bias.fill_(-100.0)  # a dead ReLU: a finding that names the module
        m.add_module(name, block)
    return m

def batch():
    return torch.randn(8, 4)
'''


# -- running everything once -------------------------------------------------------------------------
@dataclass
class World:
    work: Path
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    mcp: dict[str, Any] = field(default_factory=dict)  # label -> structured result, or the error text
    hit: set[Writer] = field(default_factory=set)

    def cli(self, label: str, args: list[str], env: dict[str, str] | None = None, codes: tuple[int, ...] = (0, 1)) -> Outcome:
        o = run(args, self.work, env=env)
        assert o.code in codes, (label, o.code, o.stderr[-2000:])
        self.outcomes[label] = o
        return o


def _watch(world: World, log: Path) -> None:
    """watch on a log that another thread writes while it is followed, then leaves idle."""
    names = [piece(21), one_line(piece(22))]

    def writer() -> None:
        with log.open("a") as f:
            for s in range(1, 41):
                loss = float("nan") if s >= 30 else 2.0 * 0.97 ** s + 0.5
                f.write(json.dumps({"step": s, "loss": loss, **dict.fromkeys(names, loss)}) + "\n")
                f.flush()
                if s % 10 == 0:
                    time.sleep(0.05)

    log.write_text("")
    t = threading.Thread(target=writer)
    t.start()
    try:
        world.cli("watch", ["watch", str(log), "--interval", "0.02", "--idle-timeout", "1"])
    finally:
        t.join()


def _mcp(world: World, shas: dict[str, str]) -> None:
    srv = build_server(Roots.of([str(world.work)]))

    async def main() -> None:
        async with Client(srv, read_timeout_seconds=120) as c:
            async def call(tool: str, args: dict[str, Any], label: str = "") -> dict[str, Any]:
                res = await c.call_tool(tool, args)
                world.mcp[label or tool] = res.content[0].text if res.is_error else res.structured_content
                assert res.is_error or res.structured_content is not None, tool
                return res.structured_content or {}

            fail = str(world.work / "runs" / name_safe(piece(1)))
            parsed = await call("parse_summary", {"paths": [fail]})
            assert parsed
            d = await call("diagnose", {"paths": [fail], "out": "mcp-out"})
            await call("get_evidence", {"result_id": d["result_id"], "ids": ["S1", "F1", "D1", "C1"]})
            await call("read_source", {"ref": "F1", "result_id": d["result_id"]}, "read_source F1")
            await call("read_source", {"ref": str(Path(fail) / "train.log"), "start_line": 1, "end_line": 9})
            await call("compare", {"inputs": ["actual.json"], "golden": "golden.json", "model_config_path": "model_config.yaml"})
            await call("audit", {"inputs": [f"art/{CASE_NAME}/actual.json"], "repo": "repo", "good": shas["good"],
                                 "bad": shas["bad"], "find_fix": True})
            await call("trace_history", {"repo": "repo", "good": shas["good"], "bad": shas["bad"], "find_fix": True})
            await call("list_rules", {})
            await call("explain_rule", {"rule_id": "TA101"})
            await call("diagnose", {"paths": [f"{fail}/{piece(23)}.log"]}, "diagnose missing")  # an error naming it

    anyio.run(main)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, server: Capture) -> World:
    work = tmp_path_factory.mktemp("taint-all")
    w = World(work)
    failing, passing = _runs(work)
    (work / "golden.json").write_text(_goldens(0.0))
    (work / "actual.json").write_text(_goldens(0.2))
    (work / "model_config.yaml").write_text(_config(one_line(piece(24))))
    (work / "unknown_metric.yaml").write_text(_config("a", one_line(piece(7))))
    (work / "art" / CASE_NAME).mkdir(parents=True)
    (work / "art" / CASE_NAME / "actual.json").write_text(_goldens(0.2))
    shas = _repo(work / "repo")
    sets = work / "sets"
    for i, name in enumerate((name_safe(piece(25)), name_safe(piece(26)))):
        (sets / name).mkdir(parents=True)
        _jsonl(sets / name / f"train {name_safe(piece(27 + i))}.jsonl", [piece(29 + i)], bad_from=20 + i)
    (work / "model.py").write_text(MODEL_PY.format(names=[one_line(piece(31)).replace(".", "_"), piece(32).replace(".", "_")]))
    import torch

    torch.save({piece(33): torch.zeros(3), one_line(piece(34)).replace(".", "_") + ".weight": torch.ones(2, 2)},
               work / "state.pt")
    llm_key = "sk-" + "taint" + "0123456789abcdefghij"
    env_llm = {"OPENAI_API_KEY": llm_key}
    llm = ["--llm", "openai:m", "--llm-base-url", f"{server.url}/v1", "--llm-timeout", "20"]
    summary = work / "summary.md"
    env_ci = {"GITHUB_STEP_SUMMARY": str(summary)}
    token = "gh" + "p_" + "Taint0" * 6
    env_post = {"GITHUB_TOKEN": token}

    rec = Recorder(find_writers())
    with rec.active():
        w.cli("diagnose", ["diagnose", str(failing), "-o", "d", "--html", "--github-summary", "--gitlab-codequality",
                           *llm], env={**env_ci, **env_llm})
        w.cli("diagnose --json", ["diagnose", str(failing), "--json", "--no-plots", "-o", "dj"])
        w.cli("diagnose again", ["diagnose", str(failing), "-o", "dj", "--no-plots"])  # notes the replaced report
        w.cli("parse", ["parse", str(failing)])
        w.cli("parse csv", ["parse", str(failing), "-o", "x.csv"])
        w.cli("parse jsonl", ["parse", str(failing), "-o", "x.jsonl"])
        answer = json.loads((work / "d" / "answer.json").read_text())
        # a stranger's answer.json: ids and text fields hold markup and secrets
        answer["final_answer"]["summary"] = piece(35)
        answer["final_answer"]["root_causes"][0]["issue"] = piece(36)
        answer["final_answer"]["root_causes"][0]["fix"] = piece(37)
        answer["findings"][0]["id"] = one_line(piece(38))
        answer["findings"][0]["message"] = piece(39)
        answer["extracted_facts"][0]["id"] = one_line(piece(40))
        (work / "stranger.json").write_text(json.dumps(answer))
        for a in ("d/answer.json", "stranger.json"):
            w.cli(f"report {a}", ["report", a, "-o", f"{a}.html", "--github-summary", "--gitlab", f"{a}.gl.json"],
                  env=env_ci)
            w.cli(f"post {a}", ["post", a, "--github-issue", "o/r", "--slack-webhook", f"{server.url}/slack/T0/B0/x"],
                  env=env_post)
            w.cli(f"post --send {a}", ["post", a, "--github-issue", "o/r", "--api-url", server.url, "--slack-webhook",
                                       f"{server.url}/slack/T0/B0/x", "--send"], env=env_post)
        w.cli("compare runs", ["compare", str(passing), str(failing), "-o", "cr", "--html",
                               "--github-summary", *llm], env={**env_ci, **env_llm})
        w.cli("compare golden", ["compare", "--golden", "golden.json", "actual.json", "--model-config",
                                 "model_config.yaml", "-o", "cg", "--html", "--github-summary"], env=env_ci)
        w.cli("compare golden, unknown metric", ["compare", "--golden", "golden.json", "actual.json", "--model-config",
                                                 "unknown_metric.yaml"], codes=(2,))
        w.cli("compare golden --json", ["compare", "--golden", "golden.json", "actual.json", "--json", "--no-plots",
                                        "-o", "cgj"])
        w.cli("audit", ["audit", f"art/{CASE_NAME}/actual.json", "--repo", "repo", "--good", shas["good"], "--bad",
                        shas["bad"], "--find-fix", "-o", "au", "--html", "--github-summary", "--gitlab-codequality", "-v",
                        *llm], env={**env_ci, **env_llm})
        w.cli("audit hostile rev", ["audit", "actual.json", "--repo", "repo", "--bad", "<script>alert(1)</script>0"],
              codes=(2,))
        w.cli("batch", ["batch", "sets", "-o", "b", "--html"])
        w.cli("batch --json", ["batch", "sets", "-o", "bj", "--json"])
        _watch(w, work / "watched.jsonl")
        w.cli("inspect", ["inspect", "model.py:build", "--sample-batch", "model.py:batch"])
        w.cli("inspect --json", ["inspect", "state.pt", "--json"])
        w.cli("rules", ["rules", "-v"])
        w.cli("rules one", ["rules", "TA101"])
        w.cli("rules --json", ["rules", "TA101", "--json"])
        _mcp(w, shas)
    w.hit = rec.hit
    return w


# -- per sink ----------------------------------------------------------------------------------------
SECRET_PARTS = [s for _, s in SECRETS]


def _no_secret(where: str, text: str) -> None:
    for s in SECRET_PARTS:
        assert s not in text, (where, s)


def _strings(v: Any) -> Iterator[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _strings(k)
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def _json_value(where: str, value: Any) -> None:
    for s in _strings(value):
        _no_secret(where, s)
        assert not CONTROLS.search(s.replace("\t", "").replace("\n", "")), (where, s)
        assert not BIDI.search(s), (where, s)


_CELL_END = re.compile(r"(?<!\\)(?:\\\\)*\|")  # a "|" not escaped by an odd number of backslashes (GFM tables)
_DELIMITER_ROW = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")


def _tables(md: str) -> int:
    """Every GFM table keeps its header's number of cells in each row (no row forged by input);
    returns the number of rows checked."""
    lines = md.split("\n")
    rows = 0
    for i in range(1, len(lines)):
        if _DELIMITER_ROW.match(lines[i]) and lines[i - 1].startswith("|"):
            width = len(_CELL_END.split(lines[i - 1]))
            for row in lines[i + 1:]:
                if not row.startswith("|"):
                    break
                assert len(_CELL_END.split(row)) == width, row
                rows += 1
    return rows


def _files(world: World) -> list[Path]:
    return [p for p in world.work.rglob("*") if p.is_file() and "repo" not in p.relative_to(world.work).parts[:1]]


OUTPUT_DIRS = ("d", "dj", "cr", "cg", "cgj", "au", "b", "bj", "mcp-out")


def test_every_command_ran_without_internal_error(world: World) -> None:
    assert set(world.outcomes) >= {"diagnose", "report stranger.json", "post --send stranger.json", "compare runs",
                                   "compare golden", "audit", "batch", "watch", "inspect", "inspect --json"}
    for label, o in world.outcomes.items():
        assert "internal error" not in o.stderr and "Traceback" not in o.stderr, (label, o.stderr)
    assert world.outcomes["watch"].code == 1 and "TA101" in world.outcomes["watch"].stdout  # it did alert
    assert "(dead ReLU)" in world.outcomes["inspect"].stdout  # a finding that names the hostile modules
    ins = json.loads(world.outcomes["inspect --json"].stdout)  # the state dict's two hostile keys were read
    assert ins["total_params"] == 7 and len(ins["by_module"]) == 2


def test_terminal_sink(world: World) -> None:
    for label in ("diagnose", "report stranger.json", "compare runs", "audit"):  # the GitHub annotations
        lines = [ln for ln in world.outcomes[label].stdout.split("\n") if ln.startswith("::")]
        assert lines and all(re.match(r"::(error|warning|notice) file=[^,:\n]*,", ln) for ln in lines), label
    for label, o in world.outcomes.items():
        text = o.stdout + o.stderr
        _no_secret(label, text)
        _terminal(text)
        # colours (SGR) are the program's own; no other control from input reaches the terminal
        assert not CONTROLS.search(re.sub(r"\x1b\[[0-9;]*m", "", text).replace("\t", "").replace("\n", "")), label
        assert not BIDI.search(text), label


def test_file_sinks(world: World) -> None:
    files = _files(world)
    written = [p for p in files if p.relative_to(world.work).parts[0] in OUTPUT_DIRS
               or p.name in ("x.csv", "x.jsonl", "summary.md") or p.name.endswith((".html", ".gl.json"))]
    assert len(written) > 30, written
    table_rows = 0
    for p in written:
        if p.suffix == ".png":  # the image itself holds no text from input; its name is checked below
            continue
        text = p.read_text(errors="replace")
        _no_secret(str(p), text)
        assert not BIDI.search(text), p
        if p.suffix == ".json":
            _json_value(str(p), json.loads(text))
        elif p.suffix == ".jsonl":
            for line in text.splitlines():
                _json_value(str(p), json.loads(line))
        elif p.suffix == ".md":
            _markdown(text)
            table_rows += _tables(text)
        elif p.suffix == ".html":
            _html(text)
        elif p.suffix == ".csv":
            _csv(p)
    for p in written:  # every name the program chose: plots, reports, per-set folders
        rel = p.relative_to(world.work)
        for part in rel.parts[1:] if rel.parts[0] in OUTPUT_DIRS else ():
            assert re.fullmatch(r"[A-Za-z0-9._-]+", part), rel
            _no_secret(str(rel), part)
    assert table_rows > 20  # the answers' tables of findings, checks and commits, and batch.md's
    plots = [p for p in written if p.suffix == ".png"]
    assert plots  # plot names derived from hostile metric names were written (and checked above)
    summary = (world.work / "summary.md").read_text()
    assert summary.count("trainaudit") >= 4  # diagnose, two reports, compare, audit appended their summaries
    _markdown(summary)
    _tables(summary)


def test_http_bodies(world: World, server: Capture) -> None:
    kinds = {"llm": 0, "github": 0, "slack": 0}
    for s in server.sent:
        raw = s.body.decode()
        _no_secret(s.path, raw)
        assert "\\u001b" not in raw.lower() and "\\u009b" not in raw.lower(), s.path
        body = json.loads(raw)
        _json_value(s.path, body)
        if s.path.endswith("/chat/completions"):
            kinds["llm"] += 1
            text = json.dumps(body["messages"])
            assert "<script" not in text and "<img" not in text  # markup goes only as JSON data escapes
        elif "/repos/" in s.path:
            kinds["github"] += 1
            if "body" in body:  # a title is plain text on GitHub; the body is Markdown
                assert not re.search(r"(?<![\w`])@octocat", body["body"])
                _markdown(body["body"])
                _tables(body["body"])
        else:
            kinds["slack"] += 1
            assert "<!channel>" not in body["text"] and "<https://e.example|" not in body["text"]
            assert "<script" not in body["text"]
    assert all(kinds.values()), kinds  # diagnose, compare and audit asked the LLM; both posts were sent


def test_mcp_results(world: World) -> None:
    assert len(world.mcp) == 11
    errors = {k: r for k, r in world.mcp.items() if isinstance(r, str)}
    # the hostile path that does not exist; and F1's source, whose file name holds a secret shape: the
    # answer keeps the name masked, so the fact cannot lead back to the file
    assert set(errors) <= {"diagnose missing", "read_source F1"} and "diagnose missing" in errors, errors
    assert "***" in errors.get("read_source F1", "***")
    for label, r in world.mcp.items():
        _json_value(label, r)


# -- the sinks, from the code ------------------------------------------------------------------------
def _excused(w: Writer) -> bool:
    return (w.module, w.qualname) in NOT_OUTPUTS or (w.module, "*") in NOT_OUTPUTS


def test_the_writer_list_is_derived_from_the_code() -> None:
    found = find_writers()
    names = {(w.module, w.qualname) for w in found}
    # a few writers of each kind, so a scanner that finds nothing cannot pass
    assert {("render/write.py", "write_report"), ("post/ci.py", "github_summary"), ("llm/providers.py", "complete"),
            ("post/send.py", "send_slack"), ("commands/watch.py", "_echo"), ("mcp/server.py", "build_server.audit"),
            ("ingest/export.py", "RowWriter.write_event"), ("commands/common.py", "reading_progress")} <= names
    for module, qual in NOT_OUTPUTS:  # no stale excuse
        assert any(w.module == module and (qual == "*" or w.qualname == qual) for w in found), (module, qual)


def test_every_writer_ran_on_hostile_input(world: World) -> None:
    missing = [str(w) for w in find_writers() if w not in world.hit and not _excused(w)]
    assert missing == [], "writers no taint case exercised (add one to the world fixture):\n" + "\n".join(missing)
