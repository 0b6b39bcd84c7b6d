"""The small things a new user meets in the first minutes, through the real console entry point:
a typo in a command, a file name given to -o, rule selection and plots from the command line, what
a golden file looks like, what to do after an input that holds nothing, the extras hint that a
shell accepts, the severity `rules` lists against the one findings carry, closing lines that fit."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from shared_data import REPO, run_cli

EXAMPLE = REPO / "examples" / "nan-after-lr-jump"
CORPUS = REPO / "tests" / "corpus" / "logs"


def _one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr.strip()


def test_a_mistyped_command_says_which_one_was_meant() -> None:
    assert _one_line_error(run_cli("diagnos", "x")) == \
        "trainaudit: error: No such command 'diagnos'. Did you mean 'diagnose'?"
    assert "Did you mean 'compare'?" in _one_line_error(run_cli("comapre", "x"))
    assert _one_line_error(run_cli("frobnicate")).endswith("See `trainaudit --help`.")


def test_o_with_a_file_name_is_refused_instead_of_making_a_folder(tmp_path: Path) -> None:
    line = _one_line_error(run_cli("diagnose", str(EXAMPLE / "metrics.jsonl"), "-o", "report.md", cwd=tmp_path))
    assert "report.md looks like a file" in line and "-o report" in line
    assert not (tmp_path / "report.md").exists() and not (tmp_path / "trainaudit-out").exists()


def test_select_ignore_and_no_plots_on_the_command_line(tmp_path: Path) -> None:
    log = str(EXAMPLE / "metrics.jsonl")
    full = json.loads(run_cli("diagnose", log, "-o", str(tmp_path / "a"), "--json").stdout)
    rules = {d["rule"] for d in full["findings"]}
    assert {"TA101", "TA204", "TA206"} <= rules
    only = json.loads(run_cli("diagnose", log, "-o", str(tmp_path / "b"), "--json", "--select", "ta1").stdout)
    assert {d["rule"] for d in only["findings"]} == {r for r in rules if r.startswith("TA1")}
    less = json.loads(run_cli("diagnose", log, "-o", str(tmp_path / "c"), "--json", "--ignore", "TA206,TA103").stdout)
    assert {d["rule"] for d in less["findings"]} == rules - {"TA206", "TA103"}
    assert "TA206" not in {d["rule"] for d in less["findings"]}
    r = run_cli("diagnose", log, "-o", str(tmp_path / "d"), "--no-plots", "-q")
    assert r.returncode == 1 and (tmp_path / "d" / "answer.md").is_file() and not (tmp_path / "d" / "plots").exists()
    assert list((tmp_path / "a" / "plots").glob("*.png"))  # without the flag there are plots
    line = _one_line_error(run_cli("diagnose", log, "--select", "TA1011"))
    assert "TA1011 is no rule id nor the prefix of one (did you mean TA101?)" in line


def test_a_file_that_is_no_golden_file_says_what_one_looks_like(tmp_path: Path) -> None:
    pkg = tmp_path / "package.json"
    pkg.write_text(json.dumps({"name": "web", "version": "1.0.0"}))
    line = _one_line_error(run_cli("compare", "--golden", str(pkg), str(EXAMPLE / "metrics.jsonl")))
    assert "not a metric object" in line and '"start_step": 1' in line and '"values": {"1": ' in line


def test_inputs_with_nothing_to_analyse_say_what_to_give(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    line = _one_line_error(run_cli("diagnose", "empty", cwd=tmp_path))
    assert line.startswith("trainaudit: error: empty: directory contains no files") and "give the folder" in line
    (tmp_path / "notes.txt").write_text("hello\nworld\n")
    line = _one_line_error(run_cli("diagnose", "notes.txt", cwd=tmp_path))
    assert "no metrics or events found" in line and "trainaudit parse FILE" in line and "--format NAME" in line


def test_the_torch_extra_hint_is_a_command_a_shell_accepts(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("def build():\n    return None\n")
    blocked = ("import sys; sys.modules['torch'] = None; sys.argv = ['trainaudit', 'inspect', 'model.py:build']; "
               "from trainaudit.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    line = _one_line_error(r)
    cmd = line.split("needs torch: ", 1)[1]
    assert shlex.split(cmd) == ["pip", "install", "trainaudit[torch]"]  # quoted: zsh globs a bare [torch]
    assert cmd == "pip install 'trainaudit[torch]'"


def test_report_help_example_points_where_diagnose_writes(tmp_path: Path) -> None:
    help_text = run_cli("report", "--help").stdout
    example = re.search(r"trainaudit report (\S+answer\.json) -o report\.html", help_text)
    assert example is not None, help_text
    assert run_cli("diagnose", str(EXAMPLE / "metrics.jsonl"), "-q", cwd=tmp_path).returncode == 1
    assert (tmp_path / example.group(1)).is_file()
    assert run_cli("report", example.group(1), "-o", "report.html", cwd=tmp_path).returncode == 0


def test_rules_lists_every_severity_its_findings_carry(tmp_path: Path) -> None:
    listed = {r["id"]: r["severities"] for r in json.loads(run_cli("rules", "--json").stdout)}
    order = ["info", "low", "medium", "high", "critical"]

    def within(sev: str, span: str) -> bool:
        lo, _, hi = span.partition("-")
        return order.index(lo) <= order.index(sev) <= order.index(hi or lo)

    seen: dict[tuple[str, str], str] = {}
    runs = sorted(p for p in CORPUS.iterdir() if p.is_dir())
    for k, case in enumerate(runs):
        r = run_cli("diagnose", str(case), "-o", str(tmp_path / f"o{k}"), "-q", "--no-plots")
        if r.returncode not in (0, 1):
            continue  # an input the corpus keeps for its error message
        for d in json.loads((tmp_path / f"o{k}" / "answer.json").read_text())["findings"]:
            seen.setdefault((d["rule"], d["severity"]), case.name)
    assert any(sev != "info" and span.count("-") for (rid, sev), span in
               ((k, listed.get(k[0], "")) for k in seen))  # the corpus exercises the ranges
    wrong = {k: (listed.get(k[0]), case) for k, case in seen.items()
             if k[0] in listed and not within(k[1], listed[k[0]])}
    assert not wrong, wrong
    assert listed["TA301"] == "medium-high"
    assert re.search(r"^TA301  medium-high ", run_cli("rules").stdout, re.M)


def test_closing_lines_fit_80_columns(tmp_path: Path) -> None:
    demo = REPO / "examples" / "audit-demo"
    r = run_cli("compare", str(demo / "passing" / "train.log"), str(demo / "failing" / "train.log"),
                "-o", "trainaudit-out/compare-2", cwd=tmp_path)
    last = r.stdout.splitlines()[-1]
    assert last.startswith(("real_regression: ", "numerical_drift: ", "inconclusive: ")) and len(last) <= 80, last
