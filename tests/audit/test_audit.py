"""``trainaudit audit`` end to end: a real git history, real artifacts of a passing and a failing run
per story (TensorBoard via torch's SummaryWriter, Megatron logs, the real MIMO goldens, CI job logs
with the gate's own lines), through the CLI in a subprocess, and through a local fake CI API."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fetch"))
from stories import GPT_GOLDEN, MIMO_GOLDEN, MIMO_NEW, MIMO_OLD, build_artifacts, build_repo

from shared_data import run_cli

TOKEN = "ghp_testtoken0123456789abcdefghij"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("audit")
    shas = build_repo(root / "repo")
    for story in ("regression", "drift", "mimo", "golden", "oom"):
        build_artifacts(root / "art", story)
    return root, shas


def _audit(root: Path, *args: str, out: str) -> tuple[dict, str, str]:
    (root / out).mkdir(exist_ok=True)
    p = run_cli("audit", *args, "-o", ".", cwd=root / out)
    answer = json.loads((root / out / "answer.json").read_text())
    # exit 0 only for a passing verdict: an audit that found the failure exits 1
    assert p.returncode == (0 if answer["final_answer"]["verdict"] == "pass" else 1), p.stderr
    md = (root / out / "answer.md").read_text()
    return answer, md, p.stdout


def _no_leaks(root: Path, out: str, *secrets: str) -> None:
    for name in ("answer.json", "answer.md"):
        text = (root / out / name).read_text()
        assert str(root) not in text and "/tmp/" not in text, name
        for s in secrets:
            assert s not in text, (name, s)


def _no_duplicate_facts(md: str) -> None:
    section = md.split("<summary>Evidence", 1)[1].split("</details>", 1)[0]
    entries = [re.sub(r"\*\*F\d+\*\*|<a id=\"f\d+\"></a>", "", line) for line in section.splitlines()
               if line.startswith("- ")]
    assert len(entries) == len(set(entries)), [e for e in entries if entries.count(e) > 1][:3]


def _fact_points_somewhere(answer: dict) -> None:
    src = {s["id"]: s for s in answer["source_refs"]}
    for f in answer["extracted_facts"]:
        s = src[f["source_ref"]]
        assert s["path"], f
        assert f["line"] or s["kind"] in ("commit", "repo", "golden_values", "config", "log", "metrics",
                                          "tensorboard") or "!" in s["path"], f
    commits = [s for s in answer["source_refs"] if s["kind"] == "commit"]
    assert all(re.fullmatch(r"[0-9a-f]{40}", s["commit"]) for s in commits)


@pytest.mark.parametrize("story,good,bad,verdict,category,role,commit_key,fix_key", [
    ("regression", "docs", "model", "real_regression", "golden_mismatch", "suspect", "model", "revert"),
    ("drift", "revert", "container", "numerical_drift", "golden_mismatch", "environment_change", "container", "refresh"),
    ("mimo", "revert", "container", "gating_policy_issue", "throughput_regression", "environment_change", "container",
     "broken"),
    ("golden", "broken", "badgolden", "gating_policy_issue", "golden_mismatch", "golden_update", "badgolden", None),
])
def test_story(world, story, good, bad, verdict, category, role, commit_key, fix_key) -> None:
    root, shas = world
    answer, md, stdout = _audit(root, f"../art/{story}/failing", "--passing", f"../art/{story}/passing",
                                "--repo", "../repo", "--good", shas[good], "--bad", shas[bad], "--find-fix",
                                out=f"out-{story}")
    fa = answer["final_answer"]
    assert (fa["verdict"], fa["category"]) == (verdict, category), fa["summary"]
    assert answer["validation"]["all_passed"], answer["validation"]
    top = answer["commits"][0]
    assert (top["sha"], top["role"]) == (shas[commit_key], role)
    assert shas[commit_key][:10] in fa["summary"] and shas[commit_key][:10] in stdout
    fixes = [c["sha"] for c in answer["commits"] if c["role"] == "fix"]
    if fix_key:
        assert fixes[0] == shas[fix_key]
    # the golden came from the repository at --bad, pinned to that commit
    golden = next(s for s in answer["source_refs"] if s["kind"] == "golden_values")
    assert golden["path"] == (MIMO_GOLDEN if story == "mimo" else GPT_GOLDEN) and golden["commit"] == shas[bad]
    # the root cause cites the commit
    commit_src = next(s["id"] for s in answer["source_refs"] if s["kind"] == "commit")
    cited = {f["id"] for f in answer["extracted_facts"] if f["source_ref"] == commit_src}
    assert cited & set(fa["root_causes"][0]["evidence"])
    # the page opens with the answer in at most 20 lines, in order; the rest is collapsed
    top = md.split("<details>")[0].rstrip().splitlines()
    assert len(top) <= 20, top
    needles = [f"**{verdict}**", "**What failed:**", f"**Why {verdict}:**", f"**Culprit:** `{shas[commit_key][:10]}`",
               "**What to do:**", "**How to verify:**"]
    at = [next((i for i, line in enumerate(top) if n in line), -1) for n in needles]
    assert -1 not in at and at == sorted(at), (needles, top)
    assert "<summary>All checks" in md and "<summary>Commits (top" in md and "<summary>Evidence" in md
    _no_duplicate_facts(md)
    _fact_points_somewhere(answer)
    _no_leaks(root, f"out-{story}", "glpat-abcdefghijklmnopqrstuvwxyz")
    assert (root / f"out-{story}" / "plots").is_dir() and list((root / f"out-{story}" / "plots").glob("*.png"))


def test_mimo_numbers_and_ci_log(world) -> None:
    """The MIMO pair (real goldens at 4e85d74ae9 and 5fe3f06658): only iteration-time fails. The
    comparator of --bad's date (2026-05-07) took the median over every golden step (71223d53ba
    moved it to steps 30-45 on 2026-05-27): +15.1 % there, +14.5 % with today's comparator."""
    root, shas = world
    import statistics

    def med(path: Path, steps: range | None = None) -> float:  # the gate's rule restated ("nan" -> inf)
        v = json.loads(path.read_text())["iteration-time"]["values"]
        return statistics.median(float("inf") if isinstance(x, str) else float(x)
                                 for s, x in v.items() if steps is None or int(s) in steps)

    for args, out, window, steps, change in (([], "out-mimo-n", [1, 100], None, "+15.1%"),
                                             (["--policy", "megatron"], "out-mimo-now", [30, 45], range(30, 46),
                                              "+14.5%")):
        answer, md, _ = _audit(root, "../art/mimo/failing", "--passing", "../art/mimo/passing", "--repo", "../repo",
                               "--good", shas["revert"], "--bad", shas["container"], *args, out=out)
        failed = [c for c in answer["comparisons"] if not c["passed"]]
        assert [c["metric"] for c in failed] == ["iteration-time"]
        it = failed[0]
        assert it["window"] == window and it["golden_median"] == pytest.approx(med(MIMO_OLD, steps), abs=1e-9) \
            and it["actual_median"] == pytest.approx(med(MIMO_NEW, steps), abs=1e-9)
        assert change in answer["final_answer"]["summary"]
        assert answer["final_answer"]["verdict"] == "gating_policy_issue"
        assert answer["commits"][0]["sha"] == shas["container"]
        passed = {c["metric"] for c in answer["comparisons"] if c["passed"]}
        assert {"lm loss", "num-zeros", "mem-allocated-bytes", "mem-max-allocated-bytes"} <= passed
        assert "passing run passes the same gate (7/7 checks pass" in md
    assert med(MIMO_NEW, range(30, 46)) / med(MIMO_OLD, range(30, 46)) - 1 == pytest.approx(0.145, abs=0.001)
    ci = next(s for s in answer["source_refs"] if s["kind"] == "ci_log")
    assert ci["path"] == "../art/mimo/failing/job.log"
    lines = {f["line"] for f in answer["extracted_facts"] if f["source_ref"] == ci["id"]}
    text = (root / "art/mimo/failing/job.log").read_text().splitlines()
    fail_line = next(i for i, t in enumerate(text, 1) if "Approximate comparison of iteration-time: FAILED" in t)
    assert fail_line in lines


