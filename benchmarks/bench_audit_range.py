"""``trainaudit audit`` over a good..bad range of 300 commits (target: under 5 s per case, whole
process, median).

The repository is generated once with ``git fast-import`` under benchmarks/data/ (gitignored): a
Megatron-like tree (about 450 files: model code, training code, unit tests, 60 functional test cases
with golden values and model configs, recipes, CI workflows, the container Dockerfile, dependency
pins, docs) and then 300 commits between --good and --bad of the shapes a real range has: code
changes touching 1 to 25 files, unit tests, docs, CI and recipe edits, two dependency-pin bumps, one
container image bump, one golden refresh that rewrites 40 sibling golden files at once, the model-code
change that moves the numbers, and commits after --bad for --find-fix to look at. The artifacts are
the bundled example's (examples/make_audit_demo.py: Megatron logs of a passing and a failing run of
``gpt3_tp1_pp1`` and the failing CI job log). The timed command is the real CLI in a fresh process:

    python benchmarks/bench_audit_range.py
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "audit-range"
REPO = DATA / "repo"
RANGE = 300
AFTER = 20
RUNS = 5
TARGET_S = 5.0
MODULES = ["transformer", "models/gpt", "models/bert", "models/mamba", "moe", "optimizer", "distributed", "datasets",
           "tensor_parallel", "pipeline_parallel", "fusions", "inference", "dist_checkpointing", "ssm"]
MODELS = ["gpt", "bert", "t5", "moe", "mamba", "mimo"]


def _tree() -> dict[str, str]:
    sys.path.insert(0, str(HERE.parent / "examples"))
    import make_audit_demo as demo

    files: dict[str, str] = {}
    for m in MODULES:
        for k in range(15):
            files[f"megatron/core/{m}/part_{k}.py"] = f"# {m} part {k}\ndef f{k}(x):\n    return x\n"
    for k in range(20):
        files[f"megatron/training/step_{k}.py"] = f"def step_{k}():\n    pass\n"
    files["megatron/core/transformer/attention.py"] = "def attention(q, k, v):\n    return q @ k.T @ v\n"
    for k in range(80):
        files[f"tests/unit_tests/test_part_{k}.py"] = f"def test_{k}():\n    assert True\n"
    cases = [demo.CASE] + [f"tests/functional_tests/test_cases/{MODELS[k % len(MODELS)]}/case_{k}" for k in range(1, 60)]
    for k, case in enumerate(cases):
        shift = 0.0 if k == 0 else 0.01 * k
        files[f"{case}/golden_values_dev_dgx_h100.json"] = demo.golden_json(
            lambda s, d=shift: round(demo.golden_loss(s) + d, 5), demo.zeros)
        files[f"{case}/model_config.yaml"] = ("ENV_VARS:\n  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0\nMODEL_ARGS:\n"
                                              "  --train-iters: 100\nMETRICS:\n  - \"lm loss\"\n  - \"num-zeros\"\n")
    for model in MODELS:
        names = ", ".join(Path(c).name for c in cases if f"/{model}/" in c or (model == "gpt" and c == demo.CASE))
        files[f"tests/test_utils/recipes/h100/{model}.yaml"] = (
            f"products:\n  - test_case: [{names}]\n    products:\n      - environment: [dev]\n        scope: [mr-github]\n")
    files["docker/Dockerfile.ci.dev"] = "FROM nvcr.io/nvidia/pytorch:26.03-py3\n"
    files["pyproject.toml"] = '[project]\nname = "megatron-core"\ndependencies = ["transformer-engine==2.8", "nvidia-nccl-cu12==2.27.3"]\n'
    for k in range(6):
        files[f".github/workflows/ci_{k}.yml"] = f"name: ci {k}\non: [push]\n"
    files[".gitlab-ci.yml"] = "stages: [build, test]\n"
    for k in range(12):
        files[f"docs/page_{k}.md"] = f"# page {k}\n"
    files["README.md"] = "megatron-like benchmark repository\n"
    return files


def _commits(tree: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    """(title, changed files) for the range and the commits after --bad; the last range commit is --bad."""
    import make_audit_demo as demo

    code = sorted(p for p in tree if p.startswith("megatron/"))
    tests = sorted(p for p in tree if p.startswith("tests/unit_tests/"))
    goldens = sorted(p for p in tree if p.endswith(".json") and demo.CASE not in p)
    ci = sorted(p for p in tree if p.startswith((".github/", ".gitlab")))
    docs = sorted(p for p in tree if p.startswith("docs/"))
    out: list[tuple[str, dict[str, str]]] = []
    for i in range(1, RANGE + AFTER + 1):
        n = RANGE + AFTER
        if i == RANGE:
            out.append(("Fuse attention softmax scaling (#4321)", {
                "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return (q @ k.T / 8) @ v\n"}))
            continue
        if i == 90:
            out.append(("chore: Update Docker image version to 26.04-py3 (#4100)",
                        {"docker/Dockerfile.ci.dev": "FROM nvcr.io/nvidia/pytorch:26.04-py3\n"}))
            continue
        if i in (60, 200):
            te = "2.9" if i == 60 else "2.10"
            out.append((f"build: Bump TE to {te} (#{4000 + i})", {"pyproject.toml": tree["pyproject.toml"].replace("2.8", te)}))
            continue
        if i == 150:
            out.append(("ci: Refresh golden values after the 26.04 bump (#4200)",
                        {g: tree[g].replace("\"1\": ", "\"1\":  ") for g in goldens[:40]}))
            continue
        kind = (i * 7) % 10
        if kind < 6:
            width = 1 + (i * 13) % 25
            picked = [code[(i * 31 + j * 17) % len(code)] for j in range(width)]
            if "megatron/core/transformer/attention.py" in picked:
                picked.remove("megatron/core/transformer/attention.py")
            area = picked[0].split("/")[2] if picked and picked[0].startswith("megatron/core/") else "training"
            out.append((f"fix({area}): {'refactor' if width > 10 else 'handle'} case {i} (#{3000 + i})",
                        {p: f"{tree[p]}# change {i}\n" for p in picked} | {tests[i % len(tests)]: f"# test change {i}\n"}))
        elif kind < 7:
            out.append((f"test: cover case {i} (#{3000 + i})", {tests[(i * 3) % len(tests)]: f"# test {i}\n"}))
        elif kind < 8:
            out.append((f"docs: clarify page {i % len(docs)}", {docs[i % len(docs)]: f"# page, revision {i}\n"}))
        elif kind < 9:
            out.append((f"ci: adjust workflow {i}", {ci[i % len(ci)]: f"name: ci\non: [push]\n# rev {i}\n"}))
        else:
            model = MODELS[i % len(MODELS)]
            rec = f"tests/test_utils/recipes/h100/{model}.yaml"
            out.append((f"ci: recipe tweak for {model} ({i})", {rec: tree[rec] + f"# rev {i}\n"}))
        assert len(out) == i, (i, n)
    return out


def generate() -> dict[str, str]:
    marker = DATA / "shas.json"
    if marker.exists():
        return json.loads(marker.read_text())
    if DATA.exists():
        shutil.rmtree(DATA)
    REPO.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(REPO)], check=True)
    tree = _tree()
    stream: list[bytes] = []
    t0 = 1_780_000_000  # 2026-05-28

    def blob(text: str) -> bytes:
        data = text.encode()
        return f"data {len(data)}\n".encode() + data + b"\n"

    def commit(mark: int, title: str, files: dict[str, str]) -> None:
        stream.append(f"commit refs/heads/main\nmark :{mark}\n".encode())
        stamp = f"bench <bench@example.org> {t0 + mark * 3600} +0000\n"
        stream.append(f"author {stamp}committer {stamp}".encode())
        stream.append(blob(title)[:-1])
        if mark > 1:
            stream.append(f"from :{mark - 1}\n".encode())
        for path, text in files.items():
            stream.append(f"M 100644 inline {path}\n".encode() + blob(text))
        stream.append(b"\n")

    commit(1, "Initial import", tree)
    for k, (title, files) in enumerate(_commits(tree), start=2):
        commit(k, title, files)
    subprocess.run(["git", "-C", str(REPO), "fast-import", "--quiet"], input=b"".join(stream), check=True)
    subprocess.run(["git", "-C", str(REPO), "checkout", "-q", "main"], check=True)

    def rev(spec: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", spec], check=True, capture_output=True,
                              text=True).stdout.strip()

    shas = {"good": rev(f"main~{RANGE + AFTER}"), "bad": rev(f"main~{AFTER}")}
    n = int(subprocess.run(["git", "-C", str(REPO), "rev-list", "--count", f"{shas['good']}..{shas['bad']}"],
                           check=True, capture_output=True, text=True).stdout)
    assert n == RANGE, n
    import make_audit_demo as demo

    demo.write_artifacts(DATA / "artifacts")
    marker.write_text(json.dumps(shas))
    return shas


def main() -> None:
    t0 = time.perf_counter()
    shas = generate()
    build = time.perf_counter() - t0
    cmd = [sys.executable, "-m", "trainaudit", "audit", "artifacts/failing", "--passing", "artifacts/passing",
           "--repo", "repo", "--good", shas["good"], "--bad", shas["bad"], "--find-fix", "-o", "report", "--quiet",
           "--fail-on", "never"]
    times: list[float] = []
    cpu: list[float] = []  # user + sys of the audit and its git children: less disturbed by other load
    for _ in range(RUNS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, cwd=DATA, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    load = os.getloadavg()[0]
    answer = json.loads((DATA / "report" / "answer.json").read_text())
    fa = answer["final_answer"]
    med = statistics.median(times)
    top = answer["commits"][0] if answer["commits"] else {"sha": "-", "role": "-", "title": "-"}
    print("## audit: a range of 300 commits, end to end\n")
    print(f"`python benchmarks/bench_audit_range.py`: `trainaudit audit --find-fix` over a generated Megatron-like "
          f"repository whose good..bad range holds {RANGE} commits (code changes of 1-25 files, unit tests, docs, CI "
          "and recipe edits, two dependency-pin bumps, a container image bump, a golden refresh rewriting 40 golden "
          f"files in one commit, the model-code change that moved the loss) and {AFTER} commits after --bad, with the "
          "bundled example's logs and CI job log. Whole process (interpreter start, imports, git, test-case "
          f"discovery, gate, diagnosis of both runs, history, report and plots), {RUNS} runs. Generating the "
          f"repository took {build:.2f} s (cached in benchmarks/data/, not timed).\n")
    print("| commits in range | runs | median (s) | min (s) | max (s) | CPU median (s) | load average | verdict | "
          "commit named | validation |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {RANGE} | {RUNS} | {med:.2f} | {min(times):.2f} | {max(times):.2f} | {statistics.median(cpu):.2f} | "
          f"{load:.1f} | {fa['verdict']} | "
          f"`{top['sha'][:10]}` {top['title']} ({top['role']}) | "
          f"{'passed' if answer['validation']['all_passed'] else 'FAILED'} |")
    print(f"\nTarget: under {TARGET_S:.0f} s per case (median wall time): **{'met' if med < TARGET_S else 'NOT met'}**. "
          "CPU time is user + sys of the audit process and its git children; the load average (1 min, taken after "
          "the runs) says how busy the shared machine was while they ran.")


if __name__ == "__main__":
    main()
