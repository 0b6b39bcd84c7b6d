"""The catalogue of messages with a known meaning: each entry matches its message as printed (real
lines from the corpus where one exists, else the library's own text, cited) and nothing else."""

from __future__ import annotations

from pathlib import Path

import catalogue_doc
import pytest
from shared_data import corpus_log, write_lines

from trainaudit.ingest import catalogue, load_run
from trainaudit.model import EventKind
from trainaudit.rules import run_rules

# entry id -> a line that prints it
LINES = {
    # torch/utils/checkpoint.py
    "checkpoint-no-grad": "UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
    # torch/nn/functional.py (mse_loss)
    "loss-broadcast": "UserWarning: Using a target size (torch.Size([8])) that is different to the input size "
                      "(torch.Size([8, 1])). This will likely lead to incorrect results due to broadcasting.",
    "var-dof": "UserWarning: var(): degrees of freedom is <= 0. Correction should be strictly less than the "
               "reduction factor (input numel divided by output numel).",
    "scheduler-order": "UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch "
                       "1.1.0 and later, you should call them in the opposite order",
    "ddp-grad-strides": "UserWarning: Grad strides do not match bucket view strides. This may indicate grad was "
                        "not created according to the gradient layout contract",
    "espnet-nan-grad": corpus_log("espnet-espnet-espnet-3170")[0],
    "tensorboard-nan": corpus_log("wenet-wenet-e2e-wenet-825")[1],
    "tf-loss-nan": next(ln for ln in corpus_log("tf1-yangxue0827-FPN_Tensorflow-2") if "LossTensor" in ln),
    "detectron2-nan": "FloatingPointError: Loss became infinite or NaN at iteration=2137!",
    "fairseq-oom-skip": next(ln for ln in corpus_log("fairseq-facebookresearch-fairseq-103") if "ran out" in ln),
    "deepspeed-launcher-sigkill": corpus_log("deepspeed-casia-lmc-lab-anomalygpt-43")[-1],
    "shell-killed": "**Killed**",
    "shell-killed-zh": corpus_log("mmengine-open-mmlab-mmsegmentation-308")[-1],
    "cuda-allocator-oom": corpus_log("pytorch-loop-jingyaogong-minimind-845")[2],
    "metal-oom": corpus_log("mlx-lm-ml-explore-mlx-lm-236")[6],
    "cuda-device-assert": next(ln for ln in corpus_log("pytorch-loop-xavysp-dexined-60") if "Assertion" in ln),
    "pcie-aer": next(ln for ln in corpus_log("returnn-rwth-i6-returnn-1486") if "PCIe Bus Error" in ln),
    "tf-no-gradient": corpus_log("tf-od-api-v2-keras-team-keras-14524")[0],
    "assert-threshold": next(ln for ln in corpus_log("optimum-graphcore-huggingface-optimum-graphcore-210")
                             if "not greater than" in ln),
    "assert-close": next(ln for ln in corpus_log("liger-kernel-linkedin-liger-kernel-704") if "mismatched" in ln),
    "llmc-not-ok": next(ln for ln in corpus_log("llm.c-karpathy-llm.c-228") if ln.startswith("NOT OK")),
    "gtest-failure": next(ln for ln in corpus_log("nntrainer-nntrainer-nntrainer-1125") if ln.endswith(": Failure")),
    "pytest-test-assert": "tests/test_examples.py:185: AssertionError",
    "pytest-close-check": next(ln for ln in corpus_log("liger-kernel-linkedin-Liger-Kernel-411") if ln.startswith(">")),
    "assert-not-equal": corpus_log("torchtitan-pytorch-torchtitan-4007")[0],
    "assert-not-close": corpus_log("transformer-engine-NVIDIA-TransformerEngine-3014")[0],
    "tf-oom": next(ln for ln in corpus_log("tf1-tensorflow-tensorflow-4735") if "OOM when" in ln),
    "notebook-cuda-oom": next(ln for ln in corpus_log("unsloth-unslothai-unsloth-3373") if "Traceback" in ln),
    "store-port-in-use": next(ln for ln in corpus_log("pytorch-loop-JVrabel-LLM_KD", "training.log")
                              if "failed to listen" in ln),
    "store-barrier-timeout": next(ln for ln in corpus_log("accelerate-huggingface-accelerate-157-2")
                                  if "Timed out" in ln),
    # a rank waiting for the others to join: context (no category), no failure by itself
    "store-barrier-wait": next(ln for ln in corpus_log("yolov5-ultralytics-yolov5-4409") if ln.startswith("Waiting")),
    "accelerate-collective-shapes": next(ln for ln in corpus_log(
        "accelerate-huggingface-accelerate-docs-troubleshooting-shape-mismatch") if "DistributedOperation" in ln),
    "fastchat-tokenization-mismatch": corpus_log("hf-transformers-lm-sys-FastChat-3266")[0],
    "hf-debug-inf-nan": corpus_log("hf-transformers-huggingface-transformers-docs-debugging-mt5-fp16-overflow")[0],
    "theano-nan-detected": next(ln for ln in corpus_log("theano-ryankiros-visual-semantic-embedding-10")
                                if "NaN" in ln),
    "icefall-gradient-scale-tiny": corpus_log("icefall-k2-fsa-icefall-1895")[0],
    "loss-not-finite-stop": next(ln for ln in corpus_log("pytorch-loop-LTH14-mar-69") if "stopping training" in ln),
    "nccl-cuda-calloc": "localhost: [rank0]: Failed to CUDA calloc async 4 bytes",
    "ignite-terminate-on-nan": "2026-11-29 23:01:21,636 ignite.handlers.terminate_on_nan.TerminateOnNan WARNING: "
                               "TerminateOnNan: Output 'nan' contains NaN or Inf. Stop training",
    # lightning/pytorch/callbacks/early_stopping.py, _evaluate_stopping_criteria
    "lightning-early-stopping": "Monitored metric val_loss did not improve in the last 3 records. Best score: 0.426. "
                                "Signaling Trainer to stop.",
    "keras-early-stopping": next(ln for ln in corpus_log("keras-KyotoSunshine-CNN-for-handwritten-kanji-augmented")
                                 if "early stopping" in ln),
    "fastai-early-stopping": next(ln for ln in corpus_log("fastai-fastai-nbs-tracker-early-stopping-lr-1e-7")
                                  if "early stopping" in ln),
    "ultralytics-early-stopping": next(ln for ln in corpus_log("ultralytics-Seliah-thesis-yolov8n-patience5")
                                       if "Stopping training early" in ln),
    "gpt-neox-overflow-exit": next(ln for ln in corpus_log("gpt-neox-EleutherAI-gpt-neox-482") if "in a row" in ln),
    "worker-timeout": next(ln for ln in corpus_log("gluonts-awslabs-gluonts-689") if "Worker timed out" in ln),
    # torch/utils/data/dataloader.py, _try_get_data
    "dataloader-timeout": "RuntimeError: DataLoader timed out after 120 seconds",
    # printed by real torch 2.13 CPU runs (tests/corpus/runs: a tensor too large, a gloo peer killed or stuck)
    "cpu-alloc-oom": "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                     "memory: you tried to allocate 5497558138880 bytes. Error code 12 (Cannot allocate memory)",
    "gloo-peer-closed": "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                        "Connection closed by peer [127.0.0.1]:35469",
    "gloo-peer-reset": "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read "
                       "error [127.0.0.1]:721: Connection reset by peer",
    "gloo-timeout": "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
                    "Timed out waiting 5000ms for recv operation to complete",
}


