"""The live monitor on real tiny CPU training runs with injected faults (see tinyloop.py).

Routine rule evaluations are spaced by a CPU-time budget by default; the tests set
``rules_budget=0`` so that "evaluated every ``rules_every`` steps" holds exactly whatever the
machine's load, which makes detection steps deterministic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from shared_data import run_cli
from tinyloop import build, records, train

from trainaudit.answer.schema import Finding
from trainaudit.ingest import load_run
from trainaudit.model import EventKind
from trainaudit.monitor.core import Monitor
from trainaudit.rules import Config

# Wall-clock rules (step-time regression, stragglers, periodic stalls) are left out: on a shared
# CI machine another process can slow these millisecond steps at any time, and no fault here is
# about throughput.
FAST = {"rules_budget": 0.0, "warn": None, "config": Config(ignore=["TA406", "TA407", "TA408"])}


def _by_rule(res, rule: str):  # type: ignore[no-untyped-def]
    return [a for a in res.monitor.alerts if a.rule == rule]


def test_healthy_run_raises_nothing_and_diagnose_reads_the_jsonl(tmp_path: Path) -> None:
    res = train(tmp_path, steps=150, **FAST)
    assert res.monitor.alerts == []
    recs = records(tmp_path)
    assert recs[0]["trainaudit_monitor"] == 1 and recs[0]["type"] == "start"
    assert recs[-1] == {"type": "end", "step": 150, "status": "completed", "completed": True, "alerts": 0}
    run, problems = load_run([str(tmp_path / "trainaudit-monitor.jsonl")])
    assert not problems and run.sources[0].format == "trainaudit-monitor"
    loss = run.series["loss"]
    assert len(loss) == 150
    # exactly the values the loop computed, at the right steps
    assert loss.value_at(1) == res.losses[0] and loss.value_at(150) == res.losses[149]
    assert res.losses[-1] < 0.5 * res.losses[0]
    # per-layer statistics at step 1 and every `every` (100) steps only
    assert run.series["grad_norm/0"].steps.tolist() == [1, 100]
    assert run.series["update_ratio/2"].steps.tolist() == [1, 100]
    assert np.all(run.series["update_ratio/2"].values > 0)
    assert any(e.kind == EventKind.PHASE and e.data["completed"] for e in run.events)


def test_nan_batch_at_step_57_alerts_at_57_and_names_the_input_layer(tmp_path: Path) -> None:
    def nan_batch(step: int, _model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if step == 57:
            x = x.clone()
            x[3, 2] = float("nan")
        return x

    seen = []
    res = train(tmp_path, steps=80, fault=nan_batch, on_alert=seen.append, save_batch_on="critical", **FAST)
    origin = _by_rule(res, "MON101")
    assert len(origin) == 1 and origin[0].last_step == 57 and origin[0].first_bad_step == 57
    assert origin[0].data["phase"] == "forward" and origin[0].metric == "0" and origin[0].data["input_nonfinite"]
    ta101 = _by_rule(res, "TA101")
    assert ta101 and all(a.last_step == 57 and a.first_bad_step == 57 for a in ta101)
    assert all(a.last_step >= 57 for a in res.monitor.alerts)  # nothing before the fault
    assert [a.rule for a in seen] == [a.rule for a in res.monitor.alerts]  # the callback saw every alert
    saved = torch.load(tmp_path / "batches" / "step57.pt")
    assert torch.isnan(saved[0][3, 2]) and int(torch.isnan(saved[0]).sum()) == 1
    nonfinite = [r for r in records(tmp_path) if r["type"] == "nonfinite"]
    assert nonfinite == [{"type": "nonfinite", "step": 57, "phase": "forward", "module": "0", "input_nonfinite": True,
                          "call": 0, "detail": "non-finite input entering 0"}]
    # the file records each alert as the one finding type, and reading it back keeps its steps
    written = [r for r in records(tmp_path) if r["type"] == "alert"]
    assert [Finding.model_validate({k: v for k, v in r.items() if k not in ("type", "step")}) for r in written] \
        == res.monitor.alerts
    run, _ = load_run([str(tmp_path / "trainaudit-monitor.jsonl")])
    warned = [e for e in run.events if e.kind == EventKind.WARNING and e.data["rule"] == "MON101"]
    assert [(e.step, e.data["first_bad_step"]) for e in warned] == [(57, 57)]


def test_forward_nan_inside_the_model_is_attributed_and_stop_ends_cleanly(tmp_path: Path) -> None:
    def broken(step: int, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if step == 33:
            model[2].shift = 1e6  # log of a negative number from here on
        return x

    res = train(tmp_path, steps=80, model=build("log"), fault=broken, stop_on="critical", **FAST)
    assert res.steps_run == 33  # the with-block ended right after step 33, no exception escaped
    assert res.monitor.stopped is not None and res.monitor.stopped.last_step == 33
    origin = _by_rule(res, "MON101")[0]
    assert origin.metric == "2" and origin.data["phase"] == "forward" and not origin.data["input_nonfinite"]
    recs = records(tmp_path)
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "stopped" and recs[-1]["step"] == 33
    assert max(r["step"] for r in recs if r["type"] == "step") == 33


def test_backward_nan_is_attributed_to_the_module_whose_backward_made_it(tmp_path: Path) -> None:
    def arm(step: int, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        model[2].armed = step == 40
        return x

    res = train(tmp_path, steps=45, model=build("bomb"), fault=arm, clip=None, **FAST)
    origin = _by_rule(res, "MON101")[0]
    assert origin.last_step == 40 and origin.data["phase"] == "backward"
    assert origin.metric == "2" and origin.data["grad_at_output_of"] == "1"
    assert np.isfinite(res.losses[39])  # the forward of step 40 was clean: only gradients were NaN


def test_evaluation_forwards_between_steps_do_not_hide_the_nan_origin(tmp_path: Path) -> None:
    # 60 forwards under no_grad before every training step: more leaf calls than the monitor
    # keeps per step (8 per leaf), so had they been recorded the training forward would not be
    def eval_then_nan(step: int, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for _ in range(60):
                model(x)
        if step == 21:
            x = x.clone()
            x[0, 0] = float("inf")
        return x

    res = train(tmp_path, steps=25, fault=eval_then_nan, **FAST)
    origin = _by_rule(res, "MON101")
    assert len(origin) == 1 and origin[0].last_step == 21
    assert origin[0].data["phase"] == "forward" and origin[0].metric == "0" and origin[0].data["input_nonfinite"]


def _steps(model: torch.nn.Module, mon: Monitor, steps: int, *, micro: int = 1,
           loss_fn: Any = torch.nn.functional.cross_entropy, fault: Any = None) -> None:
    """Plain training steps of ``micro`` accumulated micro-batches; ``fault(step, k, x)`` may
    change micro-batch ``k``'s input."""
    opt = mon.optimizer
    assert opt is not None
    g = torch.Generator().manual_seed(3)
    with mon:
        for step in range(1, steps + 1):
            opt.zero_grad()
            for k in range(micro):
                x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
                if fault is not None:
                    x = fault(step, k, x)
                loss = loss_fn(model(x), y) / micro
                loss.backward()
            opt.step()
            mon.step(loss)


