"""The monitor reads nothing from the device on a healthy step: its per-step values are read
once per batch of steps, and with an optimizer that takes GradScaler's ``found_inf`` (fused Adam
here) the check before the update stays on the device too, while the NaN origin stays exact.
On CPU a "read" costs nothing, but it is the same call that waits for the GPU on CUDA
(``.item()``, ``.tolist()``, ``float(t)``...): counting them on a CPU run counts the syncs a GPU
run would make."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from tinyloop import build, records, train

from trainaudit.monitor.core import Monitor
from trainaudit.monitor.origin import NanOrigin
from trainaudit.rules import Config

FAST = {"rules_budget": 0.0, "warn": None, "config": Config(ignore=["TA406", "TA407", "TA408"])}
READS = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__")


class Still:
    """A clock that does not move: no flush is ever due to ``flush_s``, so when a batch is read
    is decided by steps alone."""

    def __call__(self) -> float:
        return 0.0


@contextlib.contextmanager
def counting_reads(monkeypatch: pytest.MonkeyPatch, entries: tuple[tuple[type, str], ...] = ()) -> Iterator[dict[str, Any]]:
    """Count host reads of tensors (and CUDA memory queries) made inside monitor code, by step:
    the monitor's entry points (step, its optimizer hooks, the model's forward pre-hook, and
    ``entries``: a framework callback's methods) are wrapped before the monitor binds them."""
    state: dict[str, Any] = {"inside": 0, "step": 0, "reads": collections.Counter(), "mem": collections.Counter()}

    def wrap_entry(cls: type, name: str) -> None:
        method = getattr(cls, name)

        def run(self: Any, *a: Any, **kw: Any) -> Any:
            state["inside"] += 1
            try:
                return method(self, *a, **kw)
            finally:
                state["inside"] -= 1

        monkeypatch.setattr(cls, name, run)

    for cls, name in ((Monitor, "step"), (Monitor, "_on_opt_pre"), (Monitor, "_on_opt_post"),
                      (Monitor, "close"), (NanOrigin, "_on_pre"), *entries):
        wrap_entry(cls, name)

    def wrap_read(name: str) -> None:
        method = getattr(torch.Tensor, name)

        def read(self: torch.Tensor, *a: Any, **kw: Any) -> Any:
            if state["inside"]:
                state["reads"][state["step"]] += 1
            return method(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, read)

    for name in READS:
        wrap_read(name)

    def mem_query(*_a: Any, **_kw: Any) -> int:
        state["mem"][state["step"]] += 1
        return 0

    # as on a GPU machine: the monitor queries the CUDA allocator's counters
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", mem_query)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", mem_query)
    yield state


def _monitored(tmp_path: Path, *, fused: bool = True,
               **options: Any) -> tuple[torch.nn.Module, torch.optim.Optimizer, Monitor, torch.Generator]:
    """The seeded tiny model, its Adam, a monitor on a still clock, and the batches' generator."""
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
    return model, opt, Monitor(model, opt, tmp_path, clock=Still(), **FAST, **options), torch.Generator().manual_seed(1)


def _loop(tmp_path: Path, state: dict[str, Any], steps: int, *, fused: bool, **options: Any) -> Monitor:
    """A loop that reads nothing itself: loss and clip_grad_norm_'s norm go to step() as tensors."""
    model, opt, mon, g = _monitored(tmp_path, fused=fused, **options)
    mon._cuda = True  # as on a GPU machine (torch.cuda.is_initialized is patched)
    with mon:
        for s in range(1, steps + 1):
            state["step"] = s
            x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            mon.step(loss, grad_norm=gn)
        state["step"] = steps + 1  # close()
    return mon


