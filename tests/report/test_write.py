"""The report writer: answer.json validates after a round trip, answer.md quotes evidence, plots exist."""

from __future__ import annotations

import json
import math
from pathlib import Path

from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.charts import Band, Curve, PlotSpec
from trainaudit.answer.schema import FinalAnswer, RootCause
from trainaudit.answer.validate import validate_file
from trainaudit.answer.paths import display_path
from trainaudit.render.write import write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _answer():
    b = AnswerBuilder("diagnose")
    s = b.source("logs/train.log", "log", sha256="0" * 64)
    f1 = b.fact(s, "lm loss before the jump", metric="lm loss", step=40, value=2.0, line=40,
                quote=" iteration 40/ 100 | lm loss: 2.000000E+00 |")
    f2 = b.fact(s, "lm loss after the jump", metric="lm loss", step=41, value=9.0, line=41,
                quote=" iteration 41/ 100 | lm loss: 9.000000E+00 | url https://bob:hunter2secret@example.org/x")
    c1 = b.calc("relative jump", "(F2 - F1) / abs(F1)", [f1, f2], unit="ratio")
    d1 = b.finding(rule="TA102", category="loss_spike", severity="high", metric="lm loss", first_bad_step=41,
                   last_step=41, message="loss jumped 350 %", evidence=[f1, f2, c1], confidence=0.9)
    final = FinalAnswer(verdict="unhealthy", category="loss_spike", first_bad_step=41,
                        summary="The loss jumped by 350 % at step 41.",
                        root_causes=[RootCause(issue="loss spike at step 41", category="loss_spike", severity="high",
                                               evidence=[d1, c1], fix="lower the learning rate",
                                               expected_impact="no spike", verify="rerun and watch step 41",
                                               confidence=0.9)])
    return b, b.build(final)


def test_round_trip_validates_and_markdown_quotes_evidence(tmp_path: Path) -> None:
    _, answer = _answer()
    assert answer.validation.all_passed, answer.validation
    steps = list(range(1, 60))
    values = [2.0] * 40 + [9.0] + [math.nan] * 18
    spec = PlotSpec("lm loss", "lm loss", [Curve("train", steps, values)], first_bad_step=41,
                    band=Band("band", steps, [1.9] * 59, [2.1] * 59))
    paths = write_report(answer, tmp_path / "out", [spec])
    back, validation = validate_file(paths.json)
    assert back is not None and validation.all_passed, validation
    assert back.final_answer.first_bad_step == 41
    md = paths.markdown.read_text()
    assert "**unhealthy**" in md
    assert "`logs/train.log:41`" in md and "lm loss: 9.000000E+00" in md
    assert "lower the learning rate" in md
    assert "](plots/lm_loss.png)" in md
    png = paths.plots[0].read_bytes()
    assert png.startswith(PNG_MAGIC) and 5_000 < len(png) < 500_000
    # the password in the quoted URL is masked in both files
    for text in (md, paths.json.read_text()):
        assert "hunter2secret" not in text and "bob:***@example.org" in text


def test_tampered_answer_fails_the_right_checks(tmp_path: Path) -> None:
    _, answer = _answer()
    paths = write_report(answer, tmp_path)
    data = json.loads(paths.json.read_text())
    data["calculations"][0]["result"] = 4.0  # true value is 3.5
    data["findings"][0]["evidence"].append("F99")
    paths.json.write_text(json.dumps(data))
    _, validation = validate_file(paths.json)
    failed = {c.name for c in validation.checks if not c.passed}
    assert failed == {"calculations_recomputed", "evidence_ids_resolve"}
    data["final_answer"]["verdict"] = "maybe"
    paths.json.write_text(json.dumps(data))
    answer2, validation = validate_file(paths.json)
    assert answer2 is None and [c.name for c in validation.checks] == ["schema_valid"]
    assert not validation.all_passed


def test_display_path_never_leaks_the_machine_layout(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert display_path("logs/a.log") == "logs/a.log"
    assert display_path(str(tmp_path / "x" / "a.log")) == "x/a.log"
    assert display_path("/somewhere/deep/inside/run/a.log") == ".../run/a.log"


def test_paths_quoted_from_logs_are_evidence_but_this_machines_paths_are_leaks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    b = AnswerBuilder("diagnose")
    s = b.source("train.log", "log")
    b.fact(s, "last frame", quote='  File "/opt/megatron-lm/megatron/training.py", line 12, in train', line=3)
    ok = b.build(FinalAnswer(verdict="crash", category="crash", summary="crashed"))
    assert ok.validation.all_passed
    b.fact(s, "leak", quote=f"written to {tmp_path}/out/answer.json", line=4)
    bad = b.build(FinalAnswer(verdict="crash", category="crash", summary="crashed"))
    failed = [c for c in bad.validation.checks if not c.passed]
    assert [c.name for c in failed] == ["no_absolute_paths"] and str(tmp_path) in failed[0].detail


def test_root_cause_text_is_masked() -> None:
    b = AnswerBuilder("diagnose")
    answer = b.build(FinalAnswer(verdict="crash", category="crash", summary="crashed", root_causes=[RootCause(
        issue="RuntimeError: cannot reach https://u:s3cretpass@hub.example.org with hf_abcdefghijklmnopqrstuvwxyz0123456789",
        category="crash", severity="critical", fix="rotate token=abcdef123456", expected_impact="-", verify="-",
        confidence=0.5)]))
    text = answer.model_dump_json()
    assert "s3cretpass" not in text and "hf_abcdefghij" not in text and "abcdef123456" not in text
    assert answer.validation.all_passed


def test_plots_beyond_the_cap_are_noted_not_drawn(tmp_path: Path, monkeypatch) -> None:
    from trainaudit.render import write
    monkeypatch.setattr(write, "MAX_PLOTS", 3)
    _, answer = _answer()
    specs = [PlotSpec(f"m{i}", f"m{i}", [Curve("train", [1, 2, 3], [1.0, 2.0, 3.0])]) for i in range(5)]
    paths = write_report(answer, tmp_path / "out", specs)
    assert len(paths.plots) == 3 and len(list((tmp_path / "out" / "plots").glob("*.png"))) == 3
    assert any("2 more plot(s) not drawn" in n for n in paths.notes)
    charts = json.loads((tmp_path / "out" / "charts.json").read_text())
    assert len(charts["charts"]) == 5  # the HTML report still charts them all


def test_git_output_beyond_the_cap_is_left_unread(tmp_path: Path, monkeypatch) -> None:
    import subprocess

    from trainaudit.history import git as gitmod
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.org", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@example.org", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    for i in range(4):  # commit messages of 200 KB each
        subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-F", "-"], check=True, env=env,
                       input=(f"commit {i}\n\n" + "x" * 200_000).encode())
    monkeypatch.setattr(gitmod, "GIT_OUTPUT_BYTES", 300_000)
    r = gitmod.Repo(str(repo))
    commits, _ = r.commits(["HEAD"], max_count=10)
    assert 1 <= len(commits) <= 2  # what fit in the cap, parsed; the rest not read
    assert commits[0].title == "commit 3"