def test_every_entry_has_a_line_and_matches_it() -> None:
    assert {k.id for k in catalogue.CATALOGUE} <= set(LINES) | {"tf-check-numerics", "glog-check-failed",
                                                               "assert-expected", "numpy-tolerance"}
    for kid, line in LINES.items():
        k = catalogue.match(line)
        assert k is not None and k.id == kid, (kid, line, k and k.id)


@pytest.mark.parametrize("line", [
    "Killed 3 processes", "loss: 0.5, Tensor had a look", "the worker was Killed", "epoch 3: 12 jobs Killed", "step 100 | loss 2.1 | grad norm 0.8",
    "INFO: checking whether None of the inputs is empty", "train.py:12: in main",
    # TensorFlow's allocator retrying, not failing (the op that fails says "OOM when allocating tensor")
    "W tensorflow/core/common_runtime/bfc_allocator.cc:217] Allocator (GPU_0_bfc) ran out of memory trying to "
    "allocate 84.60MiB. The caller indicates that this is not a failure",
    "ValueError                                Traceback (most recent call last)",
    # ScaledAdam clipping as it does in healthy training, and a gradient norm that is NaN (factor 0.0)
    "2024-01-05 10:22:38,995 WARNING [optim.py:385] Scaling gradients by 0.0451, model_norm_threshold=91.5",
    "WARNING [optim.py:385] Scaling gradients by 2.5e-05, model_norm_threshold=911.5296020507812",
    "WARNING [optim.py:385] Scaling gradients by 0.0, model_norm_threshold=911.5296020507812",
    "Loss is 2.31, stopping training at epoch 40 (early stopping)",
    # an interpreter's prompt and a closed file, not pytest's mark of the line that raised
    ">>> np.allclose(a, b)", "> closed the connection after np.allclose", "INFO: closing the writer",
])
def test_ordinary_lines_match_nothing(line: str) -> None:
    assert catalogue.match(line) is None


