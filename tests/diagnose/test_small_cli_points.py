"""The small things a new user meets in the first minutes, through the real console entry point:
a typo in a command, a file name given to -o, rule selection and plots from the command line, what
a golden file looks like, what to do after an input that holds nothing, the extras hint that a
shell accepts, the severity `rules` lists against the one findings carry, closing lines that fit."""

from __future__ import annotations

import json
import math
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="module")
def corpus_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """answer.json of `diagnose` on every run of the labelled log corpus (as a user runs it)."""
    tmp = tmp_path_factory.mktemp("corpus")
    out: dict[str, dict[str, Any]] = {}
    for case in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        r = run_cli("diagnose", str(case), "-o", str(tmp / case.name), "-q", "--no-plots")
        if r.returncode in (0, 1):  # 2: an input the corpus keeps for its error message
            out[case.name] = json.loads((tmp / case.name / "answer.json").read_text())
    assert len(out) >= 150
    return out


def test_rules_lists_every_severity_its_findings_carry(corpus_answers: dict[str, dict[str, Any]]) -> None:
    listed = {r["id"]: r["severities"] for r in json.loads(run_cli("rules", "--json").stdout)}
    order = ["info", "low", "medium", "high", "critical"]

    def within(sev: str, span: str) -> bool:
        lo, _, hi = span.partition("-")
        return order.index(lo) <= order.index(sev) <= order.index(hi or lo)

    seen: dict[tuple[str, str], str] = {}
    for name, answer in corpus_answers.items():
        for d in answer["findings"]:
            if "weighed as within normal" in d["message"]:
                continue  # the fitted decision's note on a run it calls healthy, not the rule's severity
            seen.setdefault((d["rule"], d["severity"]), name)
    assert any("-" in listed.get(rid, "") and sev != listed[rid].split("-")[0] for rid, sev in seen)
    wrong = {k: (listed.get(k[0]), case) for k, case in seen.items()
             if k[0] in listed and not within(k[1], listed[k[0]])}
    assert not wrong, wrong
    assert listed["TA301"] == "medium-high"
    assert re.search(r"^TA301  medium-high ", run_cli("rules").stdout, re.M)


# A number in prose: 1.306, 7.538e+18, 76.9x, +45%; not one inside a word, a path or a date.
# (a number's exponent, "e+28" of "-5.777e+28", is no number of its own)
PROSE_NUMBER = re.compile(r"(?<![\w.:/+-])(\d+(?:\.\d+)?(?:e[-+]?\d+)?)(x|%)?(?![\w.:/-]*\w)")
ANY_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _evidence_numbers(ids: list[str], answer: dict[str, Any]) -> list[float]:
    """Every number the cited evidence holds: facts (value, step, line, the values and steps of an
    excerpt and their median, the numbers of the quoted line), calculations (result and inputs)."""
    facts = {f["id"]: f for f in answer["extracted_facts"]}
    calcs = {c["id"]: c for c in answer["calculations"]}
    finds = {d["id"]: d["evidence"] for d in answer["findings"]}
    out: list[float] = []
    stack, seen = list(ids), set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i in facts:
            f = facts[i]
            nums = [f.get(k) for k in ("value", "step", "line")] + (f.get("steps") or [])
            vals = [v for v in f.get("values") or [] if isinstance(v, int | float)]
            if vals:
                nums += vals + [statistics.median(vals)]
            out += [float(v) for v in nums if isinstance(v, int | float) and not isinstance(v, bool)]
            out += [float(t) for t in ANY_NUMBER.findall(f"{f.get('quote') or ''} {f['statement']}")]
        if i in calcs:
            if isinstance(calcs[i]["result"], int | float):
                out.append(float(calcs[i]["result"]))
            stack += calcs[i]["inputs"]
        stack += finds.get(i, [])
    return [x for x in out if math.isfinite(x)]


