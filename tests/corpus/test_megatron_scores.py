"""The Megatron-LM dev set keeps its scores, and a CI job log gives the same answer as the artifacts.

Floors are the counts reached when they were last raised (raise them when a change wins a case);
docs/accuracy.md shows the scores of the code that is here (``python tools/accuracy.py megatron``).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import accuracy
import megatron_repo
import pytest

from trainaudit.audit.pipeline import AuditOptions, run_audit
from trainaudit.answer.schema import Answer

DOC = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"

# out of 47 cases: 47 with a decided verdict, 41 whose label names a culprit (labels by the verdict
# convention of docs/answer.md: a repository change that moves the numbers is real_regression at any size)
VERDICT_FLOOR = 142
CULPRIT_FIRST_FLOOR = 135
CULPRIT_TOP3_FLOOR = 141


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[accuracy.MegatronRow]:
    return accuracy.score_megatron(tmp_path_factory.mktemp("megatron"))


def test_the_dev_set_keeps_its_shape() -> None:
    cases = megatron_repo.cases()
    assert len(cases) >= 40
    verdicts = {c.label["verdict"] for c in cases}
    assert {"real_regression", "numerical_drift", "gating_policy_issue", "pass"} <= verdicts
    for c in cases:
        assert c.label["sources"] and all(s.startswith("https://") for s in c.label["sources"])
        assert c.label["confidence"] in ("high", "medium", "low") and c.label["how"]


def test_verdicts_and_culprits_do_not_drop(rows: list[accuracy.MegatronRow]) -> None:
    v = [r for r in rows if r.scored_verdict]
    c = [r for r in rows if r.scored_culprit]
    wrong = [f"{r.case.id}: label {r.label['verdict']}, got {r.verdict} {r.error}" for r in v if not r.verdict_ok]
    assert sum(r.verdict_ok for r in v) >= VERDICT_FLOOR, wrong
    assert sum(r.verdict_ok for r in v) / len(v) >= 0.9, wrong
    ranks = {r.case.id: r.culprit_rank for r in c}
    assert sum(r.culprit_rank == 1 for r in c) >= CULPRIT_FIRST_FLOOR, ranks
    assert sum(r.culprit_rank is not None and r.culprit_rank <= accuracy.TOP for r in c) >= CULPRIT_TOP3_FLOOR, ranks
    assert sum(r.culprit_rank == 1 for r in c) / len(c) >= 0.7


def test_the_published_table_is_current(rows: list[accuracy.MegatronRow]) -> None:
    doc = DOC.read_text(encoding="utf-8")
    s = accuracy.megatron_summary(rows)
    for name, key in (("verdict", "verdict"), ("culprit first", "culprit_first"),
                      (f"culprit in the top {accuracy.TOP}", f"culprit_top{accuracy.TOP}")):
        m = re.search(rf"\| {name} \| (\d+)/(\d+) ", doc)
        assert m is not None, name
        assert int(m.group(1)) / int(m.group(2)) == pytest.approx(s[key]), "run `python tools/accuracy.py megatron`"


# -- the seed case: the MIMO VLM golden failure, on its real history ---------------------------------
SEED = "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing-5fe3f06658"
IMAGE_BUMP = "5fe3f06658b393283eafc32f039c3d0c2468a69f"  # 26.04 base image; regenerated 78 goldens


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "trainaudit", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_the_mimo_seed_case_names_the_image_bump(tmp_path: Path) -> None:
    """Golden written at 4e85d74ae9, failing run at 5fe3f06658, only iteration-time out of its band:
    a gating-policy issue, and the image bump that regenerated the goldens in the same commit is the
    commit named, first, in answer.json, answer.md and the terminal."""
    case = next(c for c in megatron_repo.cases() if c.id == SEED)
    assert case.label["culprit"] == IMAGE_BUMP and len(case.commits) >= 150
    repo = megatron_repo.rebuild(case, tmp_path / "repo")
    art = megatron_repo.failing_artifacts(case, tmp_path / "artifacts")
    out = tmp_path / "out"
    out.mkdir()
    p = _cli("audit", str(art), "--repo", str(repo.path), "--good", repo.good, "--bad", repo.bad, "-o", ".", cwd=out)
    assert p.returncode == 1, p.stderr
    answer = json.loads((out / "answer.json").read_text(encoding="utf-8"))
    fa = answer["final_answer"]
    assert (fa["verdict"], fa["category"]) == ("gating_policy_issue", "throughput_regression"), fa["summary"]
    assert [c["metric"] for c in answer["comparisons"] if not c["passed"]] == ["iteration-time"]
    first = answer["commits"][0]
    assert repo.original(first["sha"]) == IMAGE_BUMP and first["role"] == "environment_change"
    cul = fa["culprit"]
    assert (cul["sha"], cul["role"]) == (first["sha"], first["role"])
    assert cul["runner_up"]["sha"] == answer["commits"][1]["sha"] and cul["confidence"] > cul["runner_up"]["confidence"]
    assert first["relevance"] == pytest.approx(cul["confidence"], abs=1e-3)
    assert "base image" in first["reason"] and answer["validation"]["all_passed"], answer["validation"]
    md = (out / "answer.md").read_text(encoding="utf-8")
    assert f"**Culprit:** `{first['sha'][:10]}`" in md and f"probability {cul['confidence']:.2f}" in md
    assert first["sha"][:10] in p.stdout and "environment_change:" in p.stdout


def test_an_empty_golden_is_a_broken_gate(tmp_path: Path) -> None:
    case = next(c for c in megatron_repo.cases() if c.id == SEED)
    repo = megatron_repo.rebuild(case, tmp_path / "repo")
    art = megatron_repo.failing_artifacts(case, tmp_path / "artifacts")
    for name, text in (("empty.json", "{}"), ("cut.json", '{"lm loss": {"start_step": 1, "val')):
        golden = tmp_path / name
        golden.write_text(text, encoding="utf-8")
        answer, _, _ = run_audit(AuditOptions(inputs=[str(art)], repo=str(repo.path), good=repo.good, bad=repo.bad,
                                              golden=str(golden)))
        fa = answer.final_answer
        assert (fa.verdict, fa.category) == ("gating_policy_issue", "golden_mismatch"), (name, fa.summary)
        assert "cannot read the golden" in fa.root_causes[0].issue


# -- the CI job log as input -----------------------------------------------------------------------
def _log_holds_the_run(case: megatron_repo.Case) -> bool:
    """A job log can print what the artifact holds: the golden is in the step -> value layout of
    the GitHub Actions era, and the run's iteration time is known at every step the log prints
    (a timer sampled into TensorBoard leaves "nan" steps no faithful log can reproduce), and every
    failing metric is in the golden."""
    golden = json.loads((case.path / "golden.json").read_text(encoding="utf-8"))
    if any(isinstance(b, dict) and isinstance(b.get("values"), list) for b in golden.values()):
        return False
    actual = json.loads(case.text("actual.json") or "{}")
    if set(case.label.get("failing_metrics") or []) - set(golden):
        return False  # a metric the golden lacks: the comparator stops before it prints a check line
    it = list((actual.get("iteration-time") or {}).get("values", {}).values())
    return all(not isinstance(v, str) and math.isfinite(v) for v in it[1:])


def _picked() -> list[megatron_repo.Case]:
    """Two cases of each labelled verdict whose run a job log can hold."""
    out: list[megatron_repo.Case] = []
    for c in megatron_repo.cases():
        if _log_holds_the_run(c) and sum(o.label["verdict"] == c.label["verdict"] for o in out) < 2:
            out.append(c)
    return out


def _answer(a: Answer) -> tuple[object, ...]:
    return a.final_answer.verdict, a.final_answer.category, [c.sha for c in a.commits[:3]]


def _failed(a: Answer) -> list[tuple[object, ...]]:
    """The failing checks and their numbers; a log prints iteration time in ms to one decimal, so
    medians agree to that precision (1e-4 relative)."""
    def near(x: float | None) -> object:
        return x if x is None else pytest.approx(x, rel=1e-4)

    return sorted(((c.metric, c.check, c.n_failing, c.n_steps, near(c.max_rel_err), near(c.golden_median),
                    near(c.actual_median)) for c in a.comparisons if not c.passed), key=lambda t: (t[0], t[1]))


@pytest.mark.parametrize("case", _picked(), ids=lambda c: c.id[:60])
def test_a_job_log_gives_the_same_answer_as_the_artifacts(case: megatron_repo.Case, tmp_path: Path) -> None:
    repo = megatron_repo.rebuild(case, tmp_path / "repo")
    art = megatron_repo.failing_artifacts(case, tmp_path / "artifacts")
    opts = {"repo": str(repo.path), "good": repo.good, "bad": repo.bad}
    from_art, _, _ = run_audit(AuditOptions(inputs=[str(art)], **opts))
    # the job log of the same failure: the training output and the comparator's own lines
    values = next(art.iterdir())
    gate = megatron_repo.gate_output(case, values, [(c.check, c.metric, c.passed) for c in from_art.comparisons])
    log = tmp_path / "job" / "job.log"
    log.parent.mkdir()
    log.write_text(megatron_repo.job_log(case, repo.bad, values, gate,
                                         failed=not all(c.passed for c in from_art.comparisons)), encoding="utf-8")
    from_log, _, _ = run_audit(AuditOptions(inputs=[str(log)], **opts))
    assert _answer(from_log) == _answer(from_art)
    assert _failed(from_log) == _failed(from_art)
    assert any(s.kind == "ci_log" for s in from_log.source_refs)
