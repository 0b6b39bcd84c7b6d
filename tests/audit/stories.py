"""A realistic Megatron-like repository and the CI artifacts of passing and failing runs, one story
per kind of failure. Built with git itself, torch's SummaryWriter and the real MIMO goldens.

History (oldest first): base, docs typo, model-code change, its revert, container bump 26.03 ->
26.04 (dated 2026-05-07, as Megatron-LM's 5fe3f06658, so the audit replays the comparator of that
day), GPT golden refresh, MIMO test moved to the broken list, a GPT golden refresh with a "nan"
placeholder. Stories (good..bad):

- ``regression``: docs..model, TensorBoard files, lm loss +8 % from step 40 -> real_regression, suspect;
- ``drift``: revert..container, Megatron logs, lm loss 5th-decimal drift -> numerical_drift, environment_change;
- ``mimo``: revert..container, the real MIMO goldens at 4e85d74ae9 (golden, passing) and 5fe3f06658
  (failing actual): iteration-time +15.1 % only (median over every step, as the comparator of
  2026-05-07 took it; +14.5 % over steps 30-45 today) -> gating_policy_issue, environment_change;
  fix: moved to broken;
- ``golden``: broken..badgolden, a refreshed golden with a "nan" step -> gating_policy_issue, golden_update;
- ``oom``: a run killed by CUDA OOM at step 37 -> infrastructure_failure (oom), not a golden mismatch.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "history"))
from gitrepo import commit, git

from shared_data import MEGATRON

MIMO_DIR = MEGATRON / "mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
MIMO_OLD = MIMO_DIR / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
MIMO_NEW = MIMO_DIR / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"
GPT = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1"
GPT_GOLDEN = f"{GPT}/golden_values_dev_dgx_h100.json"
MIMO = "tests/functional_tests/test_cases/mimo/mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
MIMO_GOLDEN = f"{MIMO}/golden_values_dev_dgx_h100.json"
STEPS = list(range(1, 101))
COMMON = "INFO     tests.functional_tests.python_test_utils.common:common.py"


def loss_at(step: int) -> float:
    return round(2.0 + 8.0 * math.exp(-step / 25.0), 5)


def zeros_at(step: int) -> float:
    return float(100 + (step * 37) % 61)


def golden_json(loss: dict[int, float | str], zeros: dict[int, float]) -> str:
    def block(vals: dict) -> dict:  # type: ignore[type-arg]
        return {"start_step": 1, "end_step": 100, "step_interval": 1, "values": {str(k): v for k, v in vals.items()}}

    return json.dumps({"lm loss": block(loss), "num-zeros": block(zeros)}, indent=4) + "\n"


GPT_LOSS = {s: loss_at(s) for s in STEPS}
GPT_ZEROS = {s: zeros_at(s) for s in STEPS}
DRIFT_LOSS = {s: round(v + (1e-5 if s % 3 == 0 else 0.0), 5) for s, v in GPT_LOSS.items()}
REGRESSED_LOSS = {s: round(v * (1.08 if s >= 40 else 1.0), 5) for s, v in GPT_LOSS.items()}

RECIPE_GPT = "products:\n  - test_case: [gpt3_tp1_pp1]\n    products:\n      - environment: [dev]\n        scope: [mr-github]\n"
RECIPE_MIMO = ("products:\n  - test_case: [mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing]\n"
               "    products:\n      - environment: [dev]\n        scope: [mr-github]\n")
RECIPE_MIMO_BROKEN = ("products:\n  - test_case: [mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing]\n"
                      "    products:\n      - environment: [dev]\n"
                      "        # Broken: iteration-time (rtol=0.05) keeps failing in CI\n"
                      "        scope: [mr-github-broken]\n")


def build_repo(root: Path) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    shas: dict[str, str] = {}
    shas["base"] = commit(root, "Initial import", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return q @ k.T @ v\n",
        "megatron/training/training.py": "def train():\n    pass\n",
        "examples/mimo/train.py": "from megatron.training import pretrain\n",
        "docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.03-py3\n",
        "tests/test_utils/recipes/h100/gpt.yaml": RECIPE_GPT,
        "tests/test_utils/recipes/h100/mimo.yaml": RECIPE_MIMO,
        "tests/functional_tests/python_test_utils/common.py": "RTOL = 0.05\n",
        GPT_GOLDEN: golden_json(GPT_LOSS, GPT_ZEROS),
        f"{GPT}/model_config.yaml": "ENV_VARS:\n  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0\nMODEL_ARGS:\n  --train-iters: 100\n"
                                    "TEST_TYPE: regular\nMETRICS:\n  - \"lm loss\"\n  - \"num-zeros\"\n",
        MIMO_GOLDEN: MIMO_OLD.read_text(encoding="utf-8"),
        f"{MIMO}/model_config.yaml": (MIMO_DIR / "model_config.yaml").read_text(encoding="utf-8"),
        "README.md": "megatron-like\n",
    }, "2026-05-01T10:00:00+00:00")
    shas["docs"] = commit(root, "Docs: typo", {"README.md": "Megatron-like\n"}, "2026-05-02T10:00:00+00:00")
    shas["model"] = commit(root, "Fuse attention softmax scaling", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return (q @ k.T / 8) @ v\n"},
        "2026-05-03T10:00:00+00:00")
    shas["revert"] = commit(root, 'Revert "Fuse attention softmax scaling"', {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return q @ k.T @ v\n"},
        "2026-05-04T10:00:00+00:00", body=f"This reverts commit {shas['model']}.")
    shas["container"] = commit(root, "chore: Update Docker image version to 26.04-py3", {
        "docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.04-py3\n"}, "2026-05-07T10:00:00+00:00")
    shas["refresh"] = commit(root, "Refresh golden values after the 26.04 bump", {
        GPT_GOLDEN: golden_json(DRIFT_LOSS, GPT_ZEROS)}, "2026-05-08T10:00:00+00:00")
    shas["broken"] = commit(root, "Move mimo seq_packing to broken: iteration-time keeps failing", {
        "tests/test_utils/recipes/h100/mimo.yaml": RECIPE_MIMO_BROKEN}, "2026-05-09T10:00:00+00:00")
    bad_golden = dict(DRIFT_LOSS)
    bad_golden[50] = "nan"
    shas["badgolden"] = commit(root, "Update golden values for gpt3_tp1_pp1 from nightly", {
        GPT_GOLDEN: golden_json(bad_golden, GPT_ZEROS)}, "2026-05-10T10:00:00+00:00")
    return shas


# -- artifacts -------------------------------------------------------------------------------------
def megatron_log(loss: dict[int, float], zeros: dict[int, float], *, last: int = 100, oom: bool = False) -> list[str]:
    lines = ["using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1, "
             "pipeline-model-parallel size: 1", "training ..."]
    for s in STEPS[:last]:
        lines.append(f" [2026-04-05 10:{s // 60:02d}:{s % 60:02d}] iteration {s:8d}/     100 | consumed samples: "
                     f"{s * 32:12d} | elapsed time per iteration (ms): {812.0 + (s % 7):.1f} | learning rate: "
                     f"1.000000E-04 | global batch size:    32 | lm loss: {loss[s]:.6E} | loss scale: 1.0 | "
                     f"grad norm: {1.5 + s / 100:.3f} | num zeros: {zeros[s]:.1f} | number of skipped iterations:   0 | "
                     "number of nan iterations:   0 |")
    if oom:
        lines += [
            "[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "/workspace/megatron-lm/pretrain_gpt.py", line 302, in <module>',
            "[rank3]:     pretrain(",
            '[rank3]:   File "/workspace/megatron-lm/megatron/training/training.py", line 1198, in train_step',
            "[rank3]:     losses_reduced = forward_backward_func(",
            "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
            "capacity of 79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB "
            "memory in use. Of the allocated memory 74.51 GiB is allocated by PyTorch, and 2.12 GiB is reserved by "
            "PyTorch but unallocated.",
        ]
    return lines


def ci_log(case: str, gate: list[str], *, token: str | None = None) -> list[str]:
    head = ["Running on runner h100-ci-17",
            f"+ export TRAINING_PARAMS_PATH=./tests/functional_tests/test_cases/{case}/model_config.yaml"]
    if token:
        head.append(f"+ git clone https://oauth2:{token}@gitlab.example.com/adlr/megatron-lm.git")
    return head + ["Running pytest checks against golden values"] + gate


def gate_lines(failed: list[tuple[str, str, str, str]], passed: list[tuple[str, str]], summary: str) -> list[str]:
    out: list[str] = ["============================= test session starts =============================="]
    for kind, metric in passed:
        out.append(f"{COMMON}:210 {kind} test for metric {metric}: PASSED")
    for check, metric, actual, golden in failed:
        out += [f"{COMMON}:188 Actual values: {actual}", f"{COMMON}:189 Golden values: {golden}",
                f"ERROR    tests.functional_tests.python_test_utils.common:common.py:195 {check} comparison of "
                f"{metric}: FAILED"]
    out += [f"E       AssertionError: The following metrics failed: {', '.join(m for _, m, _, _ in failed)}",
            f"=========================== {summary} in 3.21s ==========================="]
    return out


def write_tb(path: Path, loss: dict[int, float], zeros: dict[int, float]) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    path.mkdir(parents=True, exist_ok=True)
    w = SummaryWriter(str(path))
    for s in STEPS:
        w.add_scalar("lm loss", loss[s], s)
        w.add_scalar("num-zeros", zeros[s], s)
    w.close()
    return path


def _w(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _vals(d: dict[int, float], steps: list[int]) -> str:
    return ", ".join(str(d[s]) for s in steps)


def build_artifacts(root: Path, story: str) -> tuple[Path, Path]:
    """(failing dir, passing dir) of ``story``."""
    fail, ok = root / story / "failing", root / story / "passing"
    if story == "regression":
        write_tb(fail / "tensorboard", REGRESSED_LOSS, GPT_ZEROS)
        write_tb(ok / "tensorboard", GPT_LOSS, GPT_ZEROS)
        bad = [s for s in STEPS if s >= 40]
        _w(fail / "job.log", ci_log("gpt/gpt3_tp1_pp1", gate_lines(
            [("Exact", "lm loss", _vals(REGRESSED_LOSS, bad[:5]) + ", ...", _vals(GPT_LOSS, bad[:5]) + ", ..."),
             ("Approximate", "lm loss", _vals(REGRESSED_LOSS, bad[:5]) + ", ...", _vals(GPT_LOSS, bad[:5]) + ", ...")],
            [("DETERMINISTIC", "num-zeros"), ("APPROXIMATE", "num-zeros")], "1 failed")))
    elif story == "drift":
        _w(fail / "train.log", megatron_log(DRIFT_LOSS, GPT_ZEROS))
        _w(ok / "train.log", megatron_log(GPT_LOSS, GPT_ZEROS))
        _w(fail / "job.log", ci_log("gpt/gpt3_tp1_pp1", gate_lines(
            [("Exact", "lm loss", _vals(DRIFT_LOSS, [3, 6, 9]) + ", ...", _vals(GPT_LOSS, [3, 6, 9]) + ", ...")],
            [("APPROXIMATE", "lm loss"), ("DETERMINISTIC", "num-zeros"), ("APPROXIMATE", "num-zeros")], "1 failed")))
    elif story == "mimo":
        case = "mimo/mimo_vlm_pretrain_convergence_tp1_pp1_cp1_dp8_seq_packing"
        fail.mkdir(parents=True, exist_ok=True)
        ok.mkdir(parents=True, exist_ok=True)
        (fail / "actual_values.json").write_text(MIMO_NEW.read_text(encoding="utf-8"), encoding="utf-8")
        (ok / "actual_values.json").write_text(MIMO_OLD.read_text(encoding="utf-8"), encoding="utf-8")
        _w(fail / "job.log", ci_log(case, gate_lines(
            [("Approximate", "iteration-time", "0.90419", "0.78978")],
            [("DETERMINISTIC", "lm loss"), ("APPROXIMATE", "lm loss"), ("DETERMINISTIC", "num-zeros"),
             ("APPROXIMATE", "num-zeros"), ("APPROXIMATE", "mem-allocated-bytes"),
             ("APPROXIMATE", "mem-max-allocated-bytes")], "1 failed"),
            token="glpat-abcdefghijklmnopqrstuvwxyz"))
    elif story == "golden":
        _w(fail / "train.log", megatron_log(DRIFT_LOSS, GPT_ZEROS))
        _w(ok / "train.log", megatron_log(DRIFT_LOSS, GPT_ZEROS))
        _w(fail / "job.log", ci_log("gpt/gpt3_tp1_pp1", gate_lines(
            [("Exact", "lm loss", "2.54134, ...", "inf, ...")],
            [("APPROXIMATE", "lm loss"), ("DETERMINISTIC", "num-zeros"), ("APPROXIMATE", "num-zeros")], "1 failed")))
    elif story == "oom":
        _w(fail / "train.log", megatron_log(GPT_LOSS, GPT_ZEROS, last=37, oom=True) + ["Training failed. Aborting."])
        _w(ok / "train.log", megatron_log(GPT_LOSS, GPT_ZEROS))
    else:
        raise ValueError(story)
    return fail, ok