def test_a_healthy_step_reads_nothing_at_default_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with counting_reads(monkeypatch) as state:
        mon = _loop(tmp_path, state, 100, fused=True)
    reads = state["reads"]
    # step 1 and 100 are sampled (per-layer norms and update ratios, read at once); the batch of
    # steps is read every flush_every steps (25: rules_every caps it) and at close: nothing else
    assert mon.flush_every == 25
    assert set(reads) == {1, 26, 51, 76, 100}, reads
    assert all(reads[s] == 1 for s in (26, 51, 76))  # one read for a batch of 25 steps
    # CUDA memory counters with the RSS: step 1 and every mem_every (10) steps
    assert sorted(state["mem"]) == [1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    steps = [r for r in records(tmp_path) if r["type"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 101))
    assert all(isinstance(r["loss"], float) and isinstance(r["grad_norm"], float) for r in steps)
    assert [r["step"] for r in steps if "cuda_mem_allocated_mb" in r] == [1] + list(range(10, 101, 10))


def test_without_a_found_inf_optimizer_the_check_is_read_before_each_update(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the for-each Adam cannot skip an update on the device: exactness costs one read per step
    with counting_reads(monkeypatch) as state:
        _loop(tmp_path, state, 40, fused=False)
    assert all(state["reads"][s] == 1 + (s == 26) for s in range(2, 41)), state["reads"]
    # without the NaN origin nothing is read per step whatever the optimizer
    with counting_reads(monkeypatch) as state:
        _loop(tmp_path / "off", state, 40, fused=False, nan_origin=False)
    assert set(state["reads"]) == {1, 26, 41}, state["reads"]  # 41: close() reads the last batch


def _nan_input_at(step: int) -> Any:
    def fault(s: int, _model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if s == step:
            x = x.clone()
            x[3, 2] = float("nan")
        return x

    return fault


def test_a_nan_between_two_reads_is_located_exactly_when_its_batch_is_read(tmp_path: Path) -> None:
    # the NaN batch comes at step 40; the check's flag is read with the batch of steps 27..51
    res = train(tmp_path, steps=70, opt="adam_fused", norm_tensor=True, fault=_nan_input_at(40), clock=Still(), **FAST)
    [origin] = [a for a in res.monitor.alerts if a.rule == "MON101"]
    assert origin.first_bad_step == 40 and origin.last_step == 51
    assert origin.data["phase"] == "forward" and origin.metric == "0" and origin.data["input_nonfinite"]
    [rec] = [r for r in records(tmp_path) if r["type"] == "nonfinite"]
    assert rec["step"] == 40 and rec["module"] == "0"
    # the same run with the check read before each update finds the same origin at once
    ref = train(tmp_path / "ref", steps=70, fault=_nan_input_at(40), clock=Still(), **FAST)
    [at_once] = [a for a in ref.monitor.alerts if a.rule == "MON101"]
    assert at_once.last_step == 40 and at_once.data == origin.data


def test_a_backward_nan_between_two_reads_names_the_module_whose_backward_made_it(tmp_path: Path) -> None:
    model = build("bomb")

    def arm(step: int, m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        m[2].armed = step >= 45  # from step 45 on the backward of module 2 makes NaN
        return x

    res = train(tmp_path, steps=70, model=model, opt="adam_fused", norm_tensor=True, fault=arm, clock=Still(), **FAST)
    [origin] = [a for a in res.monitor.alerts if a.rule == "MON101"]
    assert origin.first_bad_step == 45 and origin.last_step == 51
    assert origin.data["phase"] == "backward" and origin.metric == "2"


def test_the_updates_after_the_first_nan_wait_for_its_read_then_go_on(tmp_path: Path) -> None:
    # the updates of steps 40..51 are not applied (the optimizer skips them on the device, as
    # GradScaler's found_inf makes it); from step 52 they go on with the monitor's flag detached
    seen: dict[int, torch.Tensor] = {}

    def watch(step: int, m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        seen[step] = m[0].bias.detach().clone()
        return _nan_input_at(40)(step, m, x)

    res = train(tmp_path, steps=70, opt="adam_fused", norm_tensor=True, fault=watch, clock=Still(), **FAST)
    # seen[s]: the parameters step s ran with (after step s-1's update)
    assert not torch.equal(seen[39], seen[40])  # step 39's update was applied
    assert all(torch.equal(seen[40], seen[s]) for s in range(41, 53))  # held from 40 through the read at 51
    assert not torch.equal(seen[52], seen[53])  # step 52's update was applied
    assert "found_inf" not in vars(res.monitor.optimizer)


def test_stop_on_a_nan_found_by_a_batch_read_stops_at_that_read(tmp_path: Path) -> None:
    res = train(tmp_path, steps=100, opt="adam_fused", norm_tensor=True, fault=_nan_input_at(40), clock=Still(),
                stop_on="critical", **FAST)
    assert res.steps_run == 51 and res.monitor.stopped is not None and res.monitor.stopped.first_bad_step == 40
    assert records(tmp_path)[-1]["status"] == "stopped"


def test_the_replay_time_is_not_a_step_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every step takes 10 ms on the loop's clock; a replay, 5 s: no step time shows it, whether
    # the replay runs before the update (for-each Adam) or when the batch is read (fused Adam)
    forward = NanOrigin._forward
    now = [0.0]

    def slow_replay(self: NanOrigin, cap: Any) -> Any:
        now[0] += 5.0
        return forward(self, cap)

    monkeypatch.setattr(NanOrigin, "_forward", slow_replay)
    for opt in ("adam", "adam_fused"):
        now[0] = 0.0

        def tick(step: int, m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
            now[0] += 0.010
            return _nan_input_at(45)(step, m, x)

        d = tmp_path / opt
        train(d, steps=70, opt=opt, norm_tensor=True, fault=tick, clock=lambda: now[0], **FAST)
        times = [r["step_time"] for r in records(d) if r["type"] == "step" and "step_time" in r]
        assert len(times) == 69 and max(times) < 0.011, (opt, max(times))
        assert now[0] > 5.0  # a replay did run


def test_with_a_closure_the_check_called_inside_it_holds_the_update_too(tmp_path: Path) -> None:
    # optimizer.step(closure): the forward and backward run inside step(), after its pre-hooks;
    # the loop calls before_update() after the backward (as the Lightning callback does)
    model, opt, mon, g = _monitored(tmp_path)
    seen: dict[int, torch.Tensor] = {}
    with mon:
        for s in range(1, 61):
            x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
            x = _nan_input_at(40)(s, model, x)
            seen[s] = model[0].bias.detach().clone()

            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                mon.before_update()
                return loss

            loss = opt.step(closure)
            mon.step(loss, grad_norm=torch.nn.utils.get_total_norm(
                [p.grad for p in model.parameters() if p.grad is not None]))
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    assert origin.first_bad_step == 40 and origin.last_step == 51
    assert origin.data["phase"] == "forward" and origin.metric == "0" and origin.data["input_nonfinite"]
    assert all(torch.equal(seen[40], seen[s]) for s in range(41, 53)) and not torch.equal(seen[52], seen[53])


def test_paused_reads_the_pending_steps_first_so_a_held_nan_is_located_before_the_block(tmp_path: Path) -> None:
    model, opt, mon, g = _monitored(tmp_path)

    def step(s: int, monitored: bool) -> None:
        x, y = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(_nan_input_at(10)(s, model, x)), y)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if monitored:
            mon.step(loss, grad_norm=gn)

    with mon:
        for s in range(1, 16):
            step(s, True)
        assert mon.origin is None  # step 10's flag is still on the device
        with mon.paused():
            assert mon.origin is not None and mon.origin["step"] == 10 and mon.origin["module"] == "0"
            assert "found_inf" not in vars(opt)  # the block's updates are the plain loop's
            before = model[0].bias.detach().clone()
            step(16, False)
            assert not torch.equal(before, model[0].bias)
    [origin] = [a for a in mon.alerts if a.rule == "MON101"]
    assert origin.first_bad_step == 10 and origin.last_step == 15 and origin.data["input_nonfinite"]


def test_inputs_past_the_held_budget_make_reads_more_frequent_not_the_origin_inexact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each step's input is 32 x 16 float32 = 2048 bytes; a budget of 5000 holds two steps' inputs,
    # so every third step's batch is read at once instead of dropping an input not yet checked
    import trainaudit.monitor.core as core

    monkeypatch.setattr(core, "MAX_HELD_BYTES", 5000)
    with counting_reads(monkeypatch) as state:
        _loop(tmp_path, state, 30, fused=True)
    assert sorted(state["reads"]) == [1, *range(4, 31, 3), 31], state["reads"]  # 31: close()
    res = train(tmp_path / "nan", steps=50, opt="adam_fused", norm_tensor=True, fault=_nan_input_at(40), clock=Still(),
                **FAST)
    [origin] = [a for a in res.monitor.alerts if a.rule == "MON101"]
    assert origin.first_bad_step == 40 and 40 <= origin.last_step <= 42
    assert origin.data["phase"] == "forward" and origin.metric == "0" and origin.data["input_nonfinite"]


def test_a_read_that_lands_later_is_waited_for_by_no_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as a CUDA copy whose event completes some steps after the batch was sent: here each batch's
    # values "land" at the third query; until then steps go on, records wait, updates stay held
    import trainaudit.monitor.core as core

    queries: dict[int, int] = {}
    waited: list[int] = []
    rows = core._Read.rows

    # a batch is known by its first step (an object's id can be reused once it is collected)
    def ready(self: Any) -> bool:
        first = self.pending[0][0]
        queries[first] = queries.get(first, 0) + 1
        return queries[first] >= 3

    def rows_when_ready(self: Any) -> Any:
        if queries.get(self.pending[0][0], 0) < 3:
            waited.append(self.pending[-1][0])  # a read not landed yet, waited for
        return rows(self)

    monkeypatch.setattr(core._Read, "ready", ready)
    monkeypatch.setattr(core._Read, "rows", rows_when_ready)
    seen: dict[int, torch.Tensor] = {}

    def watch(step: int, m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        seen[step] = m[0].bias.detach().clone()
        return _nan_input_at(40)(step, m, x)

    res = train(tmp_path, steps=70, opt="adam_fused", norm_tensor=True, fault=watch, clock=Still(), **FAST)
    assert waited == [70], waited  # close() waits for the last batch; no step does
    [origin] = [a for a in res.monitor.alerts if a.rule == "MON101"]
    # the batch of steps 27..51 is sent at 51 (first query there) and lands at the third, step 53
    assert origin.first_bad_step == 40 and origin.last_step == 53
    assert origin.data["phase"] == "forward" and origin.metric == "0"
    assert all(torch.equal(seen[40], seen[s]) for s in range(41, 55)) and not torch.equal(seen[54], seen[55])
    steps = [r["step"] for r in records(tmp_path) if r["type"] == "step"]
    assert steps == list(range(1, 71))  # every step once, in order
