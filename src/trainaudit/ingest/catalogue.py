"""Known messages: warnings and errors whose meaning is established, with the source of the meaning.

A training log says more than its numbers. ``None of the inputs have requires_grad=True`` under
gradient checkpointing means the checkpointed layers get no gradient; ``var(): degrees of freedom
is <= 0`` means a variance of one element, a NaN. Each entry names the text to find (literal
substrings, checked before any regular expression runs), what it means, the category it is
evidence for (or None for context only), and a public source for that meaning: the library code
that prints it, its documentation, or the thread where its meaning was established.

docs/error-signatures.md lists the catalogue; :class:`~trainaudit.ingest.signatures.SignatureScanner`
reports a match as an event whose ``data["known"]`` is the entry's id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainaudit.ingest.text import trie_pattern
from trainaudit.model import EventKind


@dataclass(frozen=True, slots=True)
class Known:
    id: str
    needles: tuple[str, ...]  # every one must be in the line
    kind: EventKind
    meaning: str
    category: str | None  # a category of docs/answer.md, or None: context, not a problem
    severity: str
    source: str
    fatal: bool = False  # the run stops here
    pattern: re.Pattern[str] | None = None  # optional, linear: must also match (anchors the message)
    signal: int | None = None  # for SIGNAL events: the signal number
    normal_in_game: bool = False  # what a GAN's log prints in normal training (a player's loss among its series)
    stops_early: bool = False  # an early-stopping callback ending the run: the validation metric stopped improving


_SHELL_KILLED = "the shell reports the process killed by SIGKILL, most often the kernel's OOM killer (host memory)"

CATALOGUE: tuple[Known, ...] = (
    Known("checkpoint-no-grad", ("None of the inputs have requires_grad=True",), EventKind.WARNING,
          "gradient checkpointing received inputs that do not require grad (e.g. frozen embeddings under "
          "LoRA): no gradient flows through the checkpointed blocks, so they do not train",
          "plateau", "high",
          "https://github.com/pytorch/pytorch/blob/main/torch/utils/checkpoint.py (the warning); "
          "https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel."
          "enable_input_require_grads (the fix)"),
    Known("loss-broadcast", ("Using a target size", "that is different to the input size"), EventKind.WARNING,
          "the loss compares tensors of different shapes and broadcasts them: the loss is not the intended one "
          "(PyTorch: 'This will likely lead to incorrect results due to broadcasting')",
          "plateau", "high", "https://github.com/pytorch/pytorch/blob/main/torch/nn/functional.py (mse_loss, "
          "l1_loss, binary_cross_entropy size checks)"),
    Known("var-dof", ("degrees of freedom is <= 0",), EventKind.NAN_CHECK,
          "a variance or standard deviation over a single element (batch of one, a normalisation over one value): "
          "the result is NaN", "nan_inf", "high",
          "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/ReduceOps.cpp (var/std warning)"),
    Known("scheduler-order", ("lr_scheduler.step()", "before `optimizer.step()`"), EventKind.WARNING,
          "the scheduler stepped before the optimizer: the first value of the learning-rate schedule is skipped",
          None, "info", "https://github.com/pytorch/pytorch/blob/main/torch/optim/lr_scheduler.py"),
    Known("ddp-grad-strides", ("Grad strides do not match bucket view strides",), EventKind.WARNING,
          "DDP copies gradients into buckets with a different memory layout (often channels_last): this may "
          "impair performance", "throughput_regression", "low",
          "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/reducer.cpp"),
    Known("espnet-nan-grad", ("The grad norm is nan. Skipping updating the model",), EventKind.NAN_CHECK,
          "ESPnet found a NaN gradient norm and skipped the update", "nan_inf", "high",
          "https://github.com/espnet/espnet/blob/master/espnet2/train/trainer.py"),
    Known("tensorboard-nan", ("NaN or Inf found in input tensor",), EventKind.NAN_CHECK,
          "a value logged to TensorBoard (usually the loss) is NaN or Inf", "nan_inf", "high",
          "https://github.com/pytorch/pytorch/blob/main/torch/utils/tensorboard/_convert_np.py"),
    Known("tf-loss-nan", ("LossTensor is inf or nan",), EventKind.NAN_CHECK,
          "the TensorFlow Object Detection API's loss check found a NaN/Inf loss", "nan_inf", "critical",
          "https://github.com/tensorflow/models/blob/master/research/object_detection/legacy/trainer.py"),
    Known("tf-check-numerics", ("Tensor had", "values"), EventKind.NAN_CHECK,
          "TensorFlow's CheckNumerics found NaN or Inf values in a tensor (e.g. the loss)", "nan_inf", "critical",
          "https://www.tensorflow.org/api_docs/python/tf/debugging/check_numerics",
          pattern=re.compile(r"Tensor had (?:NaN|Inf|NaN and Inf) values")),
    Known("detectron2-nan", ("Loss became infinite or NaN at iteration",), EventKind.NAN_CHECK,
          "detectron2 stops training on a non-finite loss", "nan_inf", "critical",
          "https://github.com/facebookresearch/detectron2/blob/main/detectron2/engine/train_loop.py", fatal=True),
    # transformers' DebugUnderflowOverflow dumps the last forward frames of the batch, then raises
    Known("hf-debug-inf-nan", ("Detected inf/nan during batch_number",), EventKind.NAN_CHECK,
          "transformers' DebugUnderflowOverflow found an inf or NaN in a module's weights, inputs or outputs "
          "during this batch's forward pass and stops the run (the frames it lists end at the module that "
          "overflowed)", "nan_inf", "critical",
          "https://github.com/huggingface/transformers/blob/main/src/transformers/debug_utils.py "
          "(DebugUnderflowOverflow)", fatal=True,
          pattern=re.compile(r"Detected inf/nan during batch_number=(?P<step>\d{1,12})")),
    # Theano-era training loops (the deeplearning.net LSTM tutorial, dl4mt, visual-semantic-embedding)
    # print it alone on a line when the cost is NaN or Inf, then return from training
    Known("theano-nan-detected", ("NaN detected",), EventKind.NAN_CHECK,
          "the training loop's own check found the cost NaN or Inf and stopped training", "nan_inf", "critical",
          "https://github.com/lisa-lab/DeepLearningTutorials/blob/master/code/lstm.py (train_lstm)", fatal=True,
          pattern=re.compile(r"^\W{0,4}NaN detected\W{0,4}$")),
    # icefall's ScaledAdam clips the update to model_norm_threshold (twice the median of recent gradient
    # norms) and warns with the factor threshold / norm when it is under 0.1 or 0.5: a factor of 1e-6 or
    # less is a gradient norm a million times its recent median, an explosion, not clipping
    Known("icefall-gradient-scale-tiny", ("Scaling gradients by", "model_norm_threshold="), EventKind.WARNING,
          "icefall's ScaledAdam scaled the gradients by a factor of 1e-6 or less to bring their norm back to its "
          "clipping threshold: the gradient norm is at least a million times its recent median",
          "grad_explosion", "high",
          "https://github.com/k2-fsa/icefall/blob/master/egs/librispeech/ASR/zipformer/optim.py "
          "(ScaledAdam._get_clipping_scale)",
          pattern=re.compile(r"Scaling gradients by \d(?:\.\d{1,20})?e-(?:0[6-9]|[1-9]\d{1,2}),")),
    # the training loops of DeiT, DETR, MAE and their descendants check the loss every step and exit on a
    # non-finite one: print("Loss is {}, stopping training".format(loss_value)); sys.exit(1)
    Known("loss-not-finite-stop", ("Loss is", "stopping training"), EventKind.NAN_CHECK,
          "the training loop found the loss NaN or Inf and stopped the run", "nan_inf", "critical",
          "https://github.com/facebookresearch/deit/blob/main/engine.py (train_one_epoch); "
          "https://github.com/facebookresearch/detr/blob/main/engine.py", fatal=True,
          pattern=re.compile(r"Loss is [-+]?(?:nan|inf), stopping training")),
    # PyTorch-Ignite's TerminateOnNan handler warns and ends the run when an iteration's output (the loss)
    # is not finite: "TerminateOnNan: Output 'nan' contains NaN or Inf. Stop training"
    Known("ignite-terminate-on-nan", ("contains NaN or Inf. Stop training",), EventKind.NAN_CHECK,
          "PyTorch-Ignite's TerminateOnNan found the iteration's output (the loss) NaN or Inf and ended the run",
          "nan_inf", "critical",
          "https://github.com/pytorch/ignite/blob/master/ignite/handlers/terminate_on_nan.py", fatal=True),
    # an early-stopping callback ending the run because the monitored validation metric stopped improving:
    # the run stops where overfitting would start, by design (context, not a problem)
    Known("lightning-early-stopping", ("did not improve in the last", "Signaling Trainer to stop"), EventKind.PHASE,
          "Lightning's EarlyStopping callback stopped the run: the monitored metric did not improve for `patience` "
          "evaluations", None, "info",
          "https://github.com/Lightning-AI/pytorch-lightning/blob/master/src/lightning/pytorch/callbacks/early_stopping.py",
          stops_early=True),
    Known("keras-early-stopping", (": early stopping",), EventKind.PHASE,
          "Keras's EarlyStopping callback stopped the run: the monitored metric did not improve for `patience` epochs",
          None, "info", "https://github.com/keras-team/keras/blob/master/keras/src/callbacks/early_stopping.py",
          pattern=re.compile(r"Epoch \d+: early stopping"), stops_early=True),
    Known("fastai-early-stopping", ("No improvement since epoch", ": early stopping"), EventKind.PHASE,
          "fastai's EarlyStoppingCallback stopped the run: the monitored metric did not improve for `patience` epochs",
          None, "info", "https://github.com/fastai/fastai/blob/master/fastai/callback/tracker.py", stops_early=True),
    Known("ultralytics-early-stopping", ("Stopping training early as no improvement observed",), EventKind.PHASE,
          "Ultralytics' EarlyStopping stopped the run: the fitness did not improve for `patience` epochs", None, "info",
          "https://github.com/ultralytics/ultralytics/blob/main/ultralytics/utils/torch_utils.py (EarlyStopping)",
          stops_early=True),
    Known("gpt-neox-overflow-exit", ("iterations in a row due to Overflow",), EventKind.LOSS_SCALE_MIN,
          "the fp16 loss scaler skipped every step for too long (the loss scale cannot recover) and the run exits",
          "loss_scale_collapse", "critical", "https://github.com/EleutherAI/gpt-neox/blob/main/megatron/training.py",
          fatal=True),
    Known("dataloader-timeout", ("DataLoader", "timed out"), EventKind.ERROR,
          "a DataLoader worker did not deliver a batch in time: the input pipeline stalls (slow storage, a worker "
          "stuck on a sample, too little shared memory)", "data_pipeline", "critical",
          "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader (timeout)", fatal=True),
    Known("worker-timeout", ("Worker timed out",), EventKind.ERROR,
          "a data-loading worker did not deliver a batch in time: the input pipeline stalls", "data_pipeline",
          "critical", "https://ts.gluon.ai/stable/api/gluonts/gluonts.dataset.loader.html", fatal=True),
    Known("cpu-alloc-oom", ("DefaultCPUAllocator: can't allocate memory",), EventKind.HOST_OOM,
          "PyTorch's CPU allocator could not get the memory a tensor asked for: the process ran out of host memory",
          "oom", "critical", "https://github.com/pytorch/pytorch/blob/main/c10/core/impl/alloc_cpu.cpp", fatal=True),
    # TensorFlow's allocation failure, raised as ResourceExhaustedError ("OOM when allocating tensor with
    # shape[...] and type float on /job:.../device:GPU:0 by allocator GPU_0_bfc"): the op could not run
    Known("tf-oom", ("OOM when allocating tensor",), EventKind.OOM,
          "TensorFlow could not allocate a tensor on the device (ResourceExhaustedError): the model, batch or "
          "activations do not fit in its memory", "oom", "critical",
          "https://github.com/tensorflow/tensorflow/blob/master/tensorflow/core/framework/op_kernel.cc "
          "(OpKernelContext::allocate_tensor)", fatal=True),
    # a notebook (IPython) prints the exception's name before "Traceback", and the message only at the end
    Known("notebook-cuda-oom", ("OutOfMemoryError", "Traceback (most recent call last)"), EventKind.OOM,
          "a notebook's traceback of torch.OutOfMemoryError: the CUDA caching allocator could not get the "
          "memory asked for", "oom", "critical",
          "https://docs.pytorch.org/docs/stable/generated/torch.cuda.OutOfMemoryError.html", fatal=True,
          pattern=re.compile(r"^\s*(?:torch\.(?:cuda\.)?)?OutOfMemoryError\s+Traceback \(most recent call last\)")),
    # torch.distributed's store-based barrier (init_process_group waits for world_size workers to register)
    Known("store-barrier-timeout", ("Timed out initializing process group in store based barrier",),
          EventKind.DISTRIBUTED_ERROR,
          "init_process_group gave up waiting for every rank to join: a rank did not start, died at start-up, or "
          "the store holds a stale registration from an earlier launch", "distributed_failure", "critical",
          "https://github.com/pytorch/pytorch/blob/main/torch/distributed/distributed_c10d.py (_store_based_barrier)",
          fatal=True),
    # the rendezvous store's server could not bind its port (torch.distributed's TCPStore: "The server socket has
    # failed to listen on any local network address ... EADDRINUSE"): MASTER_PORT is taken by another job or a
    # process left from an earlier launch, so the process group never forms
    Known("store-port-in-use", ("The server socket has failed to listen",), EventKind.DISTRIBUTED_ERROR,
          "torch.distributed's rendezvous store could not listen on its port (another job or a leftover process "
          "holds MASTER_PORT): the process group cannot form and every rank exits", "distributed_failure",
          "critical", "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/socket.cpp "
          "(SocketListenFromHostOp)", fatal=True),
    # FastChat masks every target token of a conversation whose tokenization does not add up under its
    # template: the sample trains on nothing (a tokenizer that does not match the template: all of them)
    Known("fastchat-tokenization-mismatch", ("tokenization mismatch", "(ignored)"), EventKind.WARNING,
          "the conversation template's tokenization does not match the tokenizer's, so all target tokens of the "
          "sample are masked: it adds no loss (when every sample does, the loss and gradients are 0)",
          "data_pipeline", "high",
          "https://github.com/lm-sys/FastChat/blob/main/fastchat/train/train.py (preprocess)"),
    # printed every few seconds while init_process_group waits for the other ranks: no failure by
    # itself, but a run that dies right after it died joining the process group
    Known("store-barrier-wait", ("Waiting in store based barrier to initialize process group",), EventKind.WARNING,
          "init_process_group is waiting for every rank to register in the store (world_size ranks expected, "
          "worker_count joined so far)", None, "info",
          "https://github.com/pytorch/pytorch/blob/main/torch/distributed/distributed_c10d.py (_store_based_barrier)"),
    # accelerate checks the shapes of a collective's inputs on every process before running it
    Known("accelerate-collective-shapes", ("DistributedOperationException",), EventKind.DISTRIBUTED_ERROR,
          "an accelerate collective (gather, broadcast, reduce) got tensors of different shapes on different "
          "processes: the ranks disagree on what they exchange", "distributed_failure", "critical",
          "https://github.com/huggingface/accelerate/blob/main/src/accelerate/utils/operations.py "
          "(verify_operation)", fatal=True),
    # gloo (the CPU backend of torch.distributed): the collective lost the other rank
    Known("gloo-peer-closed", ("gloo", "Connection closed by peer"), EventKind.DISTRIBUTED_ERROR,
          "a gloo collective lost its connection to another rank: that rank crashed or exited", "distributed_failure",
          "critical", "https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/pair.cc", fatal=True),
    Known("gloo-peer-reset", ("gloo", "Connection reset by peer"), EventKind.DISTRIBUTED_ERROR,
          "a gloo collective's connection to another rank was reset: that rank hung or died", "distributed_failure",
          "critical", "https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/pair.cc", fatal=True),
    Known("gloo-timeout", ("gloo", "Timed out waiting", "operation to complete"), EventKind.NCCL_TIMEOUT,
          "a gloo collective waited past the process group's timeout for another rank, which is stuck or gone",
          "distributed_failure", "critical",
          "https://github.com/pytorch/gloo/blob/main/gloo/transport/tcp/unbound_buffer.cc", fatal=True),
    Known("fairseq-oom-skip", ("ran out of memory", "skipping batch"), EventKind.OOM,
          "fairseq caught a CUDA out-of-memory error and skipped the batch (training goes on, the batch is lost)",
          "oom", "high", "https://github.com/facebookresearch/fairseq/blob/main/fairseq/trainer.py"),
    # printed by the allocator when the device refuses it memory; it then frees its cache and tries again,
    # so a run may go on (a serving engine's buffer found room later), and when that fails too,
    # torch.OutOfMemoryError follows
    Known("cuda-allocator-oom", ("memory allocation failed with OOM on device",), EventKind.OOM,
          "the CUDA caching allocator could not get the memory it asked the device for (free and total device "
          "memory in bytes follow); torch.OutOfMemoryError follows when freeing its cache does not help",
          "oom", "high", "https://github.com/pytorch/pytorch/blob/main/c10/cuda/CUDACachingAllocator.cpp"),
    # NCCL allocates its buffers with cudaMalloc and warns "Failed to CUDA calloc [async] N bytes" when the
    # device refuses (ncclUnhandledCudaError follows): a few bytes refused is a full GPU, most often taken by
    # another process
    Known("nccl-cuda-calloc", ("Failed to CUDA calloc",), EventKind.OOM,
          "NCCL could not allocate device memory for its buffers (ncclUnhandledCudaError follows): the GPU's "
          "memory is full, often held by another process or by the model and its caches", "oom", "critical",
          "https://github.com/NVIDIA/nccl/blob/master/src/include/alloc.h (ncclCudaCalloc)", fatal=True,
          pattern=re.compile(r"Failed to CUDA calloc (?:async )?\d{1,15} bytes")),
    # Apple silicon (MLX, PyTorch MPS): the GPU's command buffer failed for want of memory; MLX raises it as a
    # C++ runtime_error, so the process aborts
    Known("metal-oom", ("kIOGPUCommandBufferCallbackErrorOutOfMemory",), EventKind.OOM,
          "the Metal command buffer failed with Insufficient Memory: the Apple GPU ran out of (unified) memory",
          "oom", "critical", "https://developer.apple.com/documentation/metal/mtlcommandbuffererror/code/outofmemory",
          fatal=True),
    Known("deepspeed-launcher-sigkill", ("exits with return code = -9",), EventKind.HOST_OOM,
          "the DeepSpeed launcher reports a worker killed by SIGKILL (-9), which on Linux is most often the "
          "kernel's OOM killer (host memory)", "oom", "critical",
          "https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/launcher/launch.py", fatal=True, signal=9),
    # alone on its line, or glued to the end of the progress bar the process was redrawing when it died
    # ("3217/3849, 4.0 task/s, elapsed: 799s, ETA:   157sKilled")
    Known("shell-killed", ("Killed",), EventKind.HOST_OOM, _SHELL_KILLED, "oom", "critical",
          "https://man7.org/linux/man-pages/man7/signal.7.html", fatal=True,
          pattern=re.compile(r"^(?:[\W_]{0,4}|.{0,400}[\ds%|\]])Killed[\W_]{0,4}$"), signal=9),
    # the same message where the shell speaks Chinese (glibc's zh_CN translation of strsignal(SIGKILL))
    Known("shell-killed-zh", ("已杀死",), EventKind.HOST_OOM, _SHELL_KILLED, "oom", "critical",
          "https://man7.org/linux/man-pages/man7/signal.7.html; https://sourceware.org/git/?p=glibc.git (po/zh_CN.po, "
          "the translations of strsignal's messages)", fatal=True, pattern=re.compile(r"已杀死[\W_]{0,4}$"), signal=9),
    Known("glog-check-failed", ("Check failed",), EventKind.ERROR,
          "a glog CHECK failed (Caffe, MXNet, TensorFlow C++): the process aborts", "crash", "critical",
          "https://github.com/google/glog#check-macros", fatal=True,
          pattern=re.compile(r"(?:^|\] )Check failed: ")),
    Known("cuda-device-assert", ("Assertion `", "` failed"), EventKind.ERROR,
          "a CUDA kernel assertion failed (device-side assert, e.g. a label outside [0, C) or a probability "
          "outside [0, 1] in a loss): the CUDA context is lost and the run stops", "crash", "critical",
          "https://pytorch.org/docs/stable/notes/cuda.html", fatal=True,
          pattern=re.compile(r"\.cu:\d{1,6}: .{0,200}Assertion `")),
    Known("pcie-aer", ("PCIe Bus Error",), EventKind.XID,
          "the kernel's PCIe Advanced Error Reporting logged a bus error on the link to a device", "hardware_fault",
          "high", "https://docs.kernel.org/PCI/pcieaer-howto.html"),
    # reference (golden-value) checks of test suites: a number compared with the value it must match
    Known("assert-threshold", ("AssertionError", " than "), EventKind.GATE,
          "a test compared a metric of a run with its reference threshold and the metric missed it",
          "golden_mismatch", "high", "https://docs.python.org/3/library/unittest.html#unittest.TestCase."
          "assertGreaterEqual", pattern=re.compile(r"AssertionError: [-+.\deE]{1,40} not (?:greater|less) than")),
    Known("assert-expected", ("AssertionError", "Expected"), EventKind.GATE,
          "a test compared a value of a run with its expected (reference) value and they differ",
          "golden_mismatch", "high", "https://docs.pytest.org/en/stable/how-to/assert.html"),
    Known("assert-close", ("mismatched elements",), EventKind.GATE,
          "torch.testing.assert_close found elements outside the tolerance of the reference tensor",
          "golden_mismatch", "high", "https://pytorch.org/docs/stable/testing.html#torch.testing.assert_close"),
    Known("numpy-tolerance", ("Not equal to tolerance",), EventKind.GATE,
          "numpy.testing found values outside the tolerance of the reference", "golden_mismatch", "high",
          "https://numpy.org/doc/stable/reference/generated/numpy.testing.assert_allclose.html"),
    Known("gtest-failure", (": Failure",), EventKind.GATE,
          "a GoogleTest assertion failed: a computed value differs from the expected one", "golden_mismatch",
          "high", "https://google.github.io/googletest/primer.html#assertions",
          pattern=re.compile(r"\.(?:cpp|cc|cu|cxx):\d{1,6}: Failure$")),
    Known("llmc-not-ok", ("NOT OK", "diff="), EventKind.GATE,
          "llm.c's test compares each tensor with the PyTorch reference and reports the elements beyond the "
          "tolerance", "golden_mismatch", "high",
          "https://github.com/karpathy/llm.c/blob/master/test_gpt2.cu"),
    Known("assert-not-equal", ("AssertionError", " != "), EventKind.GATE,
          "a test's assertEqual / assertAlmostEqual found a value of the run different from its reference",
          "golden_mismatch", "high", "https://docs.python.org/3/library/unittest.html#unittest.TestCase.assertEqual",
          pattern=re.compile(r"AssertionError: [-+.\deE]{1,40} != [-+.\deE]{1,40}")),
    Known("assert-not-close", ("AssertionError", "not close"), EventKind.GATE,
          "a test found values of the run outside the tolerance of their reference (\"Tensor-likes are not "
          "close!\" of torch.testing.assert_close, a suite's own \"... not close\" check)", "golden_mismatch", "high",
          "https://pytorch.org/docs/stable/testing.html#torch.testing.assert_close",
          pattern=re.compile(r"AssertionError: .{0,300}\bnot close\b")),
    Known("pytest-test-assert", ("AssertionError",), EventKind.GATE,
          "a test of a test suite failed on an assertion", "golden_mismatch", "medium",
          "https://docs.pytest.org/en/stable/how-to/output.html",
          # the traceback's last frame in a test file, or the short summary's "FAILED tests/x.py::test - AssertionError"
          pattern=re.compile(r"(?:^|/)tests?/[\w/.\-]{0,200}\.py:\d{1,6}: AssertionError$"
                             r"|^FAILED (?:\S{0,200}/)?tests?/[\w/.\-]{0,200}\.py::\S{1,300} - AssertionError")),
    Known("pytest-close-check", ("close",), EventKind.GATE,
          "a test comparing values of the run with a reference within a tolerance failed (pytest marks the line "
          "that raised with '>': here an allclose / assert_close comparison)", "golden_mismatch", "medium",
          "https://docs.pytest.org/en/stable/how-to/output.html",
          pattern=re.compile(r"^>\s{1,40}(?:assert\s.{0,200}|[\w.]{0,80})(?:allclose|assert_close|isclose)\w{0,30}\(")),
    Known("tf-no-gradient", ("Gradients do not exist for variables",), EventKind.WARNING,
          "some variables receive no gradient from the loss, so they do not train (unused in the loss, or the "
          "graph is cut)", "plateau", "medium",
          "https://github.com/keras-team/keras/blob/master/keras/src/optimizers/base_optimizer.py",
          # each player's loss leaves the other player's variables without a gradient: the published
          # output of keras-io's GauGAN example prints it (https://keras.io/examples/generative/gaugan/)
          normal_in_game=True),
)

# one substring per entry, the rarest first, to reject a line with one ``in`` test per entry
_FIRST = [(k.needles[0], k) for k in CATALOGUE]
# Those substrings as one trie: a line holding none of them (nearly every line) is rejected by one
# search instead of an ``in`` test per entry.
_ANY_FIRST = re.compile(trie_pattern([needle for needle, _ in _FIRST]))


def match(text: str) -> Known | None:
    """The first catalogue entry the line matches, or None."""
    if _ANY_FIRST.search(text) is None:
        return None
    for needle, k in _FIRST:
        if needle in text and all(n in text for n in k.needles[1:]) and \
                (k.pattern is None or k.pattern.search(text) is not None):
            return k
    return None