def test_oom_is_infrastructure_not_golden_mismatch_and_no_repo_is_said(world) -> None:
    root, _ = world
    answer, _, _ = _audit(root, "../art/oom/failing", "--passing", "../art/oom/passing", out="out-oom")
    fa = answer["final_answer"]
    assert (fa["verdict"], fa["category"], fa["first_bad_step"]) == ("infrastructure_failure", "oom", 37)
    assert answer["validation"]["all_passed"], answer["validation"]
    assert any("--repo" in n for n in fa["needs_more_data"])
    assert answer["commits"] == []
    oom = [f for f in answer["extracted_facts"] if "out of memory" in (f["quote"] or "").lower()]
    assert oom and oom[0]["line"] == 38 + 2 + 5  # 2 header lines, 37 iterations, 5 traceback lines before it


def test_a_failure_of_the_run_gets_diagnoses_fix_with_the_commit_to_look_at(world) -> None:
    # the same log, the same advice: audit names the commit, but the fix for an OOM is diagnose's
    root, shas = world
    answer, _, _ = _audit(root, "../art/oom/failing", "--passing", "../art/oom/passing", "--repo", "../repo",
                          "--good", shas["docs"], "--bad", shas["container"], out="out-oom-repo")
    fa = answer["final_answer"]
    assert fa["verdict"] == "infrastructure_failure" and answer["commits"]
    (root / "out-oom-diag").mkdir(exist_ok=True)
    run_cli("diagnose", "../art/oom/failing", "-o", ".", cwd=root / "out-oom-diag")
    diagnosed = json.loads((root / "out-oom-diag" / "answer.json").read_text())["final_answer"]["root_causes"][0]
    fix = fa["root_causes"][0]["fix"]
    assert fix.startswith(diagnosed["fix"].rstrip(". ")), (fix, diagnosed["fix"])
    assert f"The first commit to look at is {answer['commits'][0]['sha'][:10]}" in fix
    assert fa["quick_fixes"][0] == fix


