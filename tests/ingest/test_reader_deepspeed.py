"""DeepSpeed engine lines (overflow / loss scale, step/skipped/lr, ThroughputTimer, timer breakdown)
on the verbatim samples, alone and mixed into Megatron-DeepSpeed and HF Trainer logs."""

from __future__ import annotations

from pathlib import Path

from shared_data import corpus_log, run_cli, sample_block, write_lines
from trainaudit.ingest import detect, load_run
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind

# fp16 loss-scale calibration at the start of a run, recent format with int scales (lines 7-8 of the log)
COGVIDEO = corpus_log("deepspeed-deepspeedai-DeepSpeedExamples-dschat-step1-sft")[6:8]
HYSTERESIS = sample_block("deepspeed.txt", "DeepSpeed/issues/931")
DEEPSCALE_BAR = sample_block("deepspeed.txt", "transformers/issues/9996")
PROGRESS = sample_block("deepspeed.txt", "DeepSpeed/issues/1825")
TPUT_077 = sample_block("deepspeed.txt", "DeepSpeed/issues/2598")
MEGATRON_DS = sample_block("deepspeed.txt", "DeepSpeed/issues/3742")
AT_FLOOR = sample_block("deepspeed.txt", "transformers/issues/14531")
ZERO3_BAR = sample_block("deepspeed.txt", "gpt-neo-fine-tuning-example/issues/7")
# DeepSpeed's exception text (deepspeed/runtime/fp16/loss_scaler.py, raise_error_at_min_scale)
MIN_SCALE = ["Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."]
HF = sample_block("hf_transformers.txt", "transformers/pull/35207")
MEGATRON = sample_block("megatron.txt", "Megatron-LM/issues/756")
MEGATRON_DS_NAN = sample_block("megatron_deepspeed.txt", "Megatron-DeepSpeed/issues/396")


def _detected(path: Path) -> str:
    return detect(expand_inputs([str(path)]))[0].reader.name


def _load(tmp_path: Path, lines: list[str], name: str = "ds.log"):  # type: ignore[no-untyped-def]
    log = write_lines(tmp_path / name, lines)
    run, problems = load_run([str(log)])
    assert problems == []
    return run


def test_overflow_lines_become_events_and_loss_scale_series(tmp_path: Path) -> None:
    run = _load(tmp_path, COGVIDEO)
    assert run.frameworks == ["deepspeed"]
    ls = run.series["loss scale"]
    # No step line in this excerpt: the step is the count of overflows seen.
    assert ls.steps.tolist() == [1, 2]
    assert ls.values.tolist() == [32768.0, 16384.0]
    evs = [e for e in run.events if e.kind == EventKind.LOSS_SCALE]
    assert [(e.step, e.line) for e in evs] == [(1, 1), (2, 2)]
    assert evs[0].data["attempted"] == 65536.0 and evs[0].data["new"] == 32768.0
    assert evs[0].data["rank"] == 0 and evs[0].data["tag"] == "deepspeed" and evs[0].data["step_estimated"]


def test_hysteresis_variant_keeps_the_scale(tmp_path: Path) -> None:
    run = _load(tmp_path, HYSTERESIS)
    evs = [e for e in run.events if e.kind == EventKind.LOSS_SCALE]
    assert evs[0].data["hysteresis"] == 2 and evs[0].data["new_hysteresis"] == 1
    assert evs[0].data["attempted"] == 65536.0 and evs[0].data["new"] == 65536.0
    assert evs[1].data["new"] == 32768.0 and "hysteresis" not in evs[1].data
    assert run.series["loss scale"].values.tolist() == [65536.0, 32768.0]


def test_deepscale_overflow_glued_to_tqdm_bar_takes_the_bar_step(tmp_path: Path) -> None:
    run = _load(tmp_path, DEEPSCALE_BAR)
    ev = next(e for e in run.events if e.kind == EventKind.LOSS_SCALE)
    assert ev.data["tag"] == "deepscale" and ev.data["attempted"] == 134217728.0
    # "6/1184 [...]" then the overflow: the 7th optimizer step was skipped.
    assert ev.step == 7 and run.series["loss scale"].value_at(7) == 67108864.0


def test_zero3_overflow_step_agrees_with_the_throughput_timer(tmp_path: Path) -> None:
    run = _load(tmp_path, ZERO3_BAR)
    assert run.series["loss scale"].steps.tolist() == [10]
    assert run.series["loss scale"].values.tolist() == [8388608.0]
    assert run.series["SamplesPerSec"].steps.tolist() == [10]
    assert run.series["SamplesPerSec"].values.tolist() == [1.8825260836384787]


