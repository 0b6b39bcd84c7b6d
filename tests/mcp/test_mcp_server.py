"""``trainaudit mcp`` driven by the official MCP SDK's own client over stdio: the tool list, diagnose,
compare, audit, parse, rules, evidence and source lines on real fixtures, and the root allow-list
(paths outside, symlinks escaping, output folders outside)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from shared_data import MEGATRON, sample_block, write_lines

MIMO = MEGATRON / "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
OOM_LINE = sample_block("error_signatures.txt", "murong-xu/CADS/issues/4")
ITER_LINES = sample_block("megatron.txt", "Megatron-LM/issues/756")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("mcp")
    root = base / "root"
    (root / "runs").mkdir(parents=True)
    write_lines(root / "runs" / "train.log", ITER_LINES + OOM_LINE)
    shutil.copy(MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json", root / "golden.json")
    shutil.copy(MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json", root / "actual.json")
    shutil.copy(MIMO / "model_config.yaml", root / "model_config.yaml")
    outside = base / "outside"
    outside.mkdir()
    write_lines(outside / "secret.log", ITER_LINES)
    os.symlink(outside / "secret.log", root / "link.log")
    (root / "linked_dir").mkdir()
    write_lines(root / "linked_dir" / "ok.log", ITER_LINES)
    os.symlink(outside, root / "linked_dir" / "escape")
    os.symlink(outside, root / "out_link")
    return root


def _session(root: Path, body: Callable[[Client], Awaitable[Any]]) -> Any:
    params = StdioServerParameters(command=sys.executable, args=["-m", "trainaudit", "mcp", "--root", str(root)],
                                   cwd=str(root.parent))

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=120) as client:
            return await body(client)

    return anyio.run(main)


def _ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


def _err(result: Any) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def test_tools_listed_with_schemas(world: Path) -> None:
    tools = _session(world, lambda c: c.list_tools())
    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == {"parse_summary", "diagnose", "compare", "audit", "trace_history", "list_rules",
                            "explain_rule", "get_evidence", "read_source"}
    assert by_name["diagnose"].input_schema["required"] == ["paths"]
    assert {"verdict", "category", "first_bad_step", "result_id", "findings"} <= \
        set(by_name["diagnose"].output_schema["properties"])


def test_diagnose_then_evidence_and_source_lines(world: Path) -> None:
    async def body(c: Client) -> tuple[dict, dict, dict, dict]:
        d = _ok(await c.call_tool("diagnose", {"paths": ["runs/train.log"], "out": "report"}))
        ev = _ok(await c.call_tool("get_evidence", {"result_id": d["result_id"], "ids": ["F1", "C1", "F99"]}))
        src = _ok(await c.call_tool("read_source", {"ref": "F1", "result_id": d["result_id"], "context": 2}))
        raw = _ok(await c.call_tool("read_source", {"ref": "runs/train.log", "start_line": 1, "end_line": 2}))
        return d, ev, src, raw

    d, ev, src, raw = _session(world, body)
    # The engine's OOM diagnosis of the verbatim torch.OutOfMemoryError line (line 4, after 3 iterations).
    assert (d["task"], d["verdict"], d["category"], d["first_bad_step"]) == ("diagnose", "crash", "oom", 45)
    assert d["findings"][0]["rule"] == "TA401" and d["findings"][0]["severity"] == "critical"
    assert d["sources"] == [{"id": "S1", "kind": "log", "path": "runs/train.log"}]
    assert d["validation_passed"] is True and d["failed_checks"] == []
    assert sorted(d["report_files"])[:2] == ["report/answer.json", "report/answer.md"]
    on_disk = json.loads((world / "report" / "answer.json").read_text())
    assert on_disk["final_answer"]["verdict"] == "crash"
    # Evidence by reference: the requested allocation and the recomputable ratio.
    assert ev["items"]["F1"]["value"] == 22.78 and ev["items"]["F1"]["unit"] == "GiB" and ev["items"]["F1"]["line"] == 4
    assert ev["items"]["C1"]["formula"] == "F2 / F1" and abs(ev["items"]["C1"]["result"] - 9.35 / 22.78) < 1e-12
    assert ev["missing"] == ["F99"]
    # read_source by fact id: the fact's line with 2 lines of context (the file has only 4 lines).
    assert (src["path"], src["start_line"], src["end_line"], src["highlight_line"]) == ("runs/train.log", 2, 4, 4)
    assert src["lines"][-1].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB.")
    assert raw["lines"] == ITER_LINES[:2]


def test_compare_parse_and_rules(world: Path) -> None:
    async def body(c: Client) -> tuple[dict, dict, dict, dict]:
        cmp = _ok(await c.call_tool("compare", {"inputs": ["actual.json"], "golden": "golden.json",
                                                "model_config_path": "model_config.yaml"}))
        parsed = _ok(await c.call_tool("parse_summary", {"paths": ["runs/train.log"]}))
        rules = _ok(await c.call_tool("list_rules", {}))
        doc = _ok(await c.call_tool("explain_rule", {"rule_id": "TA401"}))
        return cmp, parsed, rules, doc

    cmp, parsed, rules, doc = _session(world, body)
    # Same outcome as `trainaudit compare` on these goldens: only the iteration-time check fails (exit 1).
    assert cmp["passed"] is False and cmp["verdict"] == "gating_policy_issue"
    failing = [c["metric"] for c in cmp["comparisons"] if not c["passed"]]
    assert failing == ["iteration-time"]
    src = parsed["sources"][0]
    assert (src["path"], src["format"]) == ("runs/train.log", "megatron")
    lm = next(m for m in src["metrics"] if m["name"] == "lm loss")
    assert (lm["count"], lm["first_step"], lm["last_step"], lm["n_nonfinite"]) == (3, 43, 45, 0)
    assert src["events"].get("oom") == 1
    assert "TA401" in {r["id"] for r in rules["rules"]}
    assert doc["id"] == "TA401" and "TA401" in doc["text"]


def test_audit_on_real_goldens(world: Path) -> None:
    res = _session(world, lambda c: c.call_tool("audit", {"inputs": ["actual.json"], "golden": "golden.json",
                                                           "model_config_path": "model_config.yaml"}))
    a = _ok(res)
    assert a["task"] == "audit"
    assert (a["verdict"], a["category"]) == ("gating_policy_issue", "throughput_regression")
    assert a["validation_passed"] is True, a["failed_checks"]
    assert {s["path"] for s in a["sources"]} >= {"golden.json", "actual.json"}
    assert any("iteration-time" in n for n in a["notes"])


def test_trace_history_on_a_real_repo(world: Path) -> None:
    repo = world / "repo"
    repo.mkdir(exist_ok=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    for name, msg in [("model.py", "base"), ("Dockerfile", "bump container to pytorch 25.01"),
                      ("megatron/core/attention.py", "change attention softmax scaling")]:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(msg + "\n")
        subprocess.run([*git, "add", name], check=True)
        subprocess.run([*git, "commit", "-q", "-m", msg], check=True)
    h = _ok(_session(world, lambda c: c.call_tool("trace_history", {"repo": "repo", "good": "HEAD~2",
                                                                    "kind": "real_regression"})))
    assert h["n_commits"] == 2
    roles = {c["title"]: c["role"] for c in h["commits"]}
    assert roles == {"bump container to pytorch 25.01": "environment_change",
                     "change attention softmax scaling": "suspect"}
    assert h["commits"][0]["title"] == "change attention softmax scaling"  # a regression ranks code first


def test_paths_outside_the_root_are_refused(world: Path) -> None:
    outside = world.parent / "outside" / "secret.log"

    async def body(c: Client) -> list[str]:
        return [
            _err(await c.call_tool("diagnose", {"paths": ["../outside/secret.log"]})),
            _err(await c.call_tool("diagnose", {"paths": [str(outside)]})),
            _err(await c.call_tool("parse_summary", {"paths": ["link.log"]})),
            _err(await c.call_tool("diagnose", {"paths": ["linked_dir"]})),
            _err(await c.call_tool("read_source", {"ref": "link.log"})),
            _err(await c.call_tool("diagnose", {"paths": ["runs/train.log"], "out": "../elsewhere"})),
            _err(await c.call_tool("diagnose", {"paths": ["runs/train.log"], "out": "out_link/report"})),
            _err(await c.call_tool("compare", {"inputs": ["actual.json"], "golden": "../outside/secret.log"})),
            _err(await c.call_tool("diagnose", {"paths": ["runs/missing.log"]})),
        ]

    msgs = _session(world, body)
    assert "../outside/secret.log: outside the allowed roots" in msgs[0]
    assert f"{outside}: outside the allowed roots" in msgs[1]
    assert "link.log: a symlink leads outside the allowed roots" in msgs[2]
    assert "linked_dir: escape is a symlink that leads outside the allowed roots" in msgs[3]
    assert "link.log: a symlink leads outside the allowed roots" in msgs[4]
    assert "out ../elsewhere: outside the allowed roots" in msgs[5]
    assert "out out_link/report: a symlink leads outside the allowed roots" in msgs[6]
    assert "golden ../outside/secret.log: outside the allowed roots" in msgs[7]
    assert "runs/missing.log: no such file or directory" in msgs[8]
    # Nothing was written outside, and no machine path other than the one the client typed came back.
    assert not (world.parent / "elsewhere").exists() and not list((world.parent / "outside").glob("report*"))
    assert all(str(world) not in m for m in msgs)


def test_cli_refuses_a_non_loopback_http_host(tmp_path: Path) -> None:
    from shared_data import run_cli

    r = run_cli("mcp", "--http", "--host", "0.0.0.0", "--root", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.strip() == ("trainaudit: error: --host 0.0.0.0: the HTTP transport has no authentication; "
                                "only loopback addresses are allowed")
    r = run_cli("mcp", "--root", str(tmp_path / "nope"))
    assert r.returncode == 2 and "not a directory" in r.stderr


def test_streamable_http_on_loopback(world: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "trainaudit", "mcp", "--http", "--port", str(port),
                             "--root", str(world)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async def main() -> Any:
            for _ in range(100):  # the server needs a moment to import and bind
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    await anyio.sleep(0.1)
            async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=120) as client:
                return await client.call_tool("parse_summary", {"paths": ["runs/train.log"]})

        res = _ok(anyio.run(main))
        assert res["sources"][0]["format"] == "megatron" and res["sources"][0]["events"]["oom"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