def test_golden_and_model_config_given_explicitly_without_repo(world) -> None:
    root, _ = world
    (root / "g.json").write_text(MIMO_OLD.read_text())
    (root / "model_config.yaml").write_text((MIMO_OLD.parents[1] / "model_config.yaml").read_text())
    answer, _, _ = _audit(root, "../art/mimo/failing", "--golden", "../g.json", "--model-config",
                          "../model_config.yaml", out="out-explicit")
    assert answer["final_answer"]["verdict"] == "gating_policy_issue"
    assert any(s["path"] == "../g.json" for s in answer["source_refs"])
    assert any("--repo" in n for n in answer["final_answer"]["needs_more_data"])
    # without the model config the gate's default METRICS (lm loss, num-zeros) apply: those pass
    answer, _, _ = _audit(root, "../art/mimo/failing", "--golden", "../g.json", out="out-explicit2")
    assert answer["final_answer"]["verdict"] == "pass"
    assert {c["metric"] for c in answer["comparisons"]} == {"lm loss", "num-zeros"}


def test_archive_input_and_bad_inputs(world, tmp_path: Path) -> None:
    root, shas = world
    import zipfile

    z = root / "art" / "drift.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for f in (root / "art/drift/failing").iterdir():
            zf.write(f, f"failing/{f.name}")
    answer, _, _ = _audit(root, "../art/drift.zip", "--repo", "../repo", "--good", shas["revert"], "--bad",
                          shas["container"], out="out-zip")
    assert answer["final_answer"]["verdict"] == "numerical_drift"
    assert any(s["path"] == "../art/drift.zip!failing/train.log" for s in answer["source_refs"])
    _no_leaks(root, "out-zip")
    for args, needle in ((["nope.log"], "nope.log: no such file"),
                         (["../art/drift/failing", "--repo", "../repo", "--good", "--output=/x"], "not a valid revision"),
                         (["../art/drift/failing", "--repo", str(tmp_path)], "not a git repository"),
                         ([], "give the failing run")):
        p = run_cli("audit", *args, cwd=root / "out-zip")
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1