def test_nan_in_an_early_micro_batch_is_found_by_replaying_each_one(tmp_path: Path) -> None:
    # gradient accumulation: the NaN comes with micro-batch 1 of 4, not the last one
    def bad(step: int, k: int, x: torch.Tensor) -> torch.Tensor:
        if step == 6 and k == 1:
            x = x.clone()
            x[2, 3] = float("nan")
        return x

    model = build()
    mon = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.01), tmp_path, **FAST)
    _steps(model, mon, 8, micro=4, fault=bad)
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    assert origin.last_step == 6 and origin.metric == "0"
    assert origin.data["phase"] == "forward" and origin.data["input_nonfinite"] and origin.data["micro_batch"] == 1


class _Lottery(torch.nn.Module):
    """NaN in the forward when a draw from the global RNG is below ``p`` (a stochastic module)."""

    def __init__(self) -> None:
        super().__init__()
        self.p = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float("nan") if float(torch.rand(())) < self.p else x


def test_the_replay_draws_the_same_random_numbers_as_the_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), _Lottery(), torch.nn.Linear(32, 4))
    mon = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.01), tmp_path, **FAST)

    def arm(step: int, _k: int, x: torch.Tensor) -> torch.Tensor:
        model[2].p = 0.1 if step >= 10 else 0.0  # from step 10 a draw decides, in the replay too
        return x

    _steps(model, mon, 60, fault=arm)
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    assert origin.metric == "2" and origin.data["phase"] == "forward" and not origin.data["input_nonfinite"]
    assert origin.last_step >= 10


def test_a_nan_made_by_the_loss_backward_is_not_blamed_on_a_module(tmp_path: Path) -> None:
    def sqrt_loss(out: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
        # gate 0: sqrt(0), a finite loss whose backward is 0 * inf = NaN
        return torch.sqrt((out.mean() + 100.0) * gate[0])

    gate = [1.0]

    def close_gate(step: int, _k: int, x: torch.Tensor) -> torch.Tensor:
        gate[0] = 0.0 if step == 5 else 1.0
        return x

    model = build()
    mon = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.001), tmp_path, **FAST)
    _steps(model, mon, 6, loss_fn=sqrt_loss, fault=close_gate)
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    assert origin.last_step == 5 and origin.data["phase"] == "loss" and origin.metric is None
    assert "the loss or its backward" in origin.data["detail"]