def test_progress_and_throughput_lines(tmp_path: Path) -> None:
    run = _load(tmp_path, PROGRESS)
    assert run.series["skipped"].steps.tolist() == [40] and run.series["skipped"].values.tolist() == [2.0]
    assert run.series["lr"].value_at(40) == 5e-05
    assert run.series["SamplesPerSec"].value_at(40) == 83.48609168106144
    assert run.series["MemAllocated"].value_at(40) == 0.26
    assert run.series["MaxMemAllocated"].value_at(40) == 9.02
    assert run.series["MaxMemAllocated"].lines.tolist() == [2]
    assert run.meta["framework"] == "deepspeed"  # the step line must not elect the key=value reader


def test_overflow_step_counts_from_the_last_engine_step(tmp_path: Path) -> None:
    run = _load(tmp_path, PROGRESS + COGVIDEO)
    assert run.series["loss scale"].steps.tolist() == [41, 42]
    assert [e.step for e in run.events if e.kind == EventKind.LOSS_SCALE] == [41, 42]


def test_throughput_timer_077_format(tmp_path: Path) -> None:
    run = _load(tmp_path, TPUT_077)
    assert run.series["RunningAvgSamplesPerSec"].value_at(1567) == 13.03086402503502
    assert run.series["CurrSamplesPerSec"].value_at(1567) == 13.308834034384216
    assert run.series["MemAllocated"].value_at(1567) == 2.66


def test_mixed_megatron_deepspeed_log_reads_both(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "mds.log", MEGATRON_DS)
    # DeepSpeed engine lines plus a Megatron iteration line: the deepspeed reader wins and hands
    # the iteration line to the megatron reader, so nothing is lost.
    assert _detected(log) == "deepspeed"
    run, _ = load_run([str(log)])
    assert run.meta["framework"] == "deepspeed+megatron"
    assert run.series["RunningAvgSamplesPerSec"].value_at(34) == 7.864669709950182
    assert run.series["MaxMemAllocated"].value_at(34) == 63.31
    assert run.series["forward_microstep (ms)"].value_at(34) == 652.42
    assert run.series["step_microstep (ms)"].value_at(34) == 1172.13
    assert run.series["lm_loss"].steps.tolist() == [34] and run.series["lm_loss"].values.tolist() == [11.18665]
    assert run.series["lm_loss"].lines.tolist() == [3]
    assert run.series["skipped"].value_at(35) == 0.0
    assert run.series["lr"].value_at(35) == 2.1731931451279077e-06
    assert "lr[1]" not in run.series  # equal param groups are not repeated


def test_mixed_hf_trainer_log_reads_dicts_and_overflows(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "hf_ds.log", [HF[0], *DEEPSCALE_BAR, *HF[1:]])
    assert _detected(log) == "deepspeed"
    run, _ = load_run([str(log)])
    assert run.meta["framework"] == "deepspeed+hf"
    assert run.series["loss"].values.tolist() == [10.5949, 8.2312, 5.8247]
    assert run.series["loss scale"].value_at(7) == 67108864.0


def test_scale_at_floor_is_flagged(tmp_path: Path) -> None:
    run = _load(tmp_path, AT_FLOOR)
    ev = next(e for e in run.events if e.kind == EventKind.LOSS_SCALE)
    assert ev.data["attempted"] == 1.0 and ev.data["new"] == 1.0 and ev.data["at_minimum"] is True


def test_overflows_before_the_first_bar_take_the_bar_step(tmp_path: Path) -> None:
    # transformers#14531: the paste starts with an overflow, then "98/24128 [...]" glued to the next one
    run = _load(tmp_path, corpus_log("deepspeed-huggingface-transformers-14531"))
    steps = [e.step for e in run.events if e.kind == EventKind.LOSS_SCALE]
    assert steps[:3] == [98, 99, 100]  # the first overflow was step 98, the bar showed it done
    assert run.series["loss scale"].steps.tolist()[0] == 98


