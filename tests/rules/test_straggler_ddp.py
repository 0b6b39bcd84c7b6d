"""TA407 on real 2-rank DDP runs (gloo, CPU) launched with the real ``torchrun --tee 3``: the
combined console output carries torchrun's ``[default<r>]:`` prefixes, the ingest sink turns the
second rank's values into ``<metric>@rank1`` series, and the rule names the slow rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run
from trainaudit.rules import run_rules

SCRIPT = Path(__file__).with_name("ddp_straggler.py")
SLOW_FROM = 30


def _torchrun(out: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, **env_extra, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--tee", "3",
           "--log-dir", str(out.parent / (out.stem + "_logs")), str(SCRIPT)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), out


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ddp")
    # both jobs at once (each its own --standalone rendezvous on a free port): most of their time is
    # starting the interpreters, which overlaps
    jobs = {"slow": _torchrun(d / "slow.log", {"SLOW_RANK": "1", "SLOW_FROM": str(SLOW_FROM)}),
            "balanced": _torchrun(d / "balanced.log", {})}
    out = {}
    for name, (proc, path) in jobs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-2000:]
        path.write_text(stdout, encoding="utf-8")
        out[name] = path
    return out


def test_the_log_is_torchruns_prefixed_console(logs):
    lines = logs["slow"].read_text().splitlines()
    assert {ln[:len("[default0]:")] for ln in lines} == {"[default0]:", "[default1]:"}
    assert sum("step 60 |" in ln for ln in lines) == 2
    run, _ = load_run([str(logs["slow"])])
    # the first rank to print keeps the plain name; the other one gets an @rank copy
    assert {"compute_time", "step_time"} <= set(run.series)
    assert {"compute_time@rank0", "compute_time@rank1"} & set(run.series)


def test_straggler_named_from_the_slow_step(logs):
    run, _ = load_run([str(logs["slow"])])
    (h,) = [h for h in run_rules(run) if h.rule == "TA407"]
    assert h.category == "throughput_regression" and h.severity == "medium"
    assert h.data["rank"] == 1 and h.data["base"] == "compute_time" and h.first_bad_step == SLOW_FROM
    assert h.metric == ("compute_time@rank1" if "compute_time@rank1" in run.series else "compute_time")
    assert h.data["ranks"] == 2 and h.data["ratio"] > 2  # 20 ms extra on a ~5 ms step
    assert h.message.startswith("rank 1 (") and f"from step {SLOW_FROM}" in h.message
    # the whole job slowed down with it: synchronous training waits for the straggler
    s0, s1 = (run.series[n] for n in run.series if n.startswith("step_time"))
    late0, late1 = s0.values[s0.steps >= SLOW_FROM + 2], s1.values[s1.steps >= SLOW_FROM + 2]
    assert abs(float(late0.mean()) - float(late1.mean())) < 0.2 * float(late1.mean())
    d = diagnose_run(run)
    assert (d.category, d.first_bad_step) == ("throughput_regression", SLOW_FROM)
    assert "TA407" in {h.rule for st in d.stories for h in st.hits}


def test_balanced_run_is_silent(logs):
    run, _ = load_run([str(logs["balanced"])])
    assert {"compute_time@rank0", "compute_time@rank1"} & set(run.series)
    hits = run_rules(run)
    assert not [h for h in hits if h.rule == "TA407"]
    # the times are modelled (ddp_straggler.py), so the whole-job timing rules (TA406 regression,
    # TA408 stalls) must stay silent too: the load of other jobs on a CI host does not reach them
    loud = [(h.rule, h.message) for h in hits if h.severity != "info"]
    assert not loud