def test_killed_glued_to_the_progress_bar_it_interrupted() -> None:
    # the shell prints its message after the last redraw of the bar (lines written here in the shapes of
    # mmcv's ProgressBar and tqdm): the process was killed, as when the message stands alone
    for bar in ("[>>>>>>>>>>>>>       ] 3217/3849, 4.0 task/s, elapsed: 799s, ETA:   157s",
                " 45%|████▌     | 450/1000 [01:02<01:16,  7.20it/s]", "Evaluating: 62%"):
        k = catalogue.match(bar + "Killed")
        assert k is not None and k.id == "shell-killed" and k.signal == 9, bar


def test_waiting_in_the_store_barrier_is_context_only() -> None:
    k = catalogue.match(LINES["store-barrier-wait"])
    assert k is not None and k.category is None and not k.fatal


def test_a_known_warning_becomes_a_finding_with_its_category(tmp_path: Path) -> None:
    lines = ["step 1 | loss 2.30", LINES["checkpoint-no-grad"], "step 2 | loss 2.30", "step 3 | loss 2.30"]
    run, _ = load_run([str(write_lines(tmp_path / "t.log", lines))])
    [ev] = [e for e in run.events if e.kind is EventKind.WARNING]
    assert ev.data["known"] == "checkpoint-no-grad" and ev.line == 2 and "huggingface" in ev.data["source"]
    hits = [h for h in run_rules(run) if h.rule == "TA501"]
    assert len(hits) == 1 and hits[0].category == "plateau" and hits[0].severity == "high"
    assert hits[0].first_bad_step == 1  # printed after step 1


def test_a_failed_reference_check_is_a_golden_mismatch(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "ci.log", corpus_log("optimum-graphcore-huggingface-optimum-graphcore-210"))
    run, _ = load_run([str(path)])
    hits = [h for h in run_rules(run) if h.rule == "TA805"]
    assert len(hits) == 1 and hits[0].category == "golden_mismatch" and "0.65" in hits[0].message
    assert hits[0].first_bad_step is None  # a test suite's output has no training step


def test_a_nan_stop_is_nan_inf_not_a_crash(tmp_path: Path) -> None:
    lines = ["[12/01 10:00:00 d2.utils.events]:  iter: 2119  total_loss: 1.2  loss_cls: 0.5",
             "Traceback (most recent call last):", '  File "train.py", line 10, in <module>',
             "    trainer.train()", LINES["detectron2-nan"]]
    run, _ = load_run([str(write_lines(tmp_path / "d2.log", lines))])
    rules = {h.rule: h for h in run_rules(run)}
    assert "TA410" not in rules and rules["TA101"].fatal and rules["TA101"].category == "nan_inf"


def test_a_pytest_summary_line_of_a_failed_assertion_is_a_reference_check() -> None:
    line = corpus_log("deepspeed-huggingface-transformers-41925")[0]
    assert line.startswith("FAILED tests/") and (k := catalogue.match(line)) is not None and k.id == "pytest-test-assert"


def test_the_documented_catalogue_is_current() -> None:
    doc = catalogue_doc.DOC.read_text(encoding="utf-8")
    assert catalogue_doc.updated(doc) == doc, "docs/error-signatures.md is stale: run python tools/catalogue_doc.py"


def _match_by_entry(text: str) -> object:
    """The catalogue's first matching entry, one ``in`` test per entry (what the trie pre-check spares)."""
    for k in catalogue.CATALOGUE:
        if all(n in text for n in k.needles) and (k.pattern is None or k.pattern.search(text) is not None):
            return k
    return None


def test_the_trie_precheck_matches_what_the_entry_loop_matches() -> None:
    import random

    rng = random.Random(7)
    lines = [ln for p in sorted((Path(__file__).resolve().parents[1] / "fixtures" / "formats").rglob("*.log"))
             for ln in p.read_text(encoding="utf-8", errors="replace").splitlines()]
    for k in catalogue.CATALOGUE:  # every entry's needles, alone, together, cut short, in other text
        lines += [" ".join(k.needles), k.needles[0], k.needles[0][:-1], f"x {' and '.join(k.needles)} y",
                  k.needles[-1] + k.needles[0]]
    alphabet = "".join(sorted({c for k in catalogue.CATALOGUE for n in k.needles for c in n})) + " \t:./"
    lines += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    assert len(lines) > 3000 and sum(_match_by_entry(t) is not None for t in lines) > len(catalogue.CATALOGUE)
    for t in lines:
        assert catalogue.match(t) is _match_by_entry(t), t
