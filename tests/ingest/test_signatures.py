"""Error signatures -> typed events, on the verbatim lines of tests/fixtures/log_samples/error_signatures.txt
(and the loss-scale / clean lines of the other sample files)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from shared_data import LOG_SAMPLES, corpus_log, sample_block, sample_blocks, write_lines
from trainaudit.ingest.signatures import GATE, SignatureScanner, is_user_frame, to_gib
from trainaudit.ingest.text import Line, iter_lines
from trainaudit.model import Event, EventKind

SIG = "error_signatures.txt"


def scan_lines(lines: list[str], source: str = "job.log") -> list[Event]:
    """Run the scanner exactly as LineReader.read does: cleaned lines, then finish()."""
    data = ("\n".join(lines) + "\n").encode("utf-8")
    scanner = SignatureScanner(source)
    events: list[Event] = []
    for line in iter_lines(io.BytesIO(data)):
        events.extend(scanner.feed(line))
    events.extend(scanner.finish())
    return events


def only(events: list[Event], kind: EventKind) -> Event:
    hits = [e for e in events if e.kind is kind]
    assert len(hits) == 1, [(e.kind, e.message) for e in events]
    return hits[0]


def kinds(events: list[Event]) -> list[EventKind]:
    return [e.kind for e in events]


# -- CUDA out of memory ------------------------------------------------------------------------------

def test_oom_legacy_parenthesised_stats() -> None:
    lines = sample_block(SIG, "pytorch/pytorch/issues/18853")
    ev = only(scan_lines(lines), EventKind.OOM)
    assert kinds(scan_lines(lines)) == [EventKind.OOM]
    assert ev.line == 1 and ev.raw == lines[0] and ev.source == "job.log"
    assert ev.data["exc_type"] == "RuntimeError"
    assert ev.data["requested_gib"] == 1.0  # 1024.00 MiB
    assert ev.data["gpu"] == 0
    assert ev.data["total_gib"] == 15.90
    assert ev.data["allocated_gib"] == 14.25
    assert ev.data["free_gib"] == 991.56 / 1024
    assert ev.data["cached_gib"] == 607.00 / 1024**2


def test_oom_legacy_reserved_in_total() -> None:
    # PyTorch 1.5-2.0 wording (c10/cuda/CUDACachingAllocator.cpp), with and without 'already allocated'.
    line = ("RuntimeError: CUDA out of memory. Tried to allocate 376.00 MiB (GPU 0; 3.95 GiB total capacity; "
            "1.72 GiB already allocated; 354.88 MiB free; 2.46 GiB reserved in total by PyTorch)")
    ev = only(scan_lines([line]), EventKind.OOM)
    assert (ev.data["requested_gib"], ev.data["allocated_gib"], ev.data["reserved_gib"]) == (376 / 1024, 1.72, 2.46)
    short = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 79.15 GiB total capacity; "
             "18.69 MiB free; 2.00 GiB reserved in total by PyTorch)")
    ev = only(scan_lines([short]), EventKind.OOM)
    assert ev.data["gpu"] == 1 and ev.data["free_gib"] == 18.69 / 1024 and "allocated_gib" not in ev.data


def test_oom_2_1_sentence_form_with_capacty_typo() -> None:
    ev = only(scan_lines(sample_block(SIG, "GenerateU/issues/10")), EventKind.OOM)
    d = ev.data
    assert d["exc_type"] == "torch.cuda.OutOfMemoryError"
    assert d["requested_gib"] == 496 / 1024
    assert (d["gpu"], d["total_gib"], d["free_gib"]) == (0, 14.75, 235.06 / 1024)
    assert d["process_id"] == 20398 and d["in_use_gib"] == 14.52
    assert d["allocated_gib"] == 14.06
    assert d["reserved_unallocated_gib"] == 330.42 / 1024
    assert d["reserved_gib"] == 14.06 + 330.42 / 1024


def test_oom_2_2_including_non_pytorch_memory() -> None:
    ev = only(scan_lines(sample_block(SIG, "pytorch/pytorch/issues/16417")), EventKind.OOM)
    d = ev.data
    assert d["requested_gib"] == 22 / 1024 and d["total_gib"] == 23.65 and d["free_gib"] == 11.06 / 1024
    assert d["in_use_gib"] == 23.60 and "process_id" not in d
    assert d["allocated_gib"] == 22.90 and d["reserved_unallocated_gib"] == 194.87 / 1024


def test_oom_2_5_torch_out_of_memory_error() -> None:
    ev = only(scan_lines(sample_block(SIG, "CADS/issues/4")), EventKind.OOM)
    d = ev.data
    assert d["exc_type"] == "torch.OutOfMemoryError"
    assert (d["requested_gib"], d["total_gib"], d["free_gib"], d["in_use_gib"]) == (22.78, 31.47, 12.73, 18.73)
    assert (d["allocated_gib"], d["reserved_unallocated_gib"]) == (9.08, 9.35)
    assert "22.78 GiB" in ev.message and "GPU 0" in ev.message


def test_oom_private_pools_behind_vllm_logger_prefix() -> None:
    ev = only(scan_lines(sample_block(SIG, "kaito-project/kaito/issues/976")), EventKind.OOM)
    d = ev.data
    assert d["exc_type"] == "torch.OutOfMemoryError"
    assert d["requested_gib"] == 546 / 1024 and d["free_gib"] == 514.19 / 1024
    assert d["process_id"] == 562167 and d["in_use_gib"] == 15.25
    assert d["allocated_gib"] == 13.73
    assert d["private_pools_gib"] == 46 / 1024
    assert d["reserved_unallocated_gib"] == 736.86 / 1024


def test_oom_without_numbers() -> None:
    ev = only(scan_lines(["RuntimeError: CUDA error: out of memory"]), EventKind.OOM)
    assert ev.data == {"device": "CUDA"}
    # vLLM's cumem allocator, waking from sleep mode inside an RL trainer (OpenRLHF/OpenRLHF#1050)
    ev = only(scan_lines(["(LLMRayActor pid=226426) ERROR 06-10 10:55:03 [core.py:459] RuntimeError: CUDA Error: out of "
                          "memory at /workspace/csrc/cumem_allocator.cpp:62 [repeated 3x across cluster]"]), EventKind.OOM)
    assert ev.data == {"device": "CUDA"}


# -- NCCL -----------------------------------------------------------------------------------------------

def test_nccl_watchdog_2_4_with_companion_line() -> None:
    lines = sample_block(SIG, "LlamaFactory/issues/6269")
    events = scan_lines(lines)
    assert kinds(events) == [EventKind.NCCL_TIMEOUT, EventKind.NCCL_TIMEOUT]
    first, second = events
    assert first.line == 1 and first.rank == 0
    assert first.data == {"rank": 0, "seq": 7753, "op": "_REDUCE_SCATTER_BASE", "numel_in": 544997376,
                          "numel_out": 68124672, "timeout_ms": 600000, "ran_for_ms": 600061}
    assert second.line == 2
    assert second.data == {"seq": 7753, "last_enqueued": 7755, "last_completed": 7752, "rank": 0, "pg_id": 1}


def test_nccl_pg_id_guid_tag() -> None:
    ev = only(scan_lines(sample_block(SIG, "BasicSR/issues/737")), EventKind.NCCL_TIMEOUT)
    assert ev.rank == 1
    assert ev.data == {"seq": 808, "last_enqueued": 811, "last_completed": 807, "rank": 1, "pg_id": 0,
                       "pg_guid": "0(default_pg)"}


def test_nccl_old_form_glued_to_tqdm_bar() -> None:
    ev = only(scan_lines(sample_block(SIG, "pytorch/pytorch/issues/118369")), EventKind.NCCL_TIMEOUT)
    assert ev.data == {"rank": 0, "seq": 96120, "op": "ALLREDUCE", "timeout_ms": 1800000, "ran_for_ms": 25624887}


def test_dist_backend_error_behind_rank_prefix() -> None:
    lines = sample_block(SIG, "ArcticTraining/pull/233")
    ev = only(scan_lines(lines), EventKind.DISTRIBUTED_ERROR)
    assert ev.rank == 1 and ev.line == 1
    assert ev.data["exc_type"] == "torch.distributed.DistBackendError"
    assert ev.data["store_key"] == "0"
    assert ev.data["store_error"] == "Connection reset by peer"
    assert ev.data["message"].startswith("[1] is setting up NCCL communicator")


# -- NaN checks and loss scale --------------------------------------------------------------------------

def test_anomaly_mode_nan() -> None:
    ev = only(scan_lines(sample_block(SIG, "pytorch/pytorch/issues/51196")), EventKind.NAN_CHECK)
    assert ev.data == {"function": "MulBackward0", "output_index": 0, "check": "anomaly_mode"}


def test_megatron_rerun_state_machine() -> None:
    ev = only(scan_lines(sample_block(SIG, "Megatron-LM/issues/5026")), EventKind.NAN_CHECK)
    assert ev.rank == 3
    assert ev.data["iteration"] == 3 and ev.data["invocation"] == 2 and ev.data["result"] == "nan"
    assert ev.data["check"].startswith("found NaN in local grad norm for bucket #0")


def test_megatron_rerun_disabled_stacked_prefixes_iteration_unknown() -> None:
    ev = only(scan_lines(sample_block(SIG, "NVIDIA-NeMo/Speech/issues/14348")), EventKind.NAN_CHECK)
    assert ev.rank == 2
    assert ev.data["node"] == "dcfai-xe9680-01" and ev.data["device"] == 2
    assert "iteration" not in ev.data  # printed as -1: unknown


def test_megatron_older_assertion() -> None:
    ev = only(scan_lines(sample_block(SIG, "Pai-Megatron-Patch/issues/366")), EventKind.NAN_CHECK)
    assert ev.rank == 11 and ev.data["device"] == 3 and ev.data["result"] == "nan"
    assert ev.data["check"] == "found NaN in local grad norm in backward pass before data-parallel communication collective"


DEEPSPEED_MIN_SCALE = [
    # DeepSpeed's exception when the dynamic loss scale cannot go lower (deepspeed/runtime/fp16/loss_scaler.py,
    # raise_error_at_min_scale), as a traceback prints it
    "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."]


def test_deepspeed_loss_scale_minimum() -> None:
    ev = only(scan_lines(DEEPSPEED_MIN_SCALE), EventKind.LOSS_SCALE_MIN)
    assert ev.data == {"framework": "deepspeed"}


def test_fairseq_minimum_loss_scale() -> None:
    # fairseq FP16Optimizer's FloatingPointError text (fairseq/optim/fp16_optimizer.py), as printed when it propagates.
    line = ("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. "
            "Try lowering the learning rate, using gradient clipping or increasing the batch size.")
    ev = only(scan_lines([line]), EventKind.LOSS_SCALE_MIN)
    assert ev.data == {"framework": "fairseq", "min_loss_scale": 0.0001}


def test_the_minimum_loss_scale_sentence_without_its_start() -> None:
    # a paste that lost the first words still has fairseq's second sentence, printed only at the minimum
    cut = "scale reached (0.0001). Your loss is probably exploding. Try lowering the learning rate"
    ev = only(scan_lines([cut]), EventKind.LOSS_SCALE_MIN)
    assert ev.data == {"framework": "fairseq"}
    assert scan_lines(["my loss is exploding, what can I try?"]) == []


def test_loss_scale_overflow_lines_are_left_to_the_readers() -> None:
    # DeepSpeed / fairseq overflow notices are LOSS_SCALE events of their readers, not signatures.
    lines = [ln for block in (sample_blocks("deepspeed.txt"), sample_blocks("fairseq.txt")) for b in block.values()
             for ln in b]
    assert any("Attempted loss scale: 1, reducing to 1" in ln for ln in lines)
    assert scan_lines(lines) == []


# -- torch.distributed.elastic, signals, host OOM --------------------------------------------------------

def test_elastic_root_cause_block_sigsegv() -> None:
    lines = sample_block(SIG, "hallo2/issues/75")
    events = scan_lines(lines)
    assert kinds(events) == [EventKind.ELASTIC_FAILURE, EventKind.SIGNAL]
    fail, sig = events
    assert fail.line == 6 and fail.raw == lines[5] and fail.rank == 0  # the exitcode line
    assert fail.data == {"origin": "summary", "root_cause": True, "failure_index": 0, "time": "2025-03-04_15:41:29",
                         "host": "amax", "error_file": "<N/A>", "rank": 0, "local_rank": 0, "exitcode": -11,
                         "pid": 3182701, "signal": 11, "signal_name": "SIGSEGV"}
    assert sig.data["signal"] == 11 and sig.data["signal_name"] == "SIGSEGV" and sig.data["pid"] == 3182701


def test_elastic_child_failed_sigkill_is_host_oom_candidate() -> None:
    lines = sample_block(SIG, "lzhxmu/CPPO/issues/6")
    events = scan_lines(lines)
    assert kinds(events) == [EventKind.ELASTIC_FAILURE, EventKind.SIGNAL, EventKind.HOST_OOM]
    assert all(e.line == 2 for e in events)  # the exitcode line
    assert events[0].data["exitcode"] == -9 and events[0].data["pid"] == 14750
    assert events[1].data["signal_name"] == "SIGKILL"
    assert events[2].data["likely_host_oom"] is True and events[2].data["pid"] == 14750


def test_elastic_agent_lines() -> None:
    events = scan_lines(sample_block(SIG, "StreamVLN/issues/66"))
    assert kinds(events) == [EventKind.ELASTIC_FAILURE, EventKind.ELASTIC_FAILURE, EventKind.SIGNAL]
    term, failed, sig = events
    assert term.line == 1 and term.data["pid"] == 14777 and term.data["terminated_by_agent"] is True
    assert term.data["signal_name"] == "SIGTERM"
    assert failed.line == 2
    assert failed.data == {"origin": "agent", "exitcode": -8, "local_rank": 1, "pid": 14778,
                           "binary": "/root/miniconda3/envs/streamvln/bin/python3.9"}
    assert sig.data["signal"] == 8 and sig.data["signal_name"] == "SIGFPE"


def test_elastic_agent_glog_prefix() -> None:
    events = scan_lines(sample_block(SIG, "Open-Sora/issues/826"))
    assert kinds(events) == [EventKind.ELASTIC_FAILURE, EventKind.SIGNAL]
    assert events[0].data["local_rank"] == 0 and events[0].data["pid"] == 2967105 and events[0].data["exitcode"] == -8


def test_full_elastic_summary_with_failures_section() -> None:
    # The layout torch prints (torch.distributed.elastic): the launcher's own traceback ending in ChildFailedError,
    # then one entry per failed rank; the root cause is flagged.
    lines = [
        "Traceback (most recent call last):",
        '  File "/usr/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "[1]:",
        "  time      : 2024-05-01_10:00:02",
        "  host      : node7",
        "  rank      : 9 (local_rank: 1)",
        "  exitcode  : 1 (pid: 4242)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-05-01_10:00:01",
        "  host      : node7",
        "  rank      : 8 (local_rank: 0)",
        "  exitcode  : -6 (pid: 4241)",
        "  error_file: <N/A>",
        "  traceback : Signal 6 (SIGABRT) received by PID 4241",
        "============================================================",
    ]
    events = scan_lines(lines)
    assert kinds(events) == [EventKind.TRACEBACK, EventKind.ELASTIC_FAILURE, EventKind.ELASTIC_FAILURE,
                             EventKind.SIGNAL]
    tb, other, root, sig = events
    assert tb.data["exc_type"] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
    assert other.rank == 9 and other.data["exitcode"] == 1 and other.data["root_cause"] is False
    assert other.data["script"] == "train.py" and other.line == 13
    assert root.rank == 8 and root.data["root_cause"] is True and root.data["signal_name"] == "SIGABRT"
    assert root.line == 22 and sig.data["signal"] == 6


def test_segfault_behind_tee_prefix() -> None:
    ev = only(scan_lines(sample_block(SIG, "pytorch/pytorch/issues/75087")), EventKind.SIGNAL)
    assert ev.rank == 3 and ev.data["signal"] == 11 and ev.data["signal_name"] == "SIGSEGV"


def test_shell_killed_and_kernel_oom_killer() -> None:
    events = scan_lines(["Killed",
                         "Out of memory: Killed process 4123 (python) total-vm:98765432kB, anon-rss:65011712kB",
                         "the word Killed in prose is not a signal"])
    assert kinds(events) == [EventKind.SIGNAL, EventKind.HOST_OOM, EventKind.HOST_OOM]
    assert events[0].data["signal_name"] == "SIGKILL" and events[1].data["likely_host_oom"] is True
    assert events[2].data["pid"] == 4123 and events[2].data["anon_rss_gib"] == 62.0


def test_an_exit_status_past_128_is_the_signal_that_ended_the_process() -> None:
    events = scan_lines(["# command terminated with exit code 137",  # kubectl exec, oumi-ai/oumi (a pasted pod log)
                         "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit "
                         "status 139.",
                         "Exited with code 1", "exit code 1370"])
    assert kinds(events) == [EventKind.SIGNAL, EventKind.HOST_OOM, EventKind.SIGNAL]
    assert events[0].data == {"exit_status": 137, "signal": 9, "signal_name": "SIGKILL"}
    assert events[1].data["likely_host_oom"] is True
    assert events[2].data["signal_name"] == "SIGSEGV"


# -- GPU hardware ---------------------------------------------------------------------------------------

def test_uncorrectable_ecc_and_its_trailer() -> None:
    events = scan_lines(sample_block(SIG, "jade-hpc-gpu"))
    assert kinds(events) == [EventKind.ECC]  # the "kernel errors might be asynchronously reported" line is no event
    assert events[0].data == {"uncorrectable": True, "cuda_error": "uncorrectable ECC error encountered"}


def test_xid_lines() -> None:
    ev = only(scan_lines(sample_block(SIG, "leptonai/gpud/pull/46")), EventKind.XID)
    assert ev.data["xid"] == 109 and ev.data["pci"] == "0000:cb:00" and ev.data["pid"] == 1797828
    assert ev.data["name"] == "pt_main_thread" and ev.data["error_string"] == "CTX SWITCH TIMEOUT"
    ev = only(scan_lines(sample_block(SIG, "leptonai/gpud/pull/1174")), EventKind.XID)
    assert ev.data == {"xid": 94, "pci": "0000:9b:00", "pid": 1234, "name": "python3",
                       "message": "Contained ECC error", "category": "ecc"}


def test_gpu_fallen_off_the_bus_multiline() -> None:
    events = scan_lines(sample_block(SIG, "NVSentinel/issues/155"))
    assert kinds(events) == [EventKind.GPU_LOST]
    assert events[0].line == 3
    assert events[0].data == {"pci": "0000:b3:00.0", "start_line": 1, "pci_device_id": "10de:26b5"}


# -- tracebacks ----------------------------------------------------------------------------------------

def test_traceback_behind_rank_prefixes_interleaved_with_another_rank() -> None:
    frames = sample_block("rank_prefixes.txt", "bionemo-recipes/issues/794")  # verbatim frame + code line
    oom = sample_block(SIG, "CADS/issues/4")[0]
    lines = ["29: [rank29]: Traceback (most recent call last):",
             '29: [rank29]:   File "/workspace/bionemo/train.py", line 88, in <module>',
             "[rank3]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405",
             *frames,
             '29: [rank29]:   File "/workspace/bionemo/model.py", line 12, in forward',
             "29: [rank29]:     x = self.mlp(x)",
             "29: [rank29]:         ^^^^^^^^^^^",
             f"29: [rank29]: {oom}"]
    events = scan_lines(lines)
    assert kinds(events) == [EventKind.TRACEBACK, EventKind.OOM]
    tb, ev = events
    assert tb.rank == 29 and ev.rank == 29 and tb.line == ev.line == 9
    assert tb.data["exc_type"] == "torch.OutOfMemoryError"
    assert tb.data["message"].startswith("CUDA out of memory. Tried to allocate 22.78 GiB")
    assert tb.data["frames"] == [
        {"file": "/workspace/bionemo/train.py", "line": 88, "function": "<module>"},
        {"file": "/usr/local/lib/python3.12/dist-packages/lightning/pytorch/core/module.py", "line": 1306,
         "function": "optimizer_step"},
        {"file": "/workspace/bionemo/model.py", "line": 12, "function": "forward"}]
    assert [f["file"] for f in tb.data["user_frames"]] == ["/workspace/bionemo/train.py", "/workspace/bionemo/model.py"]
    assert tb.data["last_user_frame"]["function"] == "forward"
    assert tb.data["start_line"] == 1 and tb.data["index"] == 1
    assert ev.data["requested_gib"] == 22.78


def test_chained_tracebacks_and_last_one_identifiable() -> None:
    lines = ["Traceback (most recent call last):",
             '  File "train.py", line 3, in <module>',
             '    d["x"]',
             "KeyError: 'x'",
             "",
             "The above exception was the direct cause of the following exception:",
             "",
             "Traceback (most recent call last):",
             '  File "train.py", line 5, in <module>',
             '    raise RuntimeError("config broken") from e',
             "RuntimeError: config broken"]
    events = scan_lines(lines)
    assert kinds(events) == [EventKind.TRACEBACK, EventKind.TRACEBACK]
    first, last = events
    assert (first.line, first.data["index"], first.data["exc_type"], first.data["message"]) == (4, 1, "KeyError", "'x'")
    assert (last.line, last.data["index"], last.data["exc_type"]) == (11, 2, "RuntimeError")
    assert last.data["chained_from"] == {"exc_type": "KeyError", "message": "'x'", "line": 4, "index": 1,
                                         "relation": "cause"}
    assert "chained_from" not in first.data


def test_traceback_after_logger_prefix_and_incomplete_at_eof() -> None:
    header = sample_block("rank_prefixes.txt", "alibaba/ROLL/issues/193")
    events = scan_lines(header)
    assert kinds(events) == [EventKind.TRACEBACK]
    assert events[0].data["incomplete"] is True and events[0].data["exc_type"] is None and events[0].line == 1
    # The same prefix on every line (timestamps differ) is stripped before the frames are read.
    lines = ["ERROR 04-01 23:46:56 [engine.py:160] Traceback (most recent call last):",
             'ERROR 04-01 23:46:56 [engine.py:160]   File "/app/serve.py", line 7, in run',
             "ERROR 04-01 23:46:57 [engine.py:160]     step()",
             "ERROR 04-01 23:46:57 [engine.py:160] ValueError: bad batch"]
    ev = only(scan_lines(lines), EventKind.TRACEBACK)
    assert (ev.data["exc_type"], ev.data["message"], ev.line) == ("ValueError", "bad batch", 4)
    assert ev.data["frames"] == [{"file": "/app/serve.py", "line": 7, "function": "run"}]


def test_bare_uncaught_exception_line_is_error() -> None:
    events = scan_lines(["RuntimeError: Expected all tensors to be on the same device, but found at least two devices",
                         "  RuntimeError: indented, quoted in a message: not an uncaught exception",
                         "Mean Absolute Error: 0.25"])
    ev = only(events, EventKind.ERROR)
    assert ev.data["exc_type"] == "RuntimeError" and ev.data["uncaught"] is True and ev.line == 1


def test_ci_markers() -> None:
    # Megatron-LM CI text (tests/functional_tests).
    events = scan_lines(["Training failed. Aborting.",
                         "Approximate comparison of iteration-time: FAILED",
                         "AssertionError: The following metrics failed: iteration-time, lm loss",
                         "RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert kinds(events) == [EventKind.ERROR, EventKind.GATE, EventKind.GATE, EventKind.ERROR]
    assert events[0].data["marker"] == "training_failed"
    assert events[1].data == {"ci": "megatron", "check": "approximate", "metric": "iteration-time", "passed": False}
    assert events[2].data["failed_metrics"] == ["iteration-time", "lm loss"]
    assert events[3].data == {"cuda_error": "an illegal memory access was encountered", "fatal": True}


def test_oom_spellings_without_numbers() -> None:
    thc = next(ln for ln in corpus_log("pytorch-loop-facebookarchive-loop-57") if "THCudaCheck" in ln)  # glued to a bar
    loop = corpus_log("pytorch-loop-Bolin42-WaterMarkModel", "training.log")[-1]  # a loop's own report
    dlib = next(ln for ln in corpus_log("dlib-davisking-dlib-252") if "cudaMalloc" in ln)  # a CUDA CHECK macro's
    for line in (thc, loop, dlib, "RuntimeError: CUDA out of memory."):  # the last: cut before its numbers
        assert only(scan_lines([line]), EventKind.OOM).data == {"device": "CUDA"}, line
    assert scan_lines(["cuda out of memory handling: enabled", "Reduce batch size if CUDA OOM"]) == []


def test_marian_cuda_check_spellings() -> None:
    # Marian's CUDA_CHECK ("CUDA error <code> '<cudaGetErrorString>' - <file>:<line>: <call>"), as Marian logs it
    oom = next(ln for ln in corpus_log("marian-cepin19-dp-wmt-bt-encs-workspace-oom") if "CUDA error 2" in ln)
    assert only(scan_lines([oom]), EventKind.OOM).data == {"device": "CUDA"}
    illegal = next(ln for ln in corpus_log("marian-cepin19-dp-wmt-bt-encs-illegal-memory-access") if "CUDA error 77" in ln)
    ev = only(scan_lines([illegal]), EventKind.ERROR)
    assert ev.data == {"cuda_error": "an illegal memory access was encountered", "fatal": True}


# -- whole files -------------------------------------------------------------------------------------------

def test_whole_signature_file_every_block_yields_events() -> None:
    """Fed as one log (with the '# source:' lines as noise), every block still produces its events."""
    per_block = {header: scan_lines(lines) for header, lines in sample_blocks(SIG).items()}
    assert all(per_block.values()), [h for h, evs in per_block.items() if not evs]
    whole = scan_lines((LOG_SAMPLES / SIG).read_text(encoding="utf-8").splitlines())
    expected = sorted(e.kind.value for evs in per_block.values() for e in evs)
    assert sorted(e.kind.value for e in whole) == expected


@pytest.mark.parametrize("name", sorted(p.name for p in LOG_SAMPLES.glob("*.txt")
                                        if p.name not in (SIG, "rank_prefixes.txt")))
def test_clean_training_logs_produce_no_events(name: str) -> None:
    lines = (LOG_SAMPLES / name).read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 2
    assert scan_lines(lines) == []


def test_through_the_reader_pipeline(tmp_path: Path) -> None:
    """A text log read by load_run: events carry the source path, rank and the step of the last metric."""
    from trainaudit.ingest import load_run

    meg_lines = [ln for ln in (LOG_SAMPLES / "megatron.txt").read_text(encoding="utf-8").splitlines()
                 if ln.lstrip().startswith("[2024-04-06") and "iteration" in ln]
    assert len(meg_lines) >= 2
    log = write_lines(tmp_path / "train.log", [*meg_lines, *sample_block(SIG, "CADS/issues/4")])
    run, _problems = load_run([str(log)])
    oom = [e for e in run.events if e.kind is EventKind.OOM]
    assert len(oom) == 1
    assert oom[0].source == str(log) and oom[0].line == len(meg_lines) + 1
    assert oom[0].step == 45  # the last iteration line before the OOM
    assert oom[0].data["requested_gib"] == 22.78


# -- helpers -------------------------------------------------------------------------------------------------

def test_helpers() -> None:
    assert to_gib("0 bytes") == 0.0 and to_gib("2 KiB") == 2 / 1024**2 and to_gib("1.5 TiB") == 1536.0
    assert is_user_frame("/workspace/train.py") and is_user_frame("train.py")
    assert not is_user_frame("/usr/lib/python3.10/runpy.py")
    assert not is_user_frame("/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py")
    assert not is_user_frame("<frozen runpy>")
    # The gate must reject an ordinary metric line and accept every signature line.
    assert GATE.search(" iteration       43/     100 | consumed samples:         5504 | lm loss: 1.825991E+00 |") is None
    for lines in sample_blocks(SIG).values():
        assert any(GATE.search(ln) for ln in lines)


def test_deep_recursion_keeps_both_ends_of_the_stack() -> None:
    lines = ["Traceback (most recent call last):"]
    for i in range(100):
        lines += [f'  File "/app/rec.py", line {i + 1}, in f{i}', "    f()"]
    lines.append("RecursionError: maximum recursion depth exceeded")
    ev = only(scan_lines(lines), EventKind.TRACEBACK)
    assert ev.data["n_frames"] == 100 and len(ev.data["frames"]) == 40
    assert [f["function"] for f in ev.data["frames"][:5]] == ["f0", "f1", "f2", "f3", "f4"]
    assert ev.data["frames"][5]["function"] == "f65" and ev.data["frames"][-1]["function"] == "f99"


def test_more_hardware_and_loader_lines() -> None:
    # Texts of PyTorch, NCCL and the CUDA runtime.
    events = scan_lines([
        "RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed. ",
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python, GPU has fallen off the bus.",
    ])
    assert kinds(events) == [EventKind.SIGNAL, EventKind.HOST_OOM, EventKind.DISTRIBUTED_ERROR, EventKind.XID]
    assert events[0].data["pid"] == 31337 and events[0].data["dataloader_worker"] is True
    assert events[2].data["nccl_error"] == "unhandled system error" and events[2].data["nccl_version"] == "2.19.3"
    assert events[3].data["xid"] == 79 and events[3].data["category"] == "gpu_lost"


def test_a_loader_workers_bus_error_is_shared_memory_exhausted_and_a_segfault_is_not() -> None:
    (line,) = [ln for ln in corpus_log("yolov5-ultralytics-yolov3-1151") if "Bus error" in ln]
    events = scan_lines([line.removeprefix("> ")])
    assert kinds(events) == [EventKind.SIGNAL, EventKind.HOST_OOM]
    assert events[0].data["signal"] == 7 and events[1].data["shared_memory"] is True
    assert "out of shared memory" in events[1].message
    seg = scan_lines(["RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault. "])
    assert kinds(seg) == [EventKind.SIGNAL]


def test_frames_without_their_traceback_header_are_a_traceback() -> None:
    # a process killed while it hung leaves only its stack; a paste can start below the header
    lines = corpus_log("pytorch-loop-vskode-acodet-47")
    sc = SignatureScanner("log.txt")
    events = [e for no, t in enumerate(lines, 1) for e in sc.feed(Line(no, t, None, t))] + sc.finish()
    (tb,) = [e for e in events if e.kind is EventKind.TRACEBACK]
    assert tb.data["incomplete"] is True
    assert tb.data["frames"][-1]["function"] == "_try_get_data"
    assert tb.data["frames"][-1]["file"].endswith("torch/utils/data/dataloader.py")
