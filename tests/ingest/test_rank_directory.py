"""A directory of per-rank logs (``torchrun --tee``: every line ``[rankN]:``-prefixed): the rank that
carries the metrics is read in full, the others skimmed for what tells ranks apart (errors,
timeouts, non-finite values, where each stopped). The answer still names the rank that failed
first, a NaN on a skimmed rank is not missed, a healthy directory stays healthy, and every skimmed
log says in the answer what was read of it."""

from __future__ import annotations

import json
import math
from pathlib import Path

from shared_data import run_cli

from trainaudit.ingest import detect, load_run, scan
from trainaudit.ingest.ranks import FEW_SHAPES, HEAD_BYTES, MAX_KEPT, SKIM_MIN_RANKS, TAIL_BYTES, Skim, file_rank,\
    skim
from trainaudit.ingest.formats.megatron.lines import MegatronReader
from trainaudit.ingest.sink import RunBuilder
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind, Run, Source

RANKS = 10
STEPS = 600  # about 180 KB a rank: far more than the head and tail a skim reads in full


def _loss(step: int) -> float:
    return 2.0 + 8.0 * 0.995 ** step + 0.01 * math.sin(step)


def _megatron(rank: int, step: int, nan: bool = False) -> str:
    # Megatron-LM leaves a NaN loss out of the line and counts it (training_log, "number of nan iterations")
    loss = "" if nan else f" lm loss: {_loss(step):.6E} |"
    return (f"[rank{rank}]: [2024-04-06 02:{step // 60 % 60:02d}:{step % 60:02d}] iteration {step:8d}/ {STEPS:8d} | "
            f"consumed samples: {step * 128:12d} | elapsed time per iteration (ms): {5200 + rank + step % 7:.1f} | "
            f"learning rate: 3.000000E-04 | global batch size:   128 |{loss} loss scale: 1.0 | "
            f"grad norm: {1 + 0.1 * math.cos(step):.3f} | number of skipped iterations:   0 | "
            f"number of nan iterations: {int(nan):3d} |\n")


def _titan(rank: int, step: int, loss: float | None = None) -> str:
    value = _loss(step) if loss is None else loss
    return (f"[rank{rank}]:[titan] 2024-04-06 02:{step // 60 % 60:02d}:{step % 60:02d},{rank:03d} - root - INFO - "
            f"step: {step:2d}  loss: {value:8.5f}  grad_norm: {1 + 0.1 * math.cos(step):7.4f}  "
            f"memory: 66.91GiB(37.51%)  tps: {9900 + rank:,}  tflops: 312.00  mfu: 13.90%\n")


TRACEBACK = ["Traceback (most recent call last):",
             '  File "/workspace/train.py", line 212, in <module>',
             "    main()",
             '  File "/workspace/train.py", line 198, in main',
             "    loss.backward()",
             "RuntimeError: CUDA error: an illegal memory access was encountered"]


def _timeout(rank: int, seq: int) -> str:
    return (f"[rank{rank}]:[E0406 03:20:00.123456 4242 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.\n")


def _frames(rank: int, n: int = 150) -> list[str]:
    # the C++ frames a dying process prints after its error (c10::Error's backtrace): more than the
    # tail a skim reads in full, so the error itself must be found by the skim's scan
    return [f"[rank{rank}]:frame #{i}: <unknown function> + 0x{i * 4096:x} (0x7f3a2c{i:06x} in "
            "/usr/lib/x86_64-linux-gnu/libc.so.6)\n" for i in range(n)]


def _write(folder: Path, lines_of: dict[int, list[str]]) -> Path:
    folder.mkdir(parents=True)
    for rank, lines in lines_of.items():
        (folder / f"rank_{rank:03d}.log").write_text("".join(lines), encoding="utf-8")
    return folder


def _diagnose(target: Path, tmp_path: Path) -> tuple[dict, str]:
    out = tmp_path / "out"
    res = run_cli("diagnose", str(target), "-o", str(out), "--no-plots")
    assert res.returncode in (0, 1), res.stderr
    return json.loads((out / "answer.json").read_text(encoding="utf-8")), res.stderr