def _shown_as(token: str, x: float, candidates: list[float]) -> bool:
    """``token`` is one of ``candidates`` as prose rounds it (its decimals, or 3-4 significant digits)."""
    decimals = len(token.split(".")[1].split("e")[0]) if "." in token else 0
    tol = max(0.5 * 10 ** -decimals * 1.0001, abs(x) * 5e-3 if "e" in token or abs(x) >= 1000 else 0)
    return any(abs(c - x) <= tol for c in candidates)


# numbers the prose computes and shows with their formula: "ln(1000) = 6.908" (and its 1000 classes),
# "28 of 28 logged values"
SHOWN_WORK = re.compile(r"= ln\(\d+\)|ln\(\d+\) = [\d.]+|\d+ of \d+ logged values|\d+ being |guess over \d+ classes")


def _number_agrees(token: str, suffix: str, candidates: list[float]) -> bool:
    x = float(token)
    if not suffix and token.isdigit() and x < 20:
        return True  # small counts ("3 spikes", "2 of 2 values"): said by the finding, not quoted
    if _shown_as(token, x, candidates):
        return True
    ratios = [a / b for a in candidates for b in candidates if b]
    if suffix == "%":
        ratios = [100 * (r - 1) for r in ratios] + [100 * r for r in ratios]
    return bool(suffix) and _shown_as(token, x, ratios)


def test_every_number_in_the_prose_is_the_number_of_its_evidence(corpus_answers: dict[str, dict[str, Any]]) -> None:
    """Each finding's message, the root causes and the summary: every number they give is the
    value, step, ratio or calculation of the evidence they cite (as displayed, rounded)."""
    wrong: list[str] = []
    checked = 0
    for name, answer in corpus_answers.items():
        texts = [(d["message"], d["evidence"]) for d in answer["findings"]]
        fa = answer["final_answer"]
        cited = [i for rc in fa["root_causes"] for i in rc["evidence"]]
        texts += [(rc["issue"], rc["evidence"]) for rc in fa["root_causes"]]
        if fa["root_causes"]:
            texts.append((fa["summary"].split(" further problem(s): ")[0], cited))
        for text, ids in texts:
            numbers = _evidence_numbers(ids, answer)
            for token, suffix in PROSE_NUMBER.findall(SHOWN_WORK.sub(" ", text)):
                checked += 1
                if not _number_agrees(token, suffix, numbers):
                    wrong.append(f"{name}: {token}{suffix} in {text[:160]!r}")
    assert checked > 500
    assert not wrong, "\n".join(wrong[:40])


def test_the_summary_step_is_the_step_of_its_category(corpus_answers: dict[str, dict[str, Any]]) -> None:
    """"NaN/Inf values from step N": N is where the category's own findings start (the first NaN),
    an earlier first sign is named as such."""
    checked = 0
    for name, answer in corpus_answers.items():
        fa = answer["final_answer"]
        m = re.match(r"The run (?:is unhealthy|crashed): [^.]*? from step (\d+)( \(first sign at step (\d+)\))?\.",
                     fa["summary"])
        if m is None or not fa["root_causes"]:
            continue
        own = [d["first_bad_step"] for d in answer["findings"] if d["category"] == fa["category"]
               and d["first_bad_step"] is not None and d["id"] in fa["root_causes"][0]["evidence"]]
        if own:
            checked += 1
            assert int(m.group(1)) == min(own), (name, fa["summary"][:200], own)
            assert m.group(3) is None or int(m.group(3)) == fa["first_bad_step"] < int(m.group(1)), name
    assert checked >= 30


def test_closing_lines_fit_80_columns(tmp_path: Path) -> None:
    demo = REPO / "examples" / "audit-demo"
    r = run_cli("compare", str(demo / "passing" / "train.log"), str(demo / "failing" / "train.log"),
                "-o", "trainaudit-out/compare-2", cwd=tmp_path)
    last = r.stdout.splitlines()[-1]
    assert last.startswith(("real_regression: ", "numerical_drift: ", "inconclusive: ")) and len(last) <= 80, last
