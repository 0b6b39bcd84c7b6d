"""The Megatron reader on the verbatim Megatron-LM / Megatron-LLM / Megatron-Bridge / Megatron-DeepSpeed
lines, through both paths (bulk fast path and the reference line path)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from shared_data import corpus_log, run_cli, sample_block, write_lines
from trainaudit.ingest.formats.megatron.lines import MegatronReader
from trainaudit.ingest.sink import RunBuilder
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import EventKind, Run, Source
from trainaudit.series.roles import find_roles

MLM = sample_block("megatron.txt", "Megatron-LM/issues/756")
OLD = corpus_log("megatron-deepspeed-bigscience-workshop-bigscience-tr8b-emb-norm-7")[:2]  # no timestamp, lr .3E
NANLOSS = sample_block("megatron.txt", "Megatron-LLM/issues/33")
BRIDGE = sample_block("megatron.txt", "Megatron-Bridge/issues/4024")
DS = sample_block("megatron_deepspeed.txt", "Megatron-DeepSpeed/issues/396")


def read(path: Path, fast: bool) -> Run:
    inp = expand_inputs([str(path)])[0]
    builder = RunBuilder()
    builder.begin(Source(inp.display, "megatron"))
    MegatronReader(fast=fast, workers=1).read(inp, builder)
    builder.end()
    return builder.build()


@pytest.fixture(params=[True, False], ids=["fast", "line"])
def fast(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_megatron_lm_timestamped_lines(tmp_path: Path, fast: bool) -> None:
    run = read(write_lines(tmp_path / "m.log", MLM), fast)
    loss = run.series["lm loss"]
    assert loss.steps.tolist() == [43, 44, 45]
    assert loss.values.tolist() == [1.825991, 1.875063, 1.834162]
    assert loss.lines.tolist() == [1, 2, 3]
    assert run.series["load_balancing_loss"].value_at(44) == 1.020033
    assert run.series["learning rate"].values.tolist() == [8.6e-06, 8.8e-06, 9.0e-06]
    assert run.series["grad norm"].values.tolist() == [1.426, 1.327, 1.611]
    assert run.series["throughput per GPU (TFLOP/s/GPU)"].value_at(45) == 228.4
    assert run.series["consumed samples"].value_at(43) == 5504.0
    assert run.series["elapsed time per iteration (ms)"].value_at(44) == 5533.8
    assert "iteration" not in run.series
    assert run.meta["train_iters"] == 100
    assert run.events == []


def test_old_format_without_timestamp_lr_3e(tmp_path: Path, fast: bool) -> None:
    run = read(write_lines(tmp_path / "m.log", OLD), fast)
    assert run.series["lm loss"].steps.tolist() == [17060, 17061]
    assert run.series["lm loss"].values.tolist() == [2.665295, 2.667121]
    assert run.series["learning rate"].values.tolist() == [5.948e-05, 5.948e-05]
    assert run.series["global batch size"].values.tolist() == [2048.0, 2048.0]
    assert run.series["TFLOPs"].values.tolist() == [23.64, 32.03]
    assert run.meta["train_iters"] == 159576


def test_bridge_mtp_losses(tmp_path: Path, fast: bool) -> None:
    run = read(write_lines(tmp_path / "b.log", BRIDGE), fast)
    assert run.series["mtp_1 loss"].steps.tolist() == [29, 30]
    assert run.series["mtp_1 loss"].values.tolist() == [1.11541, 1.080622]
    assert run.series["mtp_2 loss"].values.tolist() == [1.180141, 1.143016]
    assert run.series["seq_load_balancing_loss"].value_at(30) == 1.248744
    assert run.series["lm loss"].values.tolist() == [0.8716962, 0.8535482]
    assert run.events == []


def test_validation_lines_are_the_validation_loss(tmp_path: Path, fast: bool) -> None:
    # evaluate_and_print_results between the iteration lines, in its dashed box; the evaluation at the
    # end of training has no iteration and gives no point
    lines = corpus_log("megatron-lm-liguodongiot-llm-action-gpt2-345m-4dp")
    run = read(write_lines(tmp_path / "v.log", lines), fast)
    val = run.series["validation lm loss"]
    assert val.steps.tolist() == [1000, 2000, 3000, 4000, 5000]
    assert val.values.tolist() == [6.439325, 6.18888, 6.826255, 7.609839, 8.208897]
    assert run.series["validation lm loss PPL"].value_at(2000) == 487.3002
    assert run.series["lm loss"].value_at(5000) == 0.1350079
    assert find_roles(run).names["val_loss"] == "validation lm loss"


def test_deepspeed_nan_grad_norm_and_missing_loss(tmp_path: Path, fast: bool) -> None:
    run = read(write_lines(tmp_path / "ds.log", DS), fast)
    gn = run.series["grad norm"]
    assert gn.steps.tolist() == [5426, 5427] and all(math.isnan(v) for v in gn.values)
    assert run.series["TFLOPs"].values.tolist() == [78.36, 78.77]
    assert run.series["consumed tokens"].value_at(5427) == 88915968.0
    # No loss key on any line: each line says its loss is absent.
    missing = [e for e in run.events if e.kind is EventKind.MISSING_METRIC]
    assert [(e.step, e.line, e.data["metrics"]) for e in missing] == [(5426, 1, ["loss"]), (5427, 2, ["loss"])]


def test_nan_omitted_loss_becomes_nan_and_event(tmp_path: Path, fast: bool) -> None:
    # The verbatim lines of Megatron-LLM#33, then the same layout with the lm loss field dropped,
    # as Megatron prints a NaN loss (``if avg >= 0.0``).
    dropped = NANLOSS[1].replace("3384/", "3385/").replace(" lm loss: 7.072597E-01 |", "")
    run = read(write_lines(tmp_path / "nan.log", [*NANLOSS, dropped]), fast)
    loss = run.series["lm loss"]
    assert loss.steps.tolist() == [3383, 3384, 3385]
    assert loss.values[:2].tolist() == [0.7334521, 0.7072597] and math.isnan(loss.values[2])
    assert run.series["grad norm"].value_at(3385) == 0.741
    [ev] = run.events
    assert ev.kind is EventKind.MISSING_METRIC and ev.step == 3385 and ev.line == 3
    assert ev.data == {"metrics": ["lm loss"], "assumed_nan": True}


def test_an_iteration_line_wrapped_over_lines_is_one_iteration(tmp_path: Path, fast: bool) -> None:
    # Megatron-Bridge#5306 as pasted: one iteration line wrapped over four lines, "grad norm: nan" on the third
    run = read(write_lines(tmp_path / "wrapped.log", corpus_log("megatron-bridge-NVIDIA-NeMo-Megatron-Bridge-5306")), fast)
    assert math.isnan(run.series["grad norm"].value_at(5))
    assert run.series["global batch size"].value_at(5) == 4096
    assert run.series["number of nan iterations"].steps.tolist() == [5]
    # a loss on the wrapped rest is the iteration's loss, not a loss the line left out
    head, rest = NANLOSS[1].split(" lm loss:", 1)
    run = read(write_lines(tmp_path / "split.log", [NANLOSS[0], head, "lm loss:" + rest]), fast)
    assert run.series["lm loss"].values.tolist() == [0.7334521, 0.7072597]
    assert not [e for e in run.events if e.kind is EventKind.MISSING_METRIC]
    # a field line that does not follow an iteration line is not one
    run = read(write_lines(tmp_path / "apart.log", [NANLOSS[0], "", "grad norm: 99.0 | loss scale: 1.0 |"]), fast)
    assert run.series["grad norm"].steps.tolist() == [3383]


def test_cli_parse_counts_megatron(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "m.log", MLM + OLD)
    proc = run_cli("parse", str(log), "-o", str(tmp_path / "out.csv"))
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "out.csv").read_text().splitlines()
    assert rows[0] == "source,format,line,step,metric,value"
    assert f"{log},megatron,1,43,lm loss,1.825991" in rows
    assert f"{log},megatron,5,17061,lm loss,2.667121" in rows