def test_a_nan_loss_with_finite_gradients_is_reported_without_claims_it_cannot_check(tmp_path: Path) -> None:
    # log of a negative number: the loss is NaN, its gradient 1/u is finite, so the check before
    # the update passes and the step is found only when its loss is read, after the update: no replay
    def log_loss(out: torch.Tensor, _y: torch.Tensor) -> torch.Tensor:
        return torch.log(out.mean() + shift[0])

    shift = [100.0]

    def flip(step: int, _k: int, x: torch.Tensor) -> torch.Tensor:
        shift[0] = -100.0 if step == 4 else 100.0
        return x

    model = build()
    mon = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.001), tmp_path, **FAST)
    _steps(model, mon, 5, loss_fn=log_loss, fault=flip)
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    # the loss is read with its batch of steps (at the end here, or earlier when flush_s passed)
    assert origin.first_bad_step == 4 and origin.last_step in (4, 5)
    assert origin.data["phase"] == "loss" and origin.metric is None
    assert "could not be replayed" in origin.data["detail"]


class _Amplify(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by 1e30 (finite in float32, but its
    square is not)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return g * 1e30


def test_a_gradient_norm_that_overflows_from_finite_gradients_is_not_a_nan_origin(tmp_path: Path) -> None:
    # no grad_norm passed: the monitor's own L2 norm is inf while every gradient value is finite;
    # the replay finds nothing non-finite and must not invent an origin
    model = build()

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(_Amplify.apply(out) if amplify[0] else out, y)

    amplify = [False]

    def arm(step: int, _k: int, x: torch.Tensor) -> torch.Tensor:
        amplify[0] = step == 3
        return x

    mon = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.0), tmp_path, **FAST)
    _steps(model, mon, 4, loss_fn=loss_fn, fault=arm)
    assert [a for a in mon.alerts if a.rule == "MON101"] == []
    assert any(a.rule == "TA101" and a.last_step == 3 for a in mon.alerts)  # the inf norm itself is reported
    assert [r["grad_norm"] for r in records(tmp_path) if r.get("step") == 3 and r["type"] == "step"] == ["inf"]


def test_a_forward_that_depends_on_hidden_state_is_not_replayed_into_a_wrong_module(tmp_path: Path) -> None:
    # a Python counter decides the NaN: the replay (one call later) is clean, and the origin says
    # what it knows instead of naming a module
    class Counting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = build()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return self.net(x * float("nan") if self.calls == 7 else x)

    model = Counting()
    mon = Monitor(model, torch.optim.SGD(model.parameters(), lr=0.01), tmp_path, **FAST)
    _steps(model, mon, 8)
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    assert origin.last_step == 7 and origin.metric is None
    assert "state the replay does not restore" in origin.data["detail"]


