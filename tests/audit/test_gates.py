"""The gate of the failing run's date against today's gate, and the golden parsed once per audit.

A real git repository whose ``--bad`` commit is dated 2026-05-10: Megatron-LM's comparator of that
day took the iteration-time median over every golden step (71223d53ba moved it to the steady-state
window 30-45 on 2026-05-27). A run whose iteration time is 25 % slower from step 51 on fails that
gate (the median over steps 1-100 moves by more than 5 %) and passes today's (steps 30-45 did not
move): the answer shows both. A run whose only change is in lm loss fails both gates the same way:
nothing extra is said.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "history"))
from gitrepo import commit, git
from stories import GPT_LOSS, GPT_ZEROS, STEPS

from shared_data import run_cli

CASE = "tests/functional_tests/test_cases/gpt/gpt3_release"
GOLDEN = f"{CASE}/golden_values_dev_dgx_h100.json"
CONFIG = f"{CASE}/model_config.yaml"
CONFIG_TEXT = ("ENV_VARS:\n  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0\nMODEL_ARGS:\n  --train-iters: 100\nTEST_TYPE: regular\n"
               "METRICS:\n  - \"iteration-time\"\n  - \"lm loss\"\n  - \"num-zeros\"\n")
ITER = {s: round(0.8 + 0.001 * (s % 5), 5) for s in STEPS}
SLOW_LATE = {s: round(v * (1.25 if s > 50 else 1.0), 5) for s, v in ITER.items()}
LOSS_UP = {s: round(v * (1.08 if s >= 40 else 1.0), 5) for s, v in GPT_LOSS.items()}


def values_json(loss: dict[int, float], zeros: dict[int, float], it: dict[int, float]) -> str:
    def block(vals: dict[int, float]) -> dict[str, object]:
        return {"start_step": 1, "end_step": 100, "step_interval": 1, "values": {str(k): v for k, v in vals.items()}}

    return json.dumps({"lm loss": block(loss), "num-zeros": block(zeros), "iteration-time": block(it)}, indent=4) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("gates")
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, "Initial import", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return q @ k.T @ v\n",
        "docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.03-py3\n",
        GOLDEN: values_json(GPT_LOSS, GPT_ZEROS, ITER), CONFIG: CONFIG_TEXT}, "2026-05-01T10:00:00+00:00")}
    shas["bump"] = commit(repo, "chore: Update Docker image version to 26.04-py3", {
        "docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.04-py3\n"}, "2026-05-10T10:00:00+00:00")
    (root / "golden.json").write_text(values_json(GPT_LOSS, GPT_ZEROS, ITER), encoding="utf-8")
    (root / "model_config.yaml").write_text(CONFIG_TEXT, encoding="utf-8")
    for name, loss, it in (("slow", GPT_LOSS, SLOW_LATE), ("loss", LOSS_UP, ITER), ("passing", GPT_LOSS, ITER)):
        (root / name).mkdir()
        (root / name / "actual_values.json").write_text(values_json(loss, GPT_ZEROS, it), encoding="utf-8")
    return root, shas


def _audit(root: Path, failing: str, shas: dict[str, str], out: str) -> tuple[dict, str, str]:
    (root / out).mkdir()
    p = run_cli("audit", f"../{failing}", "--passing", "../passing", "--repo", "../repo", "--good", shas["base"],
                "--bad", shas["bump"], "--golden", "../golden.json", "--model-config", "../model_config.yaml",
                "-o", ".", cwd=root / out)
    assert p.returncode in (0, 1), p.stderr
    return json.loads((root / out / "answer.json").read_text()), (root / out / "answer.md").read_text(), p.stdout


def test_gates_that_disagree_are_both_shown(world) -> None:
    root, shas = world
    answer, md, stdout = _audit(root, "slow", shas, "out-slow")
    assert answer["validation"]["all_passed"], answer["validation"]
    # the gate of --bad's date decides (iteration-time median over all steps, +12 %)
    failed = [(c["metric"], c["check"], c["policy"]) for c in answer["comparisons"] if not c["passed"]]
    assert failed == [("iteration-time", "approximate", "megatron@2026-05-10")]
    gd = answer["final_answer"]["gate_disagreement"]
    assert gd["at_run"] | {"evidence": None} == {"policy": "megatron@2026-05-10", "date": "2026-05-10", "passed": False,
                                                 "failing": ["iteration-time (approximate)"], "aborted": None,
                                                 "evidence": None}
    assert gd["today"] | {"evidence": None} == {"policy": "megatron", "date": None, "passed": True, "failing": [],
                                                "aborted": None, "evidence": None}
    assert "71223d53ba" in gd["summary"]  # the comparator change that makes the difference is named
    facts = {f["id"]: f["statement"] for f in answer["extracted_facts"]}
    assert "fails on iteration-time (approximate)" in facts[gd["at_run"]["evidence"][0]]
    assert "passes" in facts[gd["today"]["evidence"][0]]
    top = md.split("<details>")[0].splitlines()
    line = next(i for i, t in enumerate(top) if t.startswith("**Two gates disagree:**"))
    assert line <= 3, top  # near the top, right under the verdict
    assert ("under the gate of 2026-05-10 (megatron@2026-05-10) this fails on iteration-time (approximate); "
            "under today's gate (megatron) it passes") in top[line]
    assert any(t.startswith("**How to verify:**") for t in top)  # the line does not push the fix off the page
    assert "two gates disagree: under the gate of 2026-05-10" in " ".join(stdout.split())  # and the terminal says it


def test_gates_that_agree_say_nothing_more(world) -> None:
    root, shas = world
    answer, md, stdout = _audit(root, "loss", shas, "out-loss")
    assert answer["validation"]["all_passed"], answer["validation"]
    assert {c["metric"] for c in answer["comparisons"] if not c["passed"]} == {"lm loss"}
    assert answer["final_answer"].get("gate_disagreement") is None
    assert "Two gates disagree" not in md and "today's gate" not in md and "two gates disagree" not in stdout


def test_the_golden_is_parsed_once_per_audit(world, monkeypatch, tmp_path: Path) -> None:
    """Every gate of one audit (the dated gate, today's, the passing run's) reads the same parse."""
    import trainaudit.ingest.golden as golden_mod
    from trainaudit.audit import AuditOptions, run_audit

    root, shas = world
    original = golden_mod.load_golden
    calls: list[str] = []

    def counting(path: str, *args: object, **kw: object) -> golden_mod.GoldenFile:
        calls.append(Path(path).name)
        return original(path, *args, **kw)  # type: ignore[arg-type]

    patched = 0
    for name, mod in list(sys.modules.items()):
        if name.startswith("trainaudit") and getattr(mod, "load_golden", None) is original:
            monkeypatch.setattr(mod, "load_golden", counting)
            patched += 1
    assert patched >= 3  # ingest.golden, compare.pipeline, audit.pipeline at least
    golden = tmp_path / "golden_values_dev_dgx_h100.json"
    golden.write_text((root / "golden.json").read_text(), encoding="utf-8")
    answer, _, _ = run_audit(AuditOptions(inputs=[str(root / "slow")], passing=[str(root / "passing")],
                                          repo=str(root / "repo"), good=shas["base"], bad=shas["bump"],
                                          golden=str(golden), model_config=str(root / "model_config.yaml")))
    assert answer.final_answer.gate_disagreement is not None  # three gates ran: dated, today's, passing run
    assert calls.count(golden.name) == 1, calls


def test_a_golden_with_null_values_is_the_gate_breaking(world) -> None:
    """Megatron-LM's comparator cannot load a golden with null values (pydantic ValidationError in
    read_golden_values_from_json): the audit says the gate itself breaks, and where the nulls are."""
    root, shas = world
    golden = json.loads(values_json(GPT_LOSS, GPT_ZEROS, ITER))
    golden["lm loss"]["values"]["50"] = None
    golden["iteration-time"]["values"]["7"] = None
    (root / "golden_null.json").write_text(json.dumps(golden, indent=4), encoding="utf-8")
    (root / "out-null").mkdir()
    p = run_cli("audit", "../loss", "--repo", "../repo", "--good", shas["base"], "--bad", shas["bump"],
                "--golden", "../golden_null.json", "--model-config", "../model_config.yaml", "-o", ".",
                cwd=root / "out-null")
    assert p.returncode == 1, p.stderr
    answer = json.loads((root / "out-null" / "answer.json").read_text())
    fa = answer["final_answer"]
    assert (fa["verdict"], fa["category"]) == ("gating_policy_issue", "golden_mismatch")
    why = next(f["statement"] for f in answer["extracted_facts"] if f["statement"].startswith("decides the verdict"))
    assert "null values (lm loss at step 50; iteration-time at step 7)" in why and "ValidationError" in why
    assert "the gate, not the training, is broken" in why
    assert answer["validation"]["all_passed"]
    md = (root / "out-null" / "answer.md").read_text()
    assert "lm loss at step 50" in md.split("<details>")[0]


def test_a_list_layout_golden_with_null_values_is_the_old_comparators_type_error(world) -> None:
    """The 2024 list layout went to np.allclose unvalidated (test_ci_pipeline.py), where a None
    raises TypeError: the audit names the null at its step and that error."""
    root, shas = world
    golden = {m: {"start_step": 0, "end_step": 100, "step_interval": 5,
                  "values": [vals[s] for s in range(1, 101, 5)]}
              for m, vals in (("lm loss", GPT_LOSS), ("num-zeros", GPT_ZEROS))}
    golden["lm loss"]["values"][2] = None  # position 2: step 0 + 2 * 5
    (root / "golden_list_null.json").write_text(json.dumps(golden), encoding="utf-8")
    (root / "out-list-null").mkdir()
    p = run_cli("audit", "../loss", "--repo", "../repo", "--good", shas["base"], "--bad", shas["bump"],
                "--golden", "../golden_list_null.json", "-o", ".", cwd=root / "out-list-null")
    assert p.returncode == 1, p.stderr
    answer = json.loads((root / "out-list-null" / "answer.json").read_text())
    assert answer["final_answer"]["verdict"] == "gating_policy_issue"
    why = next(f["statement"] for f in answer["extracted_facts"] if f["statement"].startswith("decides the verdict"))
    assert "null values (lm loss at step 10)" in why and "TypeError" in why and "ValidationError" not in why