def test_overflows_before_a_step_line_end_at_its_step(tmp_path: Path) -> None:
    overflow = ("[2021-01-01 00:00:00,000] [INFO] [stage2.py:1628:step] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                "Attempted loss scale: 65536, reducing to 32768")
    run = _load(tmp_path, [overflow, overflow.replace("65536, reducing to 32768", "32768, reducing to 16384"),
                           PROGRESS[0]])
    step = int(PROGRESS[0].split("step=")[1].split(",")[0])
    assert [e.step for e in run.events if e.kind == EventKind.LOSS_SCALE] == [step - 1, step]
    assert run.series["loss scale"].values.tolist() == [32768.0, 16384.0]


def test_min_scale_exception_is_one_event(tmp_path: Path) -> None:
    # Whether the shared signature scanner or this reader reports it, it is reported exactly once.
    run = _load(tmp_path, COGVIDEO + MIN_SCALE)
    mins = [e for e in run.events if e.kind == EventKind.LOSS_SCALE_MIN]
    assert len(mins) == 1 and mins[0].line == 3


def test_detection_against_other_readers(tmp_path: Path) -> None:
    for i, block in enumerate((COGVIDEO, HYSTERESIS, DEEPSCALE_BAR, PROGRESS, TPUT_077, AT_FLOOR, ZERO3_BAR)):
        assert _detected(write_lines(tmp_path / f"ds{i}.log", block)) == "deepspeed"
    # Pure Megatron / Megatron-DeepSpeed iteration logs stay with the megatron reader, HF with hf.
    assert _detected(write_lines(tmp_path / "m.log", MEGATRON)) == "megatron"
    assert _detected(write_lines(tmp_path / "mds.log", MEGATRON_DS_NAN)) == "megatron"
    assert _detected(write_lines(tmp_path / "hf.log", HF)) == "hf"


def test_cli_parse_deepspeed(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "ds.log", PROGRESS + COGVIDEO)
    res = run_cli("parse", str(log))
    assert res.returncode == 0, res.stderr
    assert "deepspeed" in res.stdout and "loss_scale=2" in res.stdout


def test_each_engine_pattern_is_searched_only_where_its_literal_is(tmp_path: Path) -> None:
    """The reader tries a pattern only on lines holding a literal the pattern needs: on every line of
    the samples, the corpus' DeepSpeed logs, a generated run and random text, a line without the
    literal is a line the pattern does not match (so the check never drops a line)."""
    import random
    import sys

    from trainaudit.ingest.formats import deepspeed as ds

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from gen_format_logs import generate

    log = tmp_path / "ds.log"
    generate("deepspeed", log, 400_000, seed=3, fail_from=0.7)
    tests = Path(__file__).resolve().parents[1]
    files = [log, *sorted((tests / "fixtures").rglob("*.log")), *sorted((tests / "fixtures").rglob("*.txt")),
             *(p for p in sorted((tests / "corpus").rglob("log.txt")) if "deepspeed" in p.parent.name)]
    lines = [ln for p in files for ln in p.read_text(encoding="utf-8", errors="replace").splitlines()]
    pairs = [(ds.PROGRESS_RE, ", skipped="), (ds.TPUT_RE, "SamplesPerSec="), (ds.PIPE_RE, "iter time (s): "),
             (ds.BREAKDOWN_RE, "time (ms) | "), (ds.MIN_SCALE_RE, "Current loss scale already at minimum")]
    rng = random.Random(5)
    words = [w for _, lit in pairs for w in lit.split()] + ["step=1,", "skipped=0,", "lr=[0.1]", "steps: 3",
                                                            "loss: 2.0", "samples/sec: 9", "|", "x"]
    lines += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(5000)]
    for pat, literal in pairs:
        hits = [ln for ln in lines if pat.search(ln)]
        assert hits, pat.pattern
        assert all(literal in ln for ln in hits), pat.pattern


# ColossalAI's GPT-2 example: DeepSpeed's fp16 optimizer printing into the loop's own tqdm bar, whose postfix
# carries the loss ("loss=nan" from the second step)
GLUED_TO_LOOP_BAR = corpus_log("colossalai-hpcaitech-ColossalAI-Examples-37")


def test_a_loop_bar_an_overflow_is_glued_to_keeps_its_metrics(tmp_path: Path) -> None:
    run = _load(tmp_path, GLUED_TO_LOOP_BAR)
    assert run.meta["framework"] == "deepspeed+text"
    loss = run.series["loss"]
    assert loss.steps.tolist() == [1, 2, 3] and loss.values[0] == 265.25 and all(v != v for v in loss.values[1:])
    # the overflow after bar n is step n + 1, as without the bar's metrics
    assert [e.step for e in run.events if e.kind == EventKind.LOSS_SCALE] == [2, 3, 4]


def test_a_hand_rolled_loop_beside_the_engine_keeps_its_loss(tmp_path: Path) -> None:
    # a DeepSpeed engine under a loop of one's own (no framework logger): the loop's lines are read as any
    # text log is, and the overflows count from the loop's steps
    lines = [ln for k in range(1, 121) for ln in
             [f"epoch 0 iter {k} loss {2.5 - k / 100:.4f}",
              *([f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {2 ** (24 - k // 30)}, reducing to "
                 f"{2 ** (23 - k // 30)}"] if k % 30 == 0 else [])]]
    run = _load(tmp_path, PROGRESS[:1] + lines)
    assert run.meta["framework"] == "deepspeed+text"
    assert run.series["loss"].steps.tolist() == list(range(1, 121))
    assert [e.step for e in run.events if e.kind == EventKind.LOSS_SCALE] == [31, 61, 91, 121]
    assert run.series["skipped"].steps.tolist() == [40]  # the engine's own line still read