def _skimmed(answer: dict) -> dict[str, str]:
    return {s["path"].rsplit("/", 1)[-1]: s["description"] for s in answer["source_refs"] if "skimmed" in s["description"]}


def test_the_rank_that_failed_first_is_named(tmp_path: Path) -> None:
    # rank 6 dies with a CUDA error in the middle of training; the other ranks wait in the next
    # all-reduce and their NCCL watchdogs fire ten minutes later
    fail, stop = 6, 400
    logs = {}
    for r in range(RANKS):
        lines = [_megatron(r, s) for s in range(1, stop + 1)]
        lines += [f"[rank{r}]:{t}\n" for t in TRACEBACK] if r == fail else [_timeout(r, stop + 1)]
        logs[r] = lines + _frames(r)
    answer, _ = _diagnose(_write(tmp_path / "job", logs), tmp_path)
    ta404 = next(f for f in answer["findings"] if f["rule"] == "TA404")
    assert f"rank {fail} failed first" in ta404["message"]
    assert answer["final_answer"]["verdict"] == "crash"
    skimmed = _skimmed(answer)
    # rank 0 carries the metrics and is read in full; every other rank is skimmed and says so
    assert len(skimmed) == RANKS - 1 and not any("rank_000" in p for p in skimmed)
    note = skimmed[f"rank_{fail:03d}.log"]
    assert f"rank {fail}, skimmed" in note and f"last step {stop}" in note
    # the failing rank's own traceback was read from the skimmed log, in its own file
    assert any(f["rule"] == "TA410" for f in answer["findings"])
    # the answer's coverage names the skimmed sources, and its summary line says so
    refs = {r["id"]: r for r in answer["source_refs"]}
    ids = answer["final_answer"]["coverage"]["skimmed"]
    assert sorted(refs[i]["path"].rsplit("/", 1)[-1] for i in ids) == sorted(skimmed)
    md = (tmp_path / "out" / "answer.md").read_text(encoding="utf-8")
    assert f"{RANKS - 1} source(s) skimmed" in md