def test_through_fake_github_and_gitlab_with_a_failing_download(world, monkeypatch) -> None:
    from fakeapi import FakeCI, zip_bytes

    root, shas = world
    fail = root / "art/mimo/failing"
    with FakeCI(TOKEN) as ci:
        ci.require_token = True
        ci.github_run("NVIDIA", "Megatron-LM", 42, {
            7: ("mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing", "failure", (fail / "job.log").read_bytes())},
            {"actual-values": zip_bytes({"actual_values.json": (fail / "actual_values.json").read_bytes()}),
             "tensorboard": b"never served"}, expired=("old-logs",))
        ci.missing.add("/blobs/artifact-2.zip")  # the tensorboard artifact fails to download
        ci.gitlab_job("adlr/megatron-lm", 99, b"Running pytest checks against golden values\n", None)
        import os

        env = {**os.environ, "GITHUB_TOKEN": TOKEN, "GITLAB_TOKEN": "glpat-abcdefghijklmnopqrstuvwxyz"}
        import subprocess

        out = root / "out-api"
        out.mkdir(exist_ok=True)
        p = subprocess.run([sys.executable, "-m", "trainaudit", "audit", "--github",
                            f"{ci.url}/NVIDIA/Megatron-LM/actions/runs/42", "--github-api-url", ci.url,
                            "--gitlab", f"{ci.url}/adlr/megatron-lm/-/jobs/99",
                            "--repo", "../repo", "--good", shas["revert"], "--bad", shas["container"], "--find-fix",
                            "-o", "."], capture_output=True, text=True, cwd=out, env=env, timeout=300)
    assert p.returncode == 1, p.stderr  # the audit completed and the gate failed
    answer = json.loads((out / "answer.json").read_text())
    fa = answer["final_answer"]
    assert fa["verdict"] == "gating_policy_issue" and answer["commits"][0]["sha"] == shas["container"]
    assert answer["validation"]["all_passed"]
    missing = " ".join(fa["needs_more_data"])
    assert "tensorboard.zip" in missing and "HTTP 404" in missing and "old-logs: expired" in missing
    assert "missing:" in p.stdout
    paths = {s["path"] for s in answer["source_refs"]}
    assert any(x.endswith("artifact/actual-values.zip!actual_values.json") for x in paths), paths
    _no_leaks(root, "out-api", TOKEN, "glpat-abcdefghijklmnopqrstuvwxyz", "127.0.0.1:0")


def test_fail_on_gates_a_ci_step(world) -> None:
    """As in the other commands: by default a failing verdict exits 1; ``--fail-on never`` lets the
    step pass whatever was found; ``--fail-on SEVERITY`` exits 1 only when a finding reaches it."""
    root, shas = world
    base = ["audit", "../art/regression/failing", "--repo", "../repo", "--good", shas["docs"], "--bad", shas["model"],
            "-o", "."]
    (root / "out-failon").mkdir()
    codes = {}
    for opt in ([], ["--fail-on", "never"], ["--fail-on", "low"]):
        p = run_cli(*base, *opt, cwd=root / "out-failon")
        codes[" ".join(opt)] = p.returncode
        assert p.returncode in (0, 1), p.stderr
    severities = {f["severity"] for f in json.loads((root / "out-failon" / "answer.json").read_text())["findings"]}
    assert severities
    assert codes == {"": 1, "--fail-on never": 0, "--fail-on low": 1}
