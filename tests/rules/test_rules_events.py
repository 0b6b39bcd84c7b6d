"""Event-driven rules and the NaN rule on verbatim public sample lines (tests/fixtures)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import corpus_log, sample_block, write_lines

from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run
from trainaudit.rules import run_rules
from trainaudit.rules.resources import oom_numbers


def _diag(tmp_path: Path, lines: list[str], name: str = "x.log"):
    run, _ = load_run([str(write_lines(tmp_path / name, lines))])
    hits: dict = {}
    for h in run_rules(run):
        hits.setdefault(h.rule, h)  # the first hit of each rule
    return run, hits, diagnose_run(run)


def test_keras_nan_epoch(tmp_path):
    _, hits, d = _diag(tmp_path, sample_block("keras.txt", "image-segmentation-keras/issues/50"))
    assert hits["TA101"].first_bad_step == 1 and hits["TA101"].metric == "loss"
    assert (d.category, d.first_bad_step) == ("nan_inf", 1)


def test_hf_hidden_nan_grad_norm(tmp_path):
    _, hits, d = _diag(tmp_path, sample_block("hf_transformers.txt", "SY-Xuan/Pink/issues/6"))
    h = hits["TA101"]
    assert h.metric == "grad_norm" and h.first_bad_step == 1
    assert "the loss still prints 0" in h.message
    assert d.category == "nan_inf"


def test_megatron_omitted_loss_is_nan(tmp_path):
    lines = sample_block("megatron.txt", "epfLLM/Megatron-LLM/issues/33")
    # the NaN iteration as Megatron prints it: the same line with the lm loss field dropped
    nan_line = lines[1].replace("3384/", "3385/").replace(" lm loss: 7.072597E-01 |", "")
    _, hits, d = _diag(tmp_path, [*lines, nan_line])
    h = hits["TA101"]
    assert (h.metric, h.first_bad_step) == ("lm loss", 3385)
    assert "Megatron omits" in h.message
    assert d.verdict == "unhealthy" and d.category == "nan_inf"


def test_deepspeed_scale_at_one(tmp_path):
    _, hits, d = _diag(tmp_path, sample_block("deepspeed.txt", "transformers/issues/14531"))
    assert hits["TA104"].category == "loss_scale_collapse"
    assert d.category == "loss_scale_collapse"


def test_apex_overflow_lines_collapse(tmp_path):
    # apex amp's scaler prints one line per skipped step (apex/amp/scaler.py): 17 halvings to 0.5
    run, hits, d = _diag(tmp_path, sample_block("error_signatures.txt", "NVIDIA/apex/issues/834"))
    scales = [e.data["new_scale"] for e in run.events if e.kind.value == "loss_scale"]
    assert scales[0] == 32768.0 and scales[-1] == 0.5 and len(scales) == 17
    assert all(e.data["framework"] == "apex" for e in run.events)
    assert "loss scaler" not in run.series  # the scaler's index is not a metric
    assert hits["TA104"].category == "loss_scale_collapse"
    assert d.category == "loss_scale_collapse"


def test_minimum_loss_scale_exit(tmp_path):
    # DeepSpeed's exception text (deepspeed/runtime/fp16/loss_scaler.py, raise_error_at_min_scale)
    _, hits, d = _diag(tmp_path, ["Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                                  "Exiting run."])
    assert hits["TA104"].fatal and "TA410" not in hits  # the exception is the scaler giving up, not a crash
    assert (d.verdict, d.category) == ("crash", "loss_scale_collapse")


def test_a_scale_reduced_to_zero_is_a_collapse_and_a_division_by_zero_alone_is_not(tmp_path):
    # apex's overflow lines, each reducing the scale, then the scaler divides by a scale of 0
    lines = corpus_log("apex-jiangnanboy-chatbot-chinese-readme-note")
    _, hits, d = _diag(tmp_path, lines)
    assert hits["TA104"].fatal and "fell to 0" in hits["TA104"].message
    assert (d.verdict, d.category) == ("crash", "loss_scale_collapse")
    _, hits, _ = _diag(tmp_path, ["step 1 loss 2.3", "step 2 loss 2.2", "ZeroDivisionError: float division by zero"],
                       "alone.log")
    assert "TA104" not in hits
    # a scale that rose again between the overflows is a scaler at work, whatever error follows
    moving = [lines[0], lines[1], "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 65536.0",
              lines[2], "ZeroDivisionError: float division by zero"]
    _, hits, _ = _diag(tmp_path, moving, "moving.log")
    assert "TA104" not in hits


@pytest.mark.parametrize("key,req,ru,frag", [
    ("pytorch/pytorch/issues/18853", 1.0, None, False),
    ("GenerateU/issues/10", 496 / 1024, 330.42 / 1024, False),
    ("murong-xu/CADS/issues/4", 22.78, 9.35, False),
    ("pytorch/pytorch/issues/16417", 22 / 1024, 194.87 / 1024, True),
])
def test_oom_numbers_and_fragmentation(tmp_path, key, req, ru, frag):
    lines = sample_block("error_signatures.txt", key)
    nums = oom_numbers(lines[0])
    assert math.isclose(nums["requested"], req, rel_tol=1e-9)
    assert (nums.get("reserved_unallocated") is None) if ru is None else math.isclose(nums["reserved_unallocated"], ru)
    _, hits, d = _diag(tmp_path, lines)
    assert hits["TA401"].data["fragmentation"] is frag
    assert (d.verdict, d.category) == ("crash", "oom")
    assert ("expandable_segments" in d.stories[0].fix) is frag or not frag


def test_an_oom_the_run_outlived_is_a_note(tmp_path):
    # TensorFlow's allocator retrying smaller after "failed to allocate ... CUDA_ERROR_OUT_OF_MEMORY" (INFO
    # lines): the epochs go on, and the run is healthy
    case = "tf-keras-ChenKen9869-BiLSTM-CRF-Word-segmentation"
    _, hits, d = _diag(tmp_path, corpus_log(case))
    assert hits["TA401"].severity == "info" and "went on training after it" in hits["TA401"].message
    assert not hits["TA401"].fatal and d.verdict == "healthy"
    # the same lines with no epoch after the first out-of-memory message: it is what stopped the run
    lines = corpus_log(case)
    cut = next(i for i, ln in enumerate(lines) if "CUDA_ERROR_OUT_OF_MEMORY" in ln)
    _, hits, d = _diag(tmp_path, lines[:cut + 1], "cut.log")
    assert hits["TA401"].severity == "critical" and hits["TA401"].fatal and (d.verdict, d.category) == ("crash", "oom")


def test_nccl_timeout(tmp_path):
    _, hits, d = _diag(tmp_path, sample_block("error_signatures.txt", "LlamaFactory/issues/6269"))
    assert hits["TA404"].category == "distributed_failure" and hits["TA404"].data["ranks"] == [0]
    assert (d.verdict, d.category) == ("crash", "distributed_failure")
    assert any("every rank" in n for n in d.needs_more_data)


def test_oom_is_the_root_not_the_nccl_aborts(tmp_path):
    lines = (sample_block("error_signatures.txt", "LlamaFactory/issues/6269")
             + ["[rank1]: " + sample_block("error_signatures.txt", "pytorch/pytorch/issues/16417")[0]])
    _, hits, d = _diag(tmp_path, [lines[2], lines[0], lines[1]])  # the OOM of rank 1 comes first
    assert hits["TA404"].data["root_rank"] == 1
    assert d.category == "oom" and "consequences" in d.stories[0].issue


@pytest.mark.parametrize("key", ["jade-hpc-gpu", "leptonai/gpud/pull/46", "NVSentinel/issues/155"])
def test_hardware_faults(tmp_path, key):
    _, hits, d = _diag(tmp_path, sample_block("error_signatures.txt", key))
    assert hits["TA409"].category == "hardware_fault"
    assert (d.verdict, d.category) == ("crash", "hardware_fault")


def test_segfault_is_a_crash_and_sigkill_a_host_oom(tmp_path):
    _, hits, d = _diag(tmp_path, sample_block("error_signatures.txt", "hallo2/issues/75"))
    assert "TA404" not in hits and hits["TA410"].category == "crash"
    assert d.category == "crash"
    _, hits, d = _diag(tmp_path, sample_block("error_signatures.txt", "CPPO/issues/6"), "k.log")
    assert hits["TA402"].category == "oom" and "TA410" not in hits
    assert d.category == "oom"


_WAIT = ("Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 "
         "(world_size=2, worker_count=1, timeout=0:30:00)")


def test_a_cut_traceback_while_the_process_group_forms_is_a_distributed_failure(tmp_path):
    # the shape of a public paste (RVT): ranks wait in the store barrier, then a traceback cut before its exception
    cut = ["Traceback (most recent call last):", '  File "train.py", line 143, in main',
           "    trainer = pl.Trainer(", '  File "lightning/trainer.py", line 88, in __init__', "    self._setup()"]
    _, hits, d = _diag(tmp_path, [_WAIT, _WAIT] + cut)
    assert hits["TA410"].category == "distributed_failure" and "init_process_group" in hits["TA410"].message
    assert (d.verdict, d.category) == ("crash", "distributed_failure")
    # a traceback that ends in its exception says what failed: that is the crash
    _, hits, d = _diag(tmp_path, [_WAIT] + cut + ["ValueError: bad config value"], "whole.log")
    assert hits["TA410"].category == "crash" and d.category == "crash"
    # and a cut traceback far from any wait is a crash of its own
    _, hits, _ = _diag(tmp_path, [_WAIT] + [f"epoch {i} loss 1.0" for i in range(60)] + cut, "later.log")
    assert hits["TA410"].category == "crash"


def test_waiting_for_the_ranks_alone_is_no_finding(tmp_path):
    _, hits, _ = _diag(tmp_path, [_WAIT] * 5)
    assert all(h.severity == "info" for h in hits.values()) and "TA410" not in hits


def test_healthy_public_excerpts(tmp_path):
    for key in ("Megatron-LM/issues/756", "Megatron-Bridge/issues/4024"):
        _, hits, d = _diag(tmp_path, sample_block("megatron.txt", key), key.replace("/", "_") + ".log")
        # nothing wrong, but 2 to 3 loss lines are too few to call the run healthy
        assert d.category == "healthy" and all(h.severity == "info" for h in hits.values())
        assert d.verdict == "inconclusive" and d.coverage is not None and d.coverage.loss_points < 10
        assert any("training loss has" in n for n in d.needs_more_data)


def test_a_loss_scale_ending_a_sentence_is_read_as_its_number() -> None:
    # "reducing loss scale to 256.0." (the full stop once made the value unreadable and the run crash)
    from trainaudit.rules.numerics import _scale_from_events
    from trainaudit.model import Event, EventKind

    raw = "Gradient overflow.  Skipping step, reducing loss scale to 256.0."
    events = [Event(EventKind.LOSS_SCALE, raw, "log.txt", 1, raw)]
    assert [v for _, v in _scale_from_events(events)] == [256.0]


def _fp16_optimizer_lines(overflows: dict[int, float], last: int) -> list[str]:
    """A tqdm loop with apex.fp16_utils' FP16_Optimizer printing its two lines on each skipped step
    (apex/fp16_utils/fp16_optimizer.py, _update_scale: the scale printed is the one that overflowed)."""
    lines = []
    for i in range(last + 1):
        lines.append(f"  {i}/184 [00:0{i % 10}<01:30,  2.40it/s, loss={4.2 - 0.05 * i:.3f}]")
        if i in overflows:
            lines += [f"Grad overflow on iteration {i}", f"Using dynamic loss scale of {overflows[i]:g}"]
    return lines


def test_fp16_optimizer_overflows_in_a_row_after_its_calibration(tmp_path):
    # the start-up search (iterations 0-2), a scale that holds, then an overflow on every iteration
    overflows = {0: 65536, 1: 32768, 2: 16384, 8: 8192, **{i: 2.0 ** (26 - i) for i in range(14, 21)}}
    run, hits, d = _diag(tmp_path, _fp16_optimizer_lines(overflows, 22))
    scales = [(e.step, e.data["scale"]) for e in run.events if e.kind.value == "loss_scale"]
    assert scales[:4] == [(0, 65536.0), (1, 32768.0), (2, 16384.0), (8, 8192.0)] and scales[-1] == (20, 64.0)
    assert not any(name.startswith("Grad overflow") for name in run.series)  # the iteration is no metric
    h = hits["TA104"]
    assert h.first_bad_step == 14 and "7 fp16 overflows in a row" in h.message
    assert (d.category, d.first_bad_step) == ("loss_scale_collapse", 14)


def test_fp16_optimizer_calibrating_at_the_start_is_silent(tmp_path):
    # a healthy fp16 start: the scale halves on iterations 0-4, then holds at 2048 for the rest
    overflows = {i: 2.0 ** (16 - i) for i in range(5)} | {60: 4096}
    _, hits, _ = _diag(tmp_path, _fp16_optimizer_lines(overflows, 80))
    assert "TA104" not in hits


def test_a_loss_scale_near_zero_is_a_collapse_from_one_point(tmp_path):
    # fairseq's summary line with the scale printed as 0.000 (fairseq#1529); icefall's warning
    # (egs/librispeech/ASR/zipformer/train.py: "Grad scale is small" below 0.01)
    for lines, step in ((corpus_log("fairseq-facebookresearch-fairseq-1529"), 9165),
                        (["2024-01-14 01:03:00,826 WARNING [train.py:1057] (0/4) Grad scale is small: 1.3e-26"], None)):
        _, hits, d = _diag(tmp_path, lines)
        assert hits["TA104"].first_bad_step == step and d.category == "loss_scale_collapse"


def test_a_small_loss_scale_that_is_not_near_zero_is_no_collapse(tmp_path):
    # a fairseq run settled at a low but working scale (fp16 init scale 4 halved twice)
    lines = [f"| epoch 001 | loss {5 - 0.1 * i:.3f} | num_updates {100 * i} | loss_scale 1.000" for i in range(1, 13)]
    _, hits, _ = _diag(tmp_path, lines)
    assert "TA104" not in hits


def test_deepspeed_unfused_overflow_at_the_minimum_takes_the_optimizers_iteration(tmp_path):
    # deepspeed/runtime/fp16/unfused_optimizer.py: _update_scale's two lines, then step's own line
    _, hits, d = _diag(tmp_path, corpus_log("deepspeed-huggingface-transformers-14834"))
    assert hits["TA104"].first_bad_step == 445299 and "(the minimum)" in hits["TA104"].message
    assert (d.category, d.first_bad_step) == ("loss_scale_collapse", 445299)


def test_grad_scale_too_small_exit_is_the_scaler_giving_up(tmp_path):
    lines = ["Traceback (most recent call last):", '  File "zipformer/train.py", line 1057, in train_one_epoch',
             "    raise RuntimeError(f\"grad_scale is too small, exiting: {cur_grad_scale}\")",
             "RuntimeError: grad_scale is too small, exiting: 8.470329472543003e-22"]
    _, hits, d = _diag(tmp_path, lines)
    assert hits["TA104"].fatal and (d.verdict, d.category) == ("crash", "loss_scale_collapse")


def test_paddle_amp_scaler_reductions_are_loss_scale_events(tmp_path):
    # PaddleOCR's log with Paddle's AmpScaler lines (python/paddle/amp/grad_scaler.py, _update)
    run, hits, d = _diag(tmp_path, corpus_log("paddle-PaddlePaddle-PaddleOCR-10365"))
    scales = [(e.data["scale"], e.data["new_scale"]) for e in run.events if e.kind.value == "loss_scale"]
    assert scales[0] == (0.001953125, 0.0009765625) and len(scales) == 3
    assert all(e.data["framework"] == "paddle" for e in run.events if e.kind.value == "loss_scale")
    assert hits["TA104"].first_bad_step == 80 and d.category == "loss_scale_collapse"


_SCALE_PIECES = ["reducing to ", "Reducing To:", "loss scale: ", "LOSS SCALE to ", "setting loss scale to: ", "Attempted ",
                 "65536", "32768.0", "1", "0.5", "2e-3", "7E+2", ".", ", ", " ", "\u0663", "\u212a", "é", "\n", "[rank3]: ",
                 "OVERFLOW! Rank 0 Skipping step. ", "\ud800"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_SCALE_PIECES), max_size=14), min_size=1, max_size=30),
       st.lists(st.integers(0, 9), min_size=1, max_size=8))
def test_loss_scale_read_once_per_digit_shape_is_the_regex_answer(lines: list[list[str]], digits: list[int]) -> None:
    # _scale_text remembers the span of the scale per line with its ASCII digits zeroed: lines that
    # differ only in digits (the same pieces, the digits replaced) must read as the regex reads them
    from trainaudit.rules.numerics import _SCALE_RE, _scale_text

    memo: dict[bytes, tuple[int, int] | None] = {}
    for pieces in lines:
        base = "".join(pieces)
        for d in digits:
            raw = "".join(str((int(c) + d) % 10) if c in "0123456789" else c for c in base)
            m = _SCALE_RE.search(raw)
            assert _scale_text(raw, memo) == (m.group(1) if m else None)


def test_a_grad_norm_the_loss_scaler_skipped_is_no_nan(tmp_path):
    # MLPerf's GNMT reference: "Gradient norm: inf", then its fp16 optimizer's "Skipped batch, new scale: 2048.0"
    lines = corpus_log("pytorch-loop-mlcommons-training_results_v0.7-Fujitsu-gnmt-result_1")
    run, hits, d = _diag(tmp_path, lines)
    assert [e.data.get("new_scale") for e in run.events if e.kind.value == "loss_scale"] == [2048.0]
    assert "TA101" not in hits and d.category == "healthy"
    # without the scaler's line the Inf is unexplained
    _, hits, _ = _diag(tmp_path, [ln for ln in lines if "Skipped batch" not in ln], "cut.log")
    assert hits["TA101"].metric == "Gradient norm"


def test_guided_diffusion_reductions_of_its_log2_loss_scale_are_read(tmp_path):
    # improved-diffusion's MixedPrecisionTrainer prints the log2 of the scale it lowers after a NaN (MGDM#3)
    lines = corpus_log("improved-diffusion-yangqy1110-MGDM-3")
    run, _, _ = _diag(tmp_path, lines)
    scales = [e.data["new_scale"] for e in run.events if e.kind.value == "loss_scale"]
    assert [round(math.log2(v), 3) for v in scales] == [16.929, 15.929, 14.929]
    # the same reductions five times in a row, down to 2^6.9, are a collapse in a short paste
    more = lines + [f"Found NaN, decreased lg_loss_scale to {13.929 - k:.15f}" for k in range(8)]
    _, hits, d = _diag(tmp_path, more, "more.log")
    assert "TA104" in hits and d.category == "loss_scale_collapse"
