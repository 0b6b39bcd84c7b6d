"""Bounded memory on long logs: a series too long to hold is thinned while read (its spikes, dips and
non-finite points keep their steps and lines, the points read are counted); a long run of like events
keeps its first and last events and counts those between. Below the caps, everything is read exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainaudit.diagnosis import build_answer, diagnose_run
from trainaudit.ingest import load_run
from trainaudit.ingest.sink import RunBuilder, thin
from trainaudit.model import EVENTS_LEFT_OUT, EventKind, Source


def _noisy(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 2.0 + 0.1 * rng.standard_normal(n)


def _feed(builder: RunBuilder, name: str, values: np.ndarray, by_one: bool) -> None:
    steps = np.arange(1, values.size + 1, dtype=np.int64)
    lines = steps * 3  # a line is not a step: each point cites its own line
    if by_one:
        for s, v, ln in zip(steps.tolist(), values.tolist(), lines.tolist(), strict=True):
            builder.add(name, s, v, ln)
    else:
        for a in range(0, values.size, 1000):
            builder.add_many(name, steps[a:a + 1000], values[a:a + 1000], lines[a:a + 1000])


def _builder(max_points: int, buckets: int) -> RunBuilder:
    b = RunBuilder()
    b.max_points, b.thin_buckets = max_points, buckets
    b.begin(Source("train.log", "generic"))
    return b


@pytest.mark.parametrize("by_one", [True, False])
def test_long_series_is_thinned_keeping_spike_dip_and_non_finite_points(by_one: bool) -> None:
    n = 50_000
    v = _noisy(n)
    v[12_345 - 1] = 40.0  # a spike at step 12345
    v[23_456 - 1] = -7.0  # a dip
    v[30_000 - 1] = np.inf  # one +Inf inside the finite part
    v[41_000 - 1:] = np.nan  # NaN from step 41000 on
    b = _builder(max_points=3000, buckets=20)
    _feed(b, "loss", v, by_one)
    b.end()
    run = b.build()
    s = run.series["loss"]
    assert len(s) < 3000  # thinned
    assert np.all(np.diff(s.steps) > 0)
    assert s.steps[0] == 1 and s.steps[-1] == n  # first and last point kept
    got = dict(zip(s.steps.tolist(), s.values.tolist(), strict=True))
    assert got[12_345] == 40.0
    assert got[23_456] == -7.0
    assert got[30_000] == np.inf
    assert np.isnan(got[41_000])  # where the series turns NaN keeps its step
    assert np.array_equal(s.lines, s.steps * 3)  # each kept point cites its own line
    first_bad = int(s.steps[np.flatnonzero(~np.isfinite(s.values))[0]])
    assert first_bad == 30_000
    assert run.read_counts("loss") == (n, 1 + (n - 41_000 + 1))
    # an even sample is kept: the thinned curve's median is the series' median
    fin = s.values[np.isfinite(s.values)]
    assert abs(float(np.median(fin)) - 2.0) < 0.05


def test_series_below_the_cap_is_read_exactly() -> None:
    v = _noisy(2999)
    v[100] = np.nan
    b = _builder(max_points=3000, buckets=20)
    _feed(b, "loss", v, by_one=True)
    b.end()
    run = b.build()
    s = run.series["loss"]
    assert np.array_equal(s.values, v, equal_nan=True)
    assert s.steps.tolist() == list(range(1, 3000))
    assert run.read_counts("loss") is None
    assert "thinned" not in run.meta


def test_thin_keeps_extremes_of_each_range() -> None:
    steps = np.arange(10_000, dtype=np.int64) * 7 - 2**62  # steps far from 0 and spaced: exact arithmetic
    values = np.zeros(10_000)
    values[::97] = np.arange(values[::97].size, dtype=float)  # a rising extreme in every range
    values[5003] = -1.0  # one dip, away from the even sample
    keep = thin(steps, values, 10)
    assert 0 < keep.size < 1000
    assert np.all(np.diff(keep) > 0)
    assert keep[0] == 0 and keep[-1] == 9999
    assert 5003 in keep and int(np.argmax(values)) in keep
    # the highest value of each of the ten ranges is kept: ten rising extremes at least
    kept_peaks = np.flatnonzero(values[keep] > 0)
    assert kept_peaks.size >= 10
    # thinned again with wider ranges, the highest and lowest values stay
    again = keep[thin(steps[keep], values[keep], 3)]
    assert 5003 in again and int(np.argmax(values)) in again


def test_thinned_run_is_diagnosed_with_counts_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "train.log"
    rows = []
    for step in range(1, 20_001):
        loss = "nan" if step >= 16_000 else f"{2.0 + 0.01 * ((step * 7919) % 13):.4f}"
        rows.append(f"step {step} loss {loss}")
    rows.append("RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.")
    log.write_text("\n".join(rows) + "\n", encoding="utf-8")

    monkeypatch.setattr(RunBuilder, "max_points", 4000)
    monkeypatch.setattr(RunBuilder, "thin_buckets", 25)
    run, problems = load_run([str(log)])
    s = run.series["loss"]
    assert len(s) < 4000
    assert run.read_counts("loss") == (20_000, 4001)
    assert any("thinned while read" in p.message and not p.fatal for p in problems)
    result = diagnose_run(run)
    assert result.first_bad_step == 16_000
    answer = build_answer([str(log)], run, result)
    cov = answer.final_answer.coverage
    assert cov is not None
    assert cov.metrics["loss"].read_points == 20_000
    assert cov.metrics["loss"].points == len(s)
    nan_finding = next(f for f in answer.findings if f.rule == "TA101")
    assert "4001 of 20000 logged values non-finite" in nan_finding.message


def _overflow_log(path: Path, n: int) -> Path:
    """``n`` steps, each followed by one apex amp overflow line (apex/amp/scaler.py, update_scale):
    the scale halves down to 1 and stays there."""
    rows, scale = [], 65536.0
    for step in range(1, n + 1):
        rows.append(f"step {step} loss {2.0 + 0.001 * (step % 7):.4f}")
        scale = max(scale / 2, 1.0)
        rows.append(f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {scale}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _findings(paths: list[str]) -> tuple[list[tuple[str, str, list[int | None]]], int]:
    run, _ = load_run(paths)
    answer = build_answer(paths, run, diagnose_run(run))
    facts = {f.id: f for f in answer.extracted_facts}
    cov = answer.final_answer.coverage
    assert cov is not None
    return [(f.rule, f.message, [facts[e].line for e in f.evidence if e in facts]) for f in answer.findings], cov.events


def test_long_event_run_is_counted_and_its_first_and_last_lines_cited(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = str(_overflow_log(tmp_path / "train.log", 3000))
    whole, whole_events = _findings([log])
    monkeypatch.setattr(RunBuilder, "keep_events", 50)
    run, problems = load_run([log])
    kept = [e for e in run.events if e.kind is EventKind.LOSS_SCALE]
    assert len(kept) == 100  # the first 50 and the last 50, in line order
    assert [e.line for e in kept] == list(range(2, 101, 2)) + list(range(5902, 6001, 2))
    assert all(e.raw.startswith("Gradient overflow.") for e in kept)  # real lines, quoted whole
    assert run.n_events(EventKind.LOSS_SCALE) == 3000 and run.left_out(EventKind.LOSS_SCALE) == 2900
    assert run.meta[EVENTS_LEFT_OUT]["loss_scale"] == [2900, 51, 2950, 102, 5900]
    assert any("2900 loss_scale events between lines 102 and 5900" in p.message and not p.fatal for p in problems)
    counted, counted_events = _findings([log])
    assert counted == whole  # the same findings, messages and cited lines as with every event kept
    assert counted_events == whole_events == 3000
    ta104 = next(f for f in counted if f[0] == "TA104")
    assert ta104[1].startswith("3000 fp16 overflows reduced the loss scale to 1")
    assert 2 in ta104[2] and 6000 in ta104[2]  # the first and the last overflow's lines


def test_events_below_the_cap_are_all_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RunBuilder, "keep_events", 50)
    run, problems = load_run([str(_overflow_log(tmp_path / "train.log", 100))])
    assert [e.line for e in run.events if e.kind is EventKind.LOSS_SCALE] == list(range(2, 201, 2))
    assert EVENTS_LEFT_OUT not in run.meta and run.left_out() == 0
    assert not any("counted, not kept" in p.message for p in problems)


def test_many_series_are_thinned_to_a_share_of_the_points_held() -> None:
    # one metric per rank: no series is long alone, all of them together are
    b = _builder(max_points=100_000, buckets=1000)
    b.max_held = 40_000
    for rank in range(20):
        v = _noisy(5000, seed=rank)
        v[1234 + rank] = 99.0 + rank  # a spike at its own step in each
        b.metric_for("tflops", 0)
        _feed(b, b.metric_for("tflops", rank), v, by_one=False)
    b.end()
    run = b.build()
    assert len(run.series) == 20
    assert sum(len(s) for s in run.series.values()) <= 40_000
    for rank in range(20):
        s = run.series["tflops" if rank == 0 else f"tflops@rank{rank}"]
        assert len(s) < 5000
        assert run.read_counts(s.name) == (5000, 0)
        assert float(s.values[s.steps == 1235 + rank][0]) == 99.0 + rank