class FakeClock:
    """A clock the test moves by hand: step times are what the test decides, not what the
    machine's load made of them."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_paused_block_is_not_recorded_nor_counted_in_step_time(tmp_path: Path) -> None:
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    clock = FakeClock()
    mon = Monitor(model, opt, tmp_path, clock=clock, **FAST)

    def step() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    mon.step(step())
    clock.t += 0.125  # the step before the pause
    with mon.paused():
        for _ in range(3):
            step()
            model(x)
            assert mon.origin_finder is not None and not mon.origin_finder.captured  # no hook ran
        clock.t += 30.0
    clock.t += 0.125  # the step after it
    mon.step(step())
    mon.close()
    steps = [r for r in records(tmp_path) if r["type"] == "step"]
    assert [r["step"] for r in steps] == [1, 2]
    assert steps[1]["step_time"] == 0.25  # the pause is not part of the step


def test_a_copy_of_the_monitored_model_is_not_monitored(tmp_path: Path) -> None:
    # EMA/SWA models are deep copies (torch.optim.swa_utils.AveragedModel); torch.save(model)
    # pickles the hooks too: both failed on the monitor's open files
    import copy
    import io

    model = build()
    mon = Monitor(model, torch.optim.Adam(model.parameters()), tmp_path, **FAST)
    ema = torch.optim.swa_utils.AveragedModel(model)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    x = torch.randn(8, 16)
    ema(x)
    loaded(x)
    copy.deepcopy(model)(x)
    assert mon.origin_finder is not None and not mon.origin_finder.captured  # none of the copies reached the monitor
    model(x)
    assert mon.origin_finder.captured
    mon.close()


def test_lr_jump_alerts_at_the_jump_step(tmp_path: Path) -> None:
    res = train(tmp_path, steps=160, lr_at=lambda s: 3e-3 if s < 120 else 0.5, clip=None, **FAST)
    jump = _by_rule(res, "TA206")
    assert len(jump) == 1 and jump[0].last_step == 120 and jump[0].first_bad_step == 120
    assert "0.003 -> 0.5" in jump[0].message
    assert all(a.first_bad_step is None or a.first_bad_step >= 120 for a in res.monitor.alerts)


def test_params_left_out_of_the_optimizer_alert_at_step_1(tmp_path: Path) -> None:
    res = train(tmp_path, steps=30, optimizer_params=lambda m: m[4].parameters(), **FAST)
    miss = _by_rule(res, "MON201")
    assert len(miss) == 1 and miss[0].last_step == 1 and miss[0].severity == "high"
    assert miss[0].data["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_frozen_body_is_reported(tmp_path: Path) -> None:
    model = build()
    for p in list(model[0].parameters()) + list(model[2].parameters()):
        p.requires_grad_(False)
    res = train(tmp_path, steps=10, model=model, **FAST)
    frozen = _by_rule(res, "MON203")
    assert len(frozen) == 1 and frozen[0].last_step == 1 and frozen[0].severity == "medium"
    assert abs(frozen[0].data["frozen_share"] - (16 * 32 + 32 + 32 * 32 + 32) / (16 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4)) < 1e-9


def test_diagnose_reads_the_monitor_file_of_a_nan_run(tmp_path: Path) -> None:
    def nan_batch(step: int, _model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return x * float("nan") if step == 57 else x

    train(tmp_path / "run", steps=70, **FAST, fault=nan_batch)
    res = run_cli("diagnose", str(tmp_path / "run" / "trainaudit-monitor.jsonl"), "-o", str(tmp_path / "out"), "--quiet")
    assert res.returncode == 1, res.stderr  # unhealthy
    answer = json.loads((tmp_path / "out" / "answer.json").read_text())
    assert answer["final_answer"]["category"] == "nan_inf"
    assert answer["final_answer"]["first_bad_step"] == 57


def test_diagnose_joins_the_monitors_findings_to_its_stories(tmp_path: Path) -> None:
    """The monitor's own findings (MON*) are read back from its file by diagnose: a NaN the
    monitor traced to the input batch is the story's cause, not the lr jump seven steps before;
    parameter problems found at step 1 are findings at step 1."""
    def nan_batch(step: int, _model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if step == 57:
            x = x.clone()
            x[3, 2] = float("nan")
        return x

    train(tmp_path / "nan", steps=80, fault=nan_batch, lr_at=lambda s: 3e-3 if s < 50 else 3e-2, **FAST)
    res = run_cli("diagnose", str(tmp_path / "nan" / "trainaudit-monitor.jsonl"), "-o", str(tmp_path / "o1"), "--json")
    answer = json.loads(res.stdout)
    mon101 = [f for f in answer["findings"] if f["rule"] == "MON101"]
    assert len(mon101) == 1 and mon101[0]["first_bad_step"] == 57 and mon101[0]["metric"] == "0"
    assert "non-finite input entering 0" in mon101[0]["message"]
    lead = answer["final_answer"]["root_causes"][0]
    assert lead["category"] == "nan_inf" and mon101[0]["id"] in lead["evidence"]
    assert lead["issue"].startswith("the input batch of step 57 holds a non-finite value")
    assert "lr jumps" not in lead["issue"].split(". ")[0] and "input batch" in lead["fix"]

    model = build()
    model.register_parameter("unused", torch.nn.Parameter(torch.zeros(3)))  # never used in the forward: no gradient
    for p in list(model[0].parameters()) + list(model[2].parameters()):
        p.requires_grad_(False)
    train(tmp_path / "params", steps=10, model=model, optimizer_params=lambda m: m[4].parameters(), **FAST)
    res = run_cli("diagnose", str(tmp_path / "params" / "trainaudit-monitor.jsonl"), "-o", str(tmp_path / "o2"),
                  "--json")
    found = {f["rule"]: f for f in json.loads(res.stdout)["findings"]}
    for rule in ("MON201", "MON202", "MON203"):
        assert found[rule]["first_bad_step"] == 1, (rule, found.get(rule))
    assert found["MON201"]["severity"] == "high" and found["MON201"]["category"] == "plateau"


def test_tensorboard_writer_is_read_back(tmp_path: Path) -> None:
    res = train(tmp_path, steps=20, tensorboard=True, **FAST)
    run, _ = load_run([str(tmp_path / "tb")])
    assert run.series["loss"].steps.tolist() == list(range(1, 21))
    assert abs(run.series["loss"].value_at(20) - res.losses[19]) < 1e-6  # float32 in the event file


def test_import_trainaudit_does_not_import_torch() -> None:
    code = ("import sys, trainaudit, trainaudit.live.online, trainaudit.live.follow; print('torch' in sys.modules); "
            "import trainaudit.monitor; print(callable(trainaudit.monitor))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_the_gradient_screen_sees_a_nan_in_any_bias_and_forgets_it_after(tmp_path: Path) -> None:
    # the check before the update when the caller passes grad_norm: the 1-D parameters'
    # gradients, with parameters of two dtypes (the fused check takes one dtype at a time)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2).to(torch.bfloat16))
    mon = Monitor(model, None, tmp_path, **FAST)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    assert mon._screen_finite()
    model[1].bias.grad[1] = float("inf")
    assert not mon._screen_finite()
    model[1].bias.grad[1] = 0.0
    model[0].weight.grad[0, 0] = float("nan")  # a 2-D gradient: not screened (see docs/monitor.md)
    assert mon._screen_finite()
    model[0].bias.grad[3] = float("nan")
    assert not mon._screen_finite()
    model[0].bias.grad[3] = 1.0
    assert mon._screen_finite() and mon._screen_finite()  # the flag was reset
    assert model[0].bias.grad.tolist() == [1.0] * 8  # checked, not changed
    mon.close()


def _clocked_run(tmp_path: Path, *, nan_from: int | None, slow_from: int = 60, opt: str = "adam") -> list:
    """150 steps on a clock the loop sets: 10 ms a step, 14 ms from ``slow_from`` (as a NaN step's
    replay and NaN arithmetic slow a real run), so step times are what the test decides."""
    now = [0.0]

    def fault(step: int, model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        now[0] += 0.014 if step >= slow_from else 0.010
        if nan_from is not None and step >= nan_from:
            model[2].shift = 1e6  # LogOfNegative: NaN from here on
        return x

    res = train(tmp_path, steps=150, model=build("log"), fault=fault, clock=lambda: now[0], opt=opt,
                norm_tensor=opt == "adam_fused", rules_budget=0.0, warn=None, rules_every=10)
    return res.monitor.alerts


def test_a_slowdown_that_follows_the_first_nan_is_no_throughput_alert(tmp_path: Path) -> None:
    alerts = _clocked_run(tmp_path / "nan", nan_from=60)
    assert any(a.category == "nan_inf" and a.first_bad_step == 60 for a in alerts)
    assert not [a for a in alerts if a.category == "throughput_regression"], alerts
    # the same slowdown without a NaN is one
    healthy_then_slow = _clocked_run(tmp_path / "slow", nan_from=None)
    assert [a.rule for a in healthy_then_slow if a.category == "throughput_regression"] == ["TA406"]


def test_a_slowdown_before_the_first_nan_is_still_a_throughput_alert(tmp_path: Path) -> None:
    # with the check read before each update (for-each Adam) and with it read with the batch of
    # steps (fused Adam: the NaN is known some steps after it came)
    for opt in ("adam", "adam_fused"):
        alerts = _clocked_run(tmp_path / opt, nan_from=120, slow_from=40, opt=opt)
        assert any(a.category == "nan_inf" and a.first_bad_step == 120 for a in alerts)
        [slow] = [a for a in alerts if a.category == "throughput_regression"]
        assert slow.rule == "TA406" and slow.first_bad_step is not None and slow.first_bad_step < 120
        # and the slowdown that only follows the NaN is none, also when the NaN is read late
        after = _clocked_run(tmp_path / f"{opt}-after", nan_from=60, opt=opt)
        assert any(a.category == "nan_inf" and a.first_bad_step == 60 for a in after)
        assert not [a for a in after if a.category == "throughput_regression"], (opt, after)


def test_alerts_of_earlier_monitor_files_keep_their_first_bad_step(tmp_path: Path) -> None:
    # earlier monitors wrote the first bad step as "since" (the sample in tests/fixtures/formats is one)
    sample = Path(__file__).parents[1] / "fixtures" / "formats" / "trainaudit-monitor" / "trainaudit-monitor.jsonl"
    run, problems = load_run([str(sample)])
    warned = [e for e in run.events if e.kind == EventKind.WARNING]
    assert not problems and warned and all(e.data["first_bad_step"] == 57 for e in warned)