def test_skimming_finds_the_events_a_full_read_finds(tmp_path: Path) -> None:
    fail = 3
    logs = {r: [_titan(r, s) for s in range(1, STEPS + 1)] for r in range(RANKS)}
    # a traceback in the middle of rank 5's log (a caught exception, training goes on)
    logs[5][STEPS // 2:STEPS // 2] = [f"[rank5]:{t}\n" for t in TRACEBACK[:-1]] + ["[rank5]:ValueError: bad sample\n"]
    logs[fail] += [f"[rank{fail}]:{t}\n" for t in TRACEBACK]
    for r in range(RANKS):
        if r != fail:
            logs[r].append(_timeout(r, STEPS + 1))
        logs[r] += _frames(r)
    job = _write(tmp_path / "job", logs)
    skimmed, problems = load_run([str(job)])
    full = RunBuilder()
    scan([str(job)], full)  # no skims: every line of every rank
    whole = full.build()

    def key(run: Run) -> list[tuple[str, str, int, int | None, int | None]]:
        return sorted((e.kind.value, e.source, e.line, e.rank, e.step) for e in run.events)

    assert key(skimmed) == key(whole)
    # the caught traceback in the middle of rank 5's log is placed at its step, as a full read places it
    assert {(e.rank, e.step) for e in skimmed.events if e.kind == EventKind.TRACEBACK} == {(fail, STEPS), (5, STEPS // 2)}
    assert sum(s.note.startswith("rank ") for s in skimmed.sources) == RANKS - 1
    # the rank read in full is the lowest: its curve is the run's, whole
    assert len(skimmed.series["loss"]) == STEPS
    assert any("per-rank logs skimmed (ranks 1-9)" in p.message for p in problems)


def test_a_nan_on_a_skimmed_rank_is_not_missed(tmp_path: Path) -> None:
    # rank 7's loss goes NaN from step 350 (its own data shard); rank 0 never prints one
    bad, first_nan = 7, 350
    logs = {}
    for r in range(RANKS):
        logs[r] = [_titan(r, s, math.nan if r == bad and s >= first_nan else None) for s in range(1, STEPS + 1)]
    answer, _ = _diagnose(_write(tmp_path / "job", logs), tmp_path)
    fa = answer["final_answer"]
    assert fa["category"] == "nan_inf" and fa["first_bad_step"] == first_nan, fa["summary"]
    note = _skimmed(answer)[f"rank_{bad:03d}.log"]
    assert f"{STEPS - first_nan + 1} non-finite value(s)" in note


def test_a_megatron_nan_iteration_on_a_skimmed_rank_is_not_missed(tmp_path: Path) -> None:
    # Megatron leaves the NaN loss out of the line: the skim reads the lines that count NaN iterations
    bad, nan_step = 4, 300
    logs = {r: [_megatron(r, s, nan=r == bad and s == nan_step) for s in range(1, STEPS + 1)] for r in range(RANKS)}
    job = _write(tmp_path / "job", logs)
    run, _ = load_run([str(job)])
    loss = run.series["lm loss"]
    i = int((loss.steps == nan_step).nonzero()[0][0])
    assert math.isnan(loss.values[i])
    assert run.sources[int(loss.src[i])].path.endswith(f"rank_{bad:03d}.log")
    assert any(e.kind == EventKind.MISSING_METRIC and e.step == nan_step for e in run.events)


def test_a_healthy_directory_stays_healthy(tmp_path: Path) -> None:
    logs = {r: [_megatron(r, s) for s in range(1, STEPS + 1)] for r in range(RANKS)}
    answer, stderr = _diagnose(_write(tmp_path / "job", logs), tmp_path)
    fa = answer["final_answer"]
    assert fa["verdict"] == "healthy", fa["summary"]
    assert not [f for f in answer["findings"] if f["severity"] != "info"]
    notes = _skimmed(answer).values()
    assert len(notes) == RANKS - 1
    # identical reduced values on every rank: each skimmed rank agrees with rank 0 where compared
    assert all("equal the run's" in n and "differ" not in n for n in notes)
    assert len(answer["final_answer"]["coverage"]["skimmed"]) == RANKS - 1
    assert "per-rank logs skimmed" in stderr


def test_a_rank_whose_loss_differs_is_said(tmp_path: Path) -> None:
    odd = 5
    logs = {r: [_titan(r, s, _loss(s) + (0.5 if r == odd else 0.0)) for s in range(1, STEPS + 1)] for r in range(RANKS)}
    job = _write(tmp_path / "job", logs)
    run, problems = load_run([str(job)])
    by_rank = {s.path.rsplit("_", 1)[1]: s.note for s in run.sources}
    assert "its loss differ from the run's" in by_rank[f"{odd:03d}.log"]
    assert "differ" not in by_rank["004.log"]
    assert any(f"ranks {odd} log values that differ" in p.message for p in problems)


def test_few_ranks_are_read_in_full(tmp_path: Path) -> None:
    logs = {r: [_titan(r, s) for s in range(1, 100)] for r in range(SKIM_MIN_RANKS - 1)}
    run, problems = load_run([str(_write(tmp_path / "job", logs))])
    assert not any(s.note for s in run.sources)
    assert not any("skimmed" in p.message for p in problems)


def test_file_rank_needs_one_rank() -> None:
    assert file_rank(b"[rank3]: a\n[rank3]: b\nplain\n") == 3
    assert file_rank(b"[rank3]: a\n[rank4]: b\n") is None
    assert file_rank(b"a\nb\nc\n[rank1]: d\n") is None
    assert file_rank(b"") is None


def _skim_file(path: Path, rank: int = 1, keep: int = MAX_KEPT) -> tuple[Skim, RunBuilder]:
    inp = expand_inputs([str(path)])[0]
    sink = RunBuilder()
    sink.begin(Source(inp.display, "megatron"))
    found = skim(inp, MegatronReader(), sink, rank, keep)
    sink.end()
    return found, sink


def test_a_log_of_many_distinct_errors_is_skimmed_whole(tmp_path: Path) -> None:
    # more signalling line shapes than are looked for one by one: one pass over the lines finds them
    n = 40 * FEW_SHAPES
    text = "".join(f"[rank1]: RuntimeError: worker {'x' * (i % 97)}{'y' * (i // 97)} failed\n" for i in range(n))
    path = tmp_path / "rank_001.log"
    path.write_text(_megatron(1, 1) + text + _megatron(1, 2), encoding="utf-8")
    found, _ = _skim_file(path)
    assert found.lines == n + 2
    assert found.parsed == n + 2


def test_a_large_skimmed_log_keeps_little(tmp_path: Path) -> None:
    path = tmp_path / "rank_001.log"
    with open(path, "w", encoding="utf-8") as f:
        for s in range(1, 60_001):
            f.write(_megatron(1, s))
    found, sink = _skim_file(path)
    assert found.lines == 60_000 and found.last_step == 60_000
    # the head and tail only: a few hundred lines of sixty thousand, values kept within the bound
    assert found.parsed * 300 < 2 * (HEAD_BYTES + TAIL_BYTES) + 2 * 300
    assert found.kept <= MAX_KEPT and sink.n_values == 0
    few, _ = _skim_file(path, keep=10)
    assert few.kept == 10 and sum(len(steps) for steps, _ in few.values.values()) == 10


def test_rank_logs_of_one_shape_are_sniffed_once_and_read_by_their_format(tmp_path: Path) -> None:
    # megatron on even ranks, torchtitan on odd ones: each log still gets its own format
    logs = {r: [(_megatron if r % 2 == 0 else _titan)(r, s) for s in range(1, 200)] for r in range(2 * RANKS)}
    job = _write(tmp_path / "job", logs)
    detected = detect(expand_inputs([str(job)]), explicit={str(job)})
    assert [d.reader.name for d in detected] == ["megatron" if r % 2 == 0 else "torchtitan" for r in range(2 * RANKS)]
    assert [d.rank.rank if d.rank else None for d in detected] == list(range(2 * RANKS))
    shapes = {d.rank.shape for d in detected if d.rank}
    assert len(shapes) == 2  # the ranks' numbers differ, their shapes do not
    run, _ = load_run([str(job)])
    # one rank of each format read in full (0 and 1), the others skimmed
    assert [bool(s.note) for s in run.sources] == [r > 1 for r in range(2 * RANKS)]


def test_every_log_of_the_rank_read_in_full_is_read_in_full(tmp_path: Path) -> None:
    # a restarted job: attempt_1 holds a second log of every rank, from step 301 on
    job = tmp_path / "job"
    for attempt, steps in (("attempt_0", range(1, 301)), ("attempt_1", range(301, STEPS + 1))):
        _write(job / attempt, {r: [_titan(r, s) for s in steps] for r in range(RANKS)})
    run, _ = load_run([str(job)])
    full = [s.path for s in run.sources if not s.note]
    assert sorted(p.split("job/")[1] for p in full) == ["attempt_0/rank_000.log", "attempt_1/rank_000.log"]
    loss = run.series["loss"]
    assert len(loss) == STEPS and int(loss.steps[0]) == 1 and int(loss.steps[-1]) == STEPS


def test_the_tracebacks_of_ranks_aborted_after_the_root_do_not_name_them(tmp_path: Path) -> None:
    # every other rank raises DistBackendError once its communicator is aborted: rank 0's traceback comes
    # first in the folder's order, but it is a consequence; rank 6's own error is the root
    fail, stop = 6, 400
    logs = {}
    for r in range(RANKS):
        lines = [_megatron(r, s) for s in range(1, stop + 1)]
        if r == fail:
            lines += [f"[rank{r}]:{t}\n" for t in TRACEBACK]
        else:
            lines += [_timeout(r, stop + 1), *(f"[rank{r}]:{t}\n" for t in TRACEBACK[:-1]),
                      f"[rank{r}]:torch.distributed.DistBackendError: NCCL communicator was aborted on rank {r}.\n"]
        logs[r] = lines
    answer, _ = _diagnose(_write(tmp_path / "job", logs), tmp_path)
    ta404 = next(f for f in answer["findings"] if f["rule"] == "TA404")
    assert f"rank {fail} failed first" in ta404["message"], ta404["message"]
