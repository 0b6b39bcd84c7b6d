"""What a user touches every day, through the real console entry point: where reports go (never
overwritten silently), exit codes, the terminal output at 80 columns, the progress bar, and
evidence that stays text and stays in its own file."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

from shared_data import REPO, run_cli, sample_block, write_lines

from trainaudit.answer.validate import validate_file

EXAMPLE = REPO / "examples" / "nan-after-lr-jump"
MIMO = REPO / "tests" / "fixtures" / "megatron" / "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
FINDING = re.compile(r"^\S+: (TA|MON)\d{3} \[(critical|high|medium|low|info)\] \S")
ANSI = "\x1b["


def _healthy_log(path: Path, n: int = 60) -> Path:
    rows = [{"step": s, "loss": 3.0 - 0.02 * s, "lr": 1e-4} for s in range(1, n + 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _nan_log(path: Path, first_nan: int = 40) -> Path:
    rows = [{"step": s, "loss": 3.0 - 0.02 * s if s < first_nan else "nan", "lr": 1e-4} for s in range(1, 61)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_same_commands_twice_in_one_folder_give_two_reports(tmp_path: Path) -> None:
    log = _nan_log(tmp_path / "train.jsonl")
    golden = MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
    actual = MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"
    for _ in range(2):
        assert run_cli("diagnose", log.name, "-q", cwd=tmp_path).returncode == 1
        assert run_cli("compare", "--golden", str(golden), str(actual), "--model-config", str(MIMO / "model_config.yaml"),
                       "-q", cwd=tmp_path).returncode == 1
    out = tmp_path / "trainaudit-out"
    assert sorted(p.name for p in out.iterdir()) == ["compare", "compare-2", "diagnose", "diagnose-2"]
    for d in out.iterdir():
        answer, validation = validate_file(d / "answer.json")
        assert answer is not None and validation.all_passed
        assert answer.task == d.name.split("-")[0]
    # the closing line says where each report went
    r = run_cli("diagnose", log.name, "-q", cwd=tmp_path)
    assert r.stdout.rstrip().endswith(" in trainaudit-out/diagnose-3")


def test_an_explicit_folder_is_replaced_whole_and_said_so(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    run_cli("diagnose", str(EXAMPLE), "-o", str(out), "--html", "-q")
    before = {p.name for p in (out / "plots").iterdir()}
    assert len(before) >= 2 and (out / "report.html").is_file()
    r = run_cli("diagnose", str(_nan_log(tmp_path / "other.jsonl")), "-o", str(out), "-q")
    assert r.returncode == 1
    assert r.stderr.startswith("trainaudit: note: replaced the earlier report in ") and "/rep" in r.stderr
    after = {p.name for p in (out / "plots").iterdir()}
    assert after == {"loss.png"}  # the first report's plots are gone, not mixed in
    assert not (out / "report.html").exists()  # nor its HTML page
    assert json.loads((out / "answer.json").read_text())["source_refs"][0]["path"].endswith("other.jsonl")


def test_exit_codes_are_the_same_on_every_command(tmp_path: Path) -> None:
    healthy = _healthy_log(tmp_path / "ok.jsonl")
    sick = _nan_log(tmp_path / "nan.jsonl")
    o = ["-o", str(tmp_path / "o"), "-q"]
    assert run_cli("diagnose", str(healthy), *o).returncode == 0
    assert run_cli("diagnose", str(sick), *o).returncode == 1
    assert run_cli("diagnose", str(sick), *o, "--fail-on", "never").returncode == 0
    assert run_cli("diagnose", str(sick), *o, "--fail-on", "critical").returncode == 1
    golden = MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
    cmp = ["compare", "--golden", str(golden), "--model-config", str(MIMO / "model_config.yaml"), *o]
    assert run_cli(*cmp, str(golden)).returncode == 0  # a run against itself passes
    failing = [*cmp, str(MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json")]
    assert run_cli(*failing).returncode == 1
    assert run_cli(*failing, "--fail-on", "high").returncode == 0  # its only finding is medium
    audit = ["audit", str(REPO / "examples" / "audit-demo" / "failing"), *o]
    assert run_cli(*audit).returncode == 1
    assert run_cli(*audit, "--fail-on", "never").returncode == 0
    for args in (["diagnose", str(tmp_path / "missing.log")], ["compare", str(healthy)], ["rules", "TA999"],
                 ["diagnose", str(healthy), "--fail-on", "sometimes"]):
        r = run_cli(*args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (args, r.stderr)


def test_finding_lines_are_whole_and_prose_wraps_at_80_columns(tmp_path: Path) -> None:
    """As Ruff: ``path:line: CODE [severity] message`` with the full path and the full message,
    never cut, on a pipe and at any width (the terminal wraps it); the prose wraps at words."""
    run = tmp_path / "some" / "deeply" / "nested" / "experiment-folder" / "nan-after-lr-jump"
    shutil.copytree(EXAMPLE, run)
    for cols in ("40", "80"):
        r = subprocess.run([sys.executable, "-m", "trainaudit", "diagnose", str(run.relative_to(tmp_path)), "-o", "o"],
                           capture_output=True, text=True, env={**os.environ, "COLUMNS": cols}, timeout=300,
                           cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        lines = r.stdout.splitlines()
        assert ANSI not in r.stdout and "…" not in r.stdout and " ..." not in r.stdout  # colour only on a terminal
        report = json.loads((tmp_path / "o" / "answer.json").read_text())
        paths = {s["id"]: s["path"] for s in report["source_refs"]}
        findings = [ln for ln in lines if FINDING.match(ln)]
        assert len(findings) == len(report["findings"]) >= 4
        for d in report["findings"]:
            facts = {f["id"]: f for f in report["extracted_facts"]}
            cited = [facts[i] for i in d["evidence"] if i in facts]
            # the line of the finding's own step when its evidence quotes it, else its first quoted line
            at_step = [f for f in cited if f.get("step") == d["first_bad_step"] and f.get("line")]
            quoted = at_step or [f for f in cited if f.get("line")] or cited
            where = paths[quoted[0]["source_ref"]] + (f":{quoted[0]['line']}" if quoted[0].get("line") else "")
            if d["rule"] == "TA204":  # "grad_norm jumps 76.9x at step 121": the line of step 121, not 120's
                assert where.endswith("metrics.jsonl:121"), where
            whole = f"{where}: {d['rule']} [{d['severity']}] {d['message']}"
            assert whole in findings, (whole, findings)
        assert any(len(ln) > int(cols) for ln in findings)  # a long one is not cut to the width
        assert findings[0].startswith("some/deeply/nested/experiment-folder/nan-after-lr-jump/train.log:")
        prose = [ln for ln in lines if ln not in findings and not ln.startswith(("unhealthy: ", "UNHEALTHY "))]
        assert all(len(ln) <= int(cols) for ln in prose), [ln for ln in prose if len(ln) > int(cols)]
        assert not re.search(r"\w-$", "\n".join(prose), re.M)  # no word split across lines
        assert re.match(r"UNHEALTHY nan_inf from step \d+ \(confidence 0\.\d\d\)$", lines[lines.index(findings[-1]) + 2])
        n = len(report["findings"])
        assert lines[-1] == f"unhealthy: {n} findings (2 critical, 1 high, 1 medium, 1 low) in o"
        # the summary is the whole sentence of answer.json, wrapped, never shortened
        summary = " ".join(lines[lines.index(findings[-1]) + 3:]).split(" fix: ")[0]
        assert " ".join(report["final_answer"]["summary"].split()) in " ".join(summary.split())
    md = (tmp_path / "o" / "answer.md").read_text(encoding="utf-8")
    assert "…" not in md and " ..." not in md.split("<details>")[0]
    quiet = run_cli("diagnose", str(EXAMPLE), "-o", str(tmp_path / "o"), "-q")
    assert quiet.stdout.count("\n") == 1 and quiet.stdout.startswith(f"unhealthy: {n} findings")
    verbose = run_cli("diagnose", str(EXAMPLE), "-o", str(tmp_path / "o"), "-v").stdout
    assert "verify: " in verbose and "   fix: " in verbose
    healthy = run_cli("diagnose", str(_healthy_log(tmp_path / "ok.jsonl")), "-o", str(tmp_path / "h")).stdout
    assert healthy.splitlines()[0] == "HEALTHY" and "healthy: no findings" in healthy  # never "HEALTHY healthy"


def test_a_failing_gate_says_what_decided_it_first(tmp_path: Path) -> None:
    r = run_cli("compare", "--golden", str(MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"),
                str(MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"),
                "--model-config", str(MIMO / "model_config.yaml"), "-o", "o", cwd=tmp_path)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("FAIL iteration-time approximate: median +14.5% over steps 30-45")
    assert not [ln for ln in lines if ln.startswith("PASS ")]  # passing checks: counted, shown with -v
    assert lines[-1].startswith("gating_policy_issue: 1 medium finding, 1/7 checks failed in ")
    assert lines[0].endswith("(0.90419 vs 0.78978, rtol 0.05)")  # whole, not cut at 80 columns
    verbose = run_cli("compare", "--golden", str(MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"),
                      str(MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"),
                      "--model-config", str(MIMO / "model_config.yaml"), "-o", "o", "-v", cwd=tmp_path).stdout
    assert "PASS lm loss exact: 0/100 steps outside rtol 0 (0 allowed)" in verbose.splitlines()


def test_root_causes_on_the_terminal_name_their_severity_and_confidence(tmp_path: Path) -> None:
    r = run_cli("diagnose", str(EXAMPLE), "-o", str(tmp_path / "o"), "-v")
    causes = [ln for ln in r.stdout.splitlines() if re.match(r"^\d+\. \[", ln)]
    assert causes and re.match(r"1\. \[critical\] nan_inf \(confidence 0\.\d\d\): ", causes[0])


def test_rules_json_and_list(tmp_path: Path) -> None:
    r = run_cli("rules", "--json")
    rules = json.loads(r.stdout)
    by_id = {x["id"]: x for x in rules}
    assert by_id["TA102"]["thresholds"]["window"] == 10 and by_id["MON101"]["scope"] == "monitor"
    one = json.loads(run_cli("rules", "TA102", "--json").stdout)
    assert one["name"] == "loss-spike" and "Fix:" in one["doc"]
    listing = run_cli("rules").stdout.splitlines()
    assert all(len(ln) <= 80 for ln in listing) and len(listing) == len(rules) + 1


def test_watch_without_any_step_says_so(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "empty.log", ["starting the job", "loading the data"])
    r = run_cli("watch", str(log), "--idle-timeout", "0.5", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    assert "no step logged yet" in r.stdout and "last step None" not in r.stdout


def _pty(args: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run the CLI on a pseudo-terminal (stdout and stderr), as a user's shell would."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its stdout and stderr
        os.chdir(cwd)
        os.environ["COLUMNS"] = "100"
        os.execv(sys.executable, [sys.executable, "-m", "trainaudit", *args])
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), bytes(out)


def test_a_progress_bar_on_a_terminal_only_for_big_inputs(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_megatron_log.py"), str(big), "--size", "6M"],
                   check=True, capture_output=True)
    code, shown = _pty(["diagnose", "big.log", "-o", "o"], tmp_path)
    size = f"/{big.stat().st_size / 1e6:.1f} MB".encode()
    assert code == 1 and b"reading" in shown and size in shown  # rich's DownloadColumn: done/total MB
    assert ANSI.encode() in shown  # colours on a terminal
    assert b"\r\x1b[2Kreading" in shown  # the bar redraws in place (its cursor controls reach the terminal)
    piped = run_cli("diagnose", "big.log", "-o", "o", cwd=tmp_path)
    assert "reading" not in piped.stderr and ANSI not in piped.stdout + piped.stderr
    small = _healthy_log(tmp_path / "ok.jsonl")
    code, shown = _pty(["diagnose", small.name, "-o", "s"], tmp_path)
    assert code == 0 and b"reading" not in shown


def test_binary_sources_are_described_never_quoted(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run_cli("diagnose", str(EXAMPLE), "-o", str(out), "-q")
    answer = json.loads((out / "answer.json").read_text())
    tb = {s["id"] for s in answer["source_refs"] if s["kind"] == "tensorboard"}
    facts = [f for f in answer["extracted_facts"] if f["source_ref"] in tb]
    assert facts and all(f.get("quote") is None and f.get("line") is None for f in facts)
    assert all("(record " in f["statement"] for f in facts if f.get("step") is not None and f.get("values") is None)
    md = (out / "answer.md").read_text(encoding="utf-8")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]", md)


def test_a_finding_quotes_the_file_its_step_comes_from(tmp_path: Path) -> None:
    """An OOM in a log without steps, beside a metrics file that ends at step 60: the OOM is placed
    after step 60, and the report quotes metrics.jsonl's step-60 line beside stderr's OOM line, so
    the step belongs to a source the finding quotes (a reader sees where it comes from)."""
    run = tmp_path / "run"
    run.mkdir()
    _healthy_log(run / "metrics.jsonl")
    write_lines(run / "stderr.log", sample_block("error_signatures.txt", "murong-xu/CADS/issues/4"))
    r = run_cli("diagnose", str(run), "--json", "-o", str(tmp_path / "o"))
    answer = json.loads(r.stdout)
    assert answer["final_answer"]["category"] == "oom"
    src = {s["id"]: s["path"] for s in answer["source_refs"]}
    facts = {f["id"]: f for f in answer["extracted_facts"]}
    for finding in answer["findings"]:
        if finding["first_bad_step"] is None:
            continue
        quoted = [facts[e] for e in finding["evidence"] if e in facts]
        at_step = [f for f in quoted if f.get("step") == finding["first_bad_step"] and f.get("line")]
        assert at_step, finding  # its step is quoted from the file it comes from
    oom = next(f for f in answer["findings"] if f["category"] == "oom")
    quoted = {src[facts[e]["source_ref"]].rsplit("/", 1)[-1]: facts[e] for e in oom["evidence"] if e in facts}
    assert oom["first_bad_step"] == 60 and set(quoted) == {"stderr.log", "metrics.jsonl"}
    assert quoted["metrics.jsonl"]["line"] == 60 and '"step": 60' in quoted["metrics.jsonl"]["quote"]


def test_the_audit_spinner_redraws_one_line_on_a_terminal(tmp_path: Path) -> None:
    """Each frame of the spinner starts with "\\r" and erase-line and the last one is erased before
    the report, so a real terminal shows one moving line and then the report (not frames run
    together or left on screen)."""
    demo = REPO / "examples" / "audit-demo"
    code, shown = _pty(["audit", str(demo / "failing"), "--passing", str(demo / "passing"), "-o", "o"], tmp_path)
    assert code == 1, shown[-400:]
    hide, unhide = b"\x1b[?25l", b"\x1b[?25h"  # rich hides the cursor while the spinner runs
    assert shown.startswith(hide) and unhide in shown
    spinner, report = shown[len(hide):].split(unhide, 1)
    frames = [re.sub(rb"\x1b\[[0-9;]*m", b"", f) for f in spinner.rstrip(b"\r\n").split(b"\r\x1b[2K")]
    assert frames and all(re.fullmatch(rb"\S+ [a-z][a-z ',:./0-9-]*", f) for f in frames), frames
    assert report.startswith(b"\r\x1b[1A\x1b[2K")  # the spinner's line is erased before the report
    assert b"FAIL lm loss approximate" in report and b" checks failed in o" in report


def test_the_demo_prints_commands_that_run_as_printed(tmp_path: Path) -> None:
    """`make demo` installs trainaudit into a virtual environment that is not on PATH: each command
    the demo prints must run as printed from a shell whose PATH does not hold it."""
    r = subprocess.run([sys.executable, str(REPO / "examples" / "run_demo.py"), "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr
    shown = [ln[2:] for ln in r.stdout.splitlines() if ln.startswith("$ ") and "trainaudit" in ln
             and "make_audit_demo" not in ln]
    assert len(shown) == 2 and not any(c.startswith("trainaudit ") for c in shown), shown
    bare_path = {**os.environ, "PATH": "/usr/bin:/bin"}
    assert subprocess.run(["sh", "-c", "command -v trainaudit"], env=bare_path).returncode != 0
    for cmd in shown:
        again = subprocess.run(["sh", "-c", cmd + " -q"], capture_output=True, text=True, timeout=600, cwd=REPO,
                               env=bare_path)
        assert again.returncode in (0, 1) and "findings" in again.stdout, (cmd, again.stderr)
    if not shutil.which("trainaudit", path="/usr/bin:/bin"):
        assert "not on PATH" in r.stdout and "bin/activate" in r.stdout


def test_answer_md_has_one_shape_for_diagnose_compare_and_audit(tmp_path: Path) -> None:
    """A short top (what happened or failed, the evidence, what to do), then collapsible sections;
    no HTML entities in prose; a fact over many values lists them rather than quoting one line
    under a count."""
    demo = REPO / "examples" / "audit-demo"
    runs = {"diagnose": ["diagnose", str(EXAMPLE)],
            "compare": ["compare", str(demo / "passing" / "train.log"), str(demo / "failing" / "train.log")],
            "audit": ["audit", str(demo / "failing"), "--passing", str(demo / "passing")]}
    for task, args in runs.items():
        assert run_cli(*args, "-o", task, "-q", cwd=tmp_path).returncode == 1
        md = (tmp_path / task / "answer.md").read_text(encoding="utf-8")
        top = md.split("<details>")[0].strip().splitlines()
        assert top[0].startswith(f"# trainaudit {task}: **") and 3 <= len(top) <= 12, top
        assert any(ln.startswith("**What to do:** ") for ln in top), top
        assert md.count("<details>") >= 3 and "&gt;" not in md and "&amp;" not in md
    md = (tmp_path / "diagnose" / "answer.md").read_text(encoding="utf-8")
    assert "**What happened:** The run is unhealthy" in md and "0.05 -> 50" in md
    answer = json.loads((tmp_path / "diagnose" / "answer.json").read_text())
    many = [f for f in answer["extracted_facts"] if f.get("values") and len(f["values"]) > 1 and f.get("quote")]
    assert many
    for f in many:
        entry = next(ln for ln in md.splitlines() if ln.startswith(f'- <a id="{f["id"].lower()}"></a>'))
        assert f": {len(f['values'])} values" in entry and entry.count(", ") >= min(len(f["values"]), 12) - 1, entry
        assert f"(the line quoted: step {f['step']})" in entry


def test_every_chart_marks_the_headline_first_bad_step(tmp_path: Path) -> None:
    """The red line of each chart (PNG and HTML read charts.json) is the step the headline gives;
    a finding that starts later keeps its own marker."""
    assert run_cli("diagnose", str(EXAMPLE), "-o", "o", "-q", cwd=tmp_path).returncode == 1
    answer = json.loads((tmp_path / "o" / "answer.json").read_text())
    charts = json.loads((tmp_path / "o" / "charts.json").read_text())["charts"]
    first = answer["final_answer"]["first_bad_step"]
    assert first == 121 and charts and all(c["first_bad_step"] == first for c in charts)
    loss = next(c for c in charts if c["metric"] == "lm loss")
    assert [124, "TA101 from step 124"] in loss["markers"]
