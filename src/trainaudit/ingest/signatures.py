"""Error signatures in stderr and CI logs, turned into typed events with their numbers.

``SignatureScanner(source).feed(line)`` returns the events a cleaned :class:`~trainaudit.ingest.text.Line`
completes; ``finish()`` returns what is still pending at end of file (an unfinished traceback, an
elastic failure summary cut short). Every text reader runs it on every line, so the common case (a
metric line with no error in it) must cost one regex search: :data:`GATE` holds one literal token of
every signature, and only lines it hits (or lines inside a multi-line record) reach the matchers.

Multi-line records keep small state: one pending traceback per launcher rank (ranks interleave),
one torch.distributed.elastic summary block, and the last NVRM "The NVIDIA GPU ..." line.

Each matcher names the public source of the text it recognises (the ``# source:`` lines of
``tests/fixtures/log_samples/error_signatures.txt`` and the projects' own sources).
The table of signatures -> event kind -> data fields is ``docs/error-signatures.md``.
Sizes are GiB floats (binary units: MiB / 1024, KiB / 1024**2, bytes / 1024**3).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainaudit.ingest import catalogue
from trainaudit.ingest.samples import SAMPLE_START, SAMPLE_WORDS, SampleWatch
from trainaudit.ingest.text import Line
from trainaudit.model import Event, EventKind
from trainaudit.redact import mask_secrets

# One literal token per signature, grouped by first character so a line without any of them is
# rejected by a single scan (~2 us on a 400-character Megatron line). Keep in sync with the matchers.
GATE = re.compile(
    r"A(?:borted \(core|ssertionError)|B(?:us error)|C(?:UDA|hild|urrent loss|uda failure)"
    r"|D(?:ataLoader worker|uring handling of)|E(?:rror|xception|CC|xit code|xit Code|xit status|xit Status)|F(?:atal|unction '|AILED|ile \"|ound inf or nan)"
    r"|G(?:PU is lost|radient overflow|rad overflow on iteration|rad scale is small)|H(?:IP out|eartbeat monitor)|K(?:illed)|M(?:inimum loss scale)"
    r"|N(?:CCL|VRM|aN)|O(?:utOfMemory|OM|ut of memory)|P(?:rocessGroupNCCL)|R(?:oot Cause)"
    r"|S(?:egmentation fault|ending process|kipped batch, new scale)|T(?:raceback|raining failed|he above exception"
    r"|he loss returned|imeout at NCCL|HCudaCheck FAIL)|U(?:nexpected result|sing dynamic loss scale)|W(?:atchdog)|X(?:id)"
    r"|Y(?:our loss is probably exploding)"
    r"|\((?:exitcode)|e(?:xit code|xit status|xited with code)"
)

# Every line the scanner may say something of, or keep something from, while no traceback or
# elastic block is open: the gate, the catalogue's first needles, sample lines, Markdown bold. No
# part of it tells one digit from another (a needle's digits are left out, keeping its longest
# digit-free piece), so lines that differ only in their digits get the same answer: a bulk reader
# asks once per line shape.
_MAY_SIGNAL = re.compile("|".join([
    GATE.pattern, r"\*\*", SAMPLE_START,
    *(re.escape(max(re.split(r"\d+", k.needles[0]), key=len)) for k in catalogue.CATALOGUE),
]))


# The same lines as literals only (no anchor, no character class, no digit): what it finds in a
# line's text it finds in the line's bytes, so a reader may leave undecoded every physical line in
# which its bytes copy finds nothing (text.iter_gated).
SIGNAL_LITERALS = "|".join([GATE.pattern, r"\*\*", SAMPLE_WORDS, "H-",
                            *(re.escape(k.needles[0]) for k in catalogue.CATALOGUE)])


def may_signal(text: str) -> bool:
    """False when :meth:`SignatureScanner.feed` of the line, with no record open, returns nothing
    and changes nothing."""
    return _MAY_SIGNAL.search(text) is not None


# The catalogue's needles, each as its longest digit-free piece (see _MAY_SIGNAL), by entry.
_NEEDLE_PIECES = [tuple(max(re.split(r"\d+", n), key=len) for n in k.needles) for k in catalogue.CATALOGUE]
_MAY_SPEAK = re.compile("|".join([GATE.pattern, r"\*\*", SAMPLE_START]))


def may_speak(text: str) -> bool:
    """:func:`may_signal`, narrower: a catalogue entry counts only when all its needles are in the
    line (``catalogue.match`` needs them all), so "Validation DataLoader 0: 42%|..." is no line the
    scanner speaks of. As blind to digits: a bulk reader asks once per line shape."""
    if _MAY_SPEAK.search(text) is not None:
        return True
    return _MAY_SIGNAL.search(text) is not None and any(all(p in text for p in pieces) for pieces in _NEEDLE_PIECES)


# Linux signal numbers (logs come from Linux; Python's ``signal`` module differs on macOS).
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
           8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
           14: "SIGALRM", 15: "SIGTERM"}
SIGNAL_NUMBERS = {name: num for num, name in SIGNALS.items()}

_UNIT = {"b": 1 / 1024**3, "bytes": 1 / 1024**3, "kib": 1 / 1024**2, "kb": 1 / 1024**2,
         "mib": 1 / 1024, "mb": 1 / 1024, "gib": 1.0, "gb": 1.0, "tib": 1024.0, "tb": 1024.0}
_SIZE = r"[\d.]+ ?(?:[KMGT]i?B|B|bytes)"
_SIZE_TEXT = re.compile(r"(?<![\d.])([\d.]++) ?([A-Za-z]+)")


def to_gib(text: str) -> float:
    """``'991.56 MiB'`` -> 0.968..., ``'0 bytes'`` -> 0.0 (PyTorch's ``format_size`` units)."""
    m = _SIZE_TEXT.match(text.strip())
    if m is None:
        raise ValueError(text)
    return float(m.group(1)) * _UNIT[m.group(2).lower()]


def _short(text: str, limit: int = 200) -> str:
    # Masked before it is cut: a secret cut short no longer has the shape that masking recognises
    # (37 of an AWS secret key's 40 characters would pass through every later mask_secrets).
    text = mask_secrets(text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- CUDA out of memory ---------------------------------------------------------------------------
# source: pytorch/pytorch#18853 (<=1.x: "(GPU 0; X total capacity; Y already allocated; Z free; W cached)",
#   later "...; W reserved in total by PyTorch)"); FoundationVision/GenerateU#10 (2.1 sentence form,
#   'capacty' typo, "Process N has X memory in use"); pytorch/pytorch#16417 (2.2-2.4 "Including
#   non-PyTorch memory, this process has"); murong-xu/CADS#4 (>=2.5 torch.OutOfMemoryError);
#   kaito-project/kaito#976 ("with X allocated in private pools", behind a vLLM logger prefix).
OOM_RE = re.compile(
    r"(?:(?<![\w.])(?P<exc>[\w.]*(?:OutOfMemoryError|RuntimeError|Error)): )?(?P<dev>CUDA|HIP) out of memory\. "
    rf"Tried to allocate (?P<req>{_SIZE})")
OOM_LEGACY_RE = re.compile(rf"\(GPU (?P<gpu>\d+); (?P<total>{_SIZE}) total capacity;(?: (?P<alloc>{_SIZE}) already "
                           rf"allocated;)? (?P<free>{_SIZE}) free;(?: (?P<reserved>{_SIZE}) reserved in total by "
                           rf"PyTorch| (?P<cached>{_SIZE}) cached)?")
OOM_GPU_RE = re.compile(rf"GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>{_SIZE}) of which "
                        rf"(?P<free>{_SIZE}) is free")
OOM_PROC_RE = re.compile(rf"Process (?P<pid>\d+) has (?P<size>{_SIZE}) memory in use")
OOM_THIS_RE = re.compile(rf"this process has (?P<size>{_SIZE}) memory in use")
OOM_ALLOC_RE = re.compile(rf"Of the allocated memory (?P<alloc>{_SIZE}) is allocated by PyTorch"
                          rf"(?:, with (?P<pools>{_SIZE}) allocated in private pools(?: \([^)]*\))?)?,? and "
                          rf"(?P<unalloc>{_SIZE}) is reserved by PyTorch but unallocated")
# PyTorch before 1.0: "cuda runtime error (2) : out of memory"; the driver API:
# "CUDA error: out of memory" (vLLM's cumem allocator: "CUDA Error: out of memory at
# .../cumem_allocator.cpp:62"); NCCL: "Cuda failure 'out of memory'"; Marian's CUDA_CHECK: "CUDA error 2
# 'out of memory'" (marian-nmt/marian-dev src/tensors/gpu/cuda_helpers.h); PyTorch 0.4's THC: "THCudaCheck FAIL
# file=... line=... error=2 : out of memory"; PyTorch's sentence cut before its numbers ("CUDA out of memory."), or
# a loop's own report of it ("CUDA out of memory in epoch 1"); the CHECK macro many CUDA projects share,
# "code: <cudaError_t>, reason: <cudaGetErrorString>" (dlib's CHECK_CUDA: "Error while calling
# cudaMalloc(...) in file ...:191. code: 2, reason: out of memory"). OOM without numbers.
OOM_BARE_RE = re.compile(r"cuda runtime error \(2\) : out of memory|CUDA [Ee]rror: out of memory|"
                         r"CUDA_ERROR_OUT_OF_MEMORY|Cuda failure 'out of memory'|CUDA error \d{1,4} 'out of memory'|"
                         r"error=2 : out of memory|\bCUDA out of memory\b|code: 2, reason: out of memory")


def _oom(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = OOM_RE.search(text)
    if m is None:
        if OOM_BARE_RE.search(text):
            return [(EventKind.OOM, "CUDA out of memory", {"device": "CUDA"})]
        return []
    data: dict[str, Any] = {"device": m.group("dev"), "requested_gib": to_gib(m.group("req"))}
    if m.group("exc"):
        data["exc_type"] = m.group("exc")
    rest = text[m.end():]
    legacy = OOM_LEGACY_RE.search(rest)
    if legacy:
        data["gpu"] = int(legacy.group("gpu"))
        data["total_gib"] = to_gib(legacy.group("total"))
        if legacy.group("alloc"):
            data["allocated_gib"] = to_gib(legacy.group("alloc"))
        data["free_gib"] = to_gib(legacy.group("free"))
        if legacy.group("reserved"):
            data["reserved_gib"] = to_gib(legacy.group("reserved"))
        if legacy.group("cached"):
            data["cached_gib"] = to_gib(legacy.group("cached"))
    else:
        g = OOM_GPU_RE.search(rest)
        if g:
            data["gpu"] = int(g.group("gpu"))
            data["total_gib"] = to_gib(g.group("total"))
            data["free_gib"] = to_gib(g.group("free"))
        procs = [{"pid": int(p.group("pid")), "in_use_gib": to_gib(p.group("size"))}
                 for p in OOM_PROC_RE.finditer(rest)]
        if procs:
            data["processes"] = procs
            data["process_id"] = procs[0]["pid"]
        this = OOM_THIS_RE.search(rest)
        if this:
            data["in_use_gib"] = to_gib(this.group("size"))
        elif len(procs) == 1:
            data["in_use_gib"] = procs[0]["in_use_gib"]
        a = OOM_ALLOC_RE.search(rest)
        if a:
            data["allocated_gib"] = to_gib(a.group("alloc"))
            data["reserved_unallocated_gib"] = to_gib(a.group("unalloc"))
            # Derived: what the caching allocator holds = allocated + reserved-but-unallocated.
            data["reserved_gib"] = data["allocated_gib"] + data["reserved_unallocated_gib"]
            if a.group("pools"):
                data["private_pools_gib"] = to_gib(a.group("pools"))
    where = f" on GPU {data['gpu']}" if "gpu" in data else ""
    msg = f"{data['device']} out of memory{where}: tried to allocate {data['requested_gib']:.2f} GiB"
    if "free_gib" in data and "total_gib" in data:
        msg += f" ({data['free_gib']:.2f} of {data['total_gib']:.2f} GiB free)"
    return [(EventKind.OOM, msg, data)]


# --- NCCL watchdog / collective timeouts ----------------------------------------------------------
# source: hiyouga/LlamaFactory#6269 (2.4-2.5 glog line behind [rankN]:, "[PG 1 Rank 0] ... last enqueued
#   NCCL work"); XPixelGroup/BasicSR#737 ("[PG ID 0 PG GUID 0(default_pg) Rank 1]"); pytorch/pytorch#118369
#   (<=2.1 "[E ProcessGroupNCCL.cpp:458] [Rank 0]" glued to a tqdm bar). Heartbeat / stuck-watchdog
#   companions: torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp.
NCCL_TAG_RE = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d+) (?:PG GUID (?P<guid>[^\s\]]+) )?)?Rank (?P<rank>\d+)\]")
# the line is often cut before its end in a pasted log: the duration is optional
NCCL_WORK_RE = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\((?P<work>(?:[^()]|\(ms\))*+)"
                          r"(?:\) ran for (?P<ms>\d+) milliseconds before timing out)?")
NCCL_FIELD_RE = re.compile(r"(?<!\w)(\w++(?:\(ms\))?)=([^,]+)")
NCCL_LAST_RE = re.compile(r"(?:detected by watchdog at work|Timeout at NCCL work): (?P<seq>-?\d+), last enqueued "
                          r"NCCL work: (?P<enq>-?\d+), last completed NCCL work: (?P<done>-?\d+)")
NCCL_STUCK_RE = re.compile(r"watchdog got stuck for (?P<s>\d+) seconds|Heartbeat monitor timed out")
_NCCL_KEYS = {"SeqNum": "seq", "OpType": "op", "NumelIn": "numel_in", "NumelOut": "numel_out",
              "Timeout(ms)": "timeout_ms"}


def _nccl_tag(text: str, data: dict[str, Any]) -> None:
    t = NCCL_TAG_RE.search(text)
    if t:
        data["rank"] = int(t.group("rank"))
        if t.group("pg") is not None:
            data["pg_id"] = int(t.group("pg"))
        if t.group("guid"):
            data["pg_guid"] = t.group("guid")


def _nccl(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = NCCL_WORK_RE.search(text)
    if m:
        data: dict[str, Any] = {}
        _nccl_tag(text[: m.start()], data)
        for key, val in NCCL_FIELD_RE.findall(m.group("work")):
            name = _NCCL_KEYS.get(key, key)
            data[name] = val if name == "op" else _int_or_str(val)
        if m.group("ms"):
            data["ran_for_ms"] = int(m.group("ms"))
        msg = (f"NCCL watchdog timeout: {data.get('op', 'collective')} SeqNum {data.get('seq', '?')} ran for "
               f"{data.get('ran_for_ms', '?')} ms (timeout {data.get('timeout_ms', '?')} ms)")
        return [(EventKind.NCCL_TIMEOUT, msg, data)]
    m = NCCL_LAST_RE.search(text)
    if m:
        data = {"seq": int(m.group("seq")), "last_enqueued": int(m.group("enq")),
                "last_completed": int(m.group("done"))}
        _nccl_tag(text[: m.start()], data)
        msg = (f"NCCL watchdog at work {data['seq']}: last enqueued {data['last_enqueued']}, "
               f"last completed {data['last_completed']}")
        return [(EventKind.NCCL_TIMEOUT, msg, data)]
    m = NCCL_STUCK_RE.search(text)
    if m:
        data = {"watchdog_stuck": True}
        if m.group("s"):
            data["stuck_s"] = int(m.group("s"))
        _nccl_tag(text[: m.start()], data)
        return [(EventKind.NCCL_TIMEOUT, _short(text), data)]
    return []


def _int_or_str(val: str) -> int | str:
    try:
        return int(val)
    except ValueError:
        return val.strip()


# --- NaN checks ---------------------------------------------------------------------------------
# source: NVIDIA/Megatron-LM#5026 (rerun state machine, "Unexpected result nan on rank 3 at iteration #3
#   invocation #2 (message='...')"); NVIDIA-NeMo/Speech#14348 (RERUN_DISABLED: "Rank 2, node X, device 2,
#   iteration -1: Unexpected result nan (message='...')"); alibaba/Pai-Megatron-Patch#366 (older
#   "AssertionError: Rank 11: found NaN in local grad norm ... Device: 3"); pytorch/pytorch#51196 (autograd
#   anomaly mode). fairseq "gradients are Nan/Inf", Lightning "The loss returned in `training_step` is nan":
#   fairseq/trainer.py and lightning/pytorch/loops/optimization/automatic.py.
# A message ends before the next "Unexpected result": a line that repeats the report without "')" is
# then read once, not from each report to the line's end.
_NAN_MSG = r"\(message='(?P<msg>(?:(?!Unexpected result ).)*?)'\)"
NAN_RERUN_RE = re.compile(r"Unexpected result (?P<result>\S+) on rank (?P<rank>\d+) at iteration #(?P<it>-?\d+) "
                          r"invocation #(?P<inv>\d+) " + _NAN_MSG)
NAN_RAISE_RE = re.compile(r"Rank (?P<rank>\d+), node (?P<node>\S+), device (?P<dev>\d+), iteration (?P<it>-?\d+): "
                          r"Unexpected result (?P<result>\S+) " + _NAN_MSG)
# "Device: N" follows the message within a sentence; a bounded look keeps each "found NaN in" from
# scanning the rest of a long line (the line may repeat it thousands of times).
NAN_FOUND_RE = re.compile(r"(?:Rank (?P<rank>\d+): )?found (?P<what>NaN|Inf) in (?P<where>[^.(]*?)"
                          r"(?: \(|\.|$)(?:.{0,300}?Device: (?P<dev>\d+))?")
NAN_ANOMALY_RE = re.compile(r"Function '(?P<fn>\w+)' returned nan values in its (?P<idx>\d+)(?:st|nd|rd|th) output")
NAN_OTHER_RE = re.compile(r"gradients are Nan/Inf|The loss returned in `training_step` is (?P<loss>\S+?)\.?$")


def _nan(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = NAN_RERUN_RE.search(text) or NAN_RAISE_RE.search(text)
    if m:
        gd = m.groupdict()
        data: dict[str, Any] = {"check": gd["msg"], "result": gd["result"], "rank": int(gd["rank"]),
                                "framework": "megatron"}
        if int(gd["it"]) >= 0:  # -1 = the rerun machine did not know the iteration
            data["iteration"] = int(gd["it"])
        if gd.get("inv") is not None:
            data["invocation"] = int(gd["inv"])
        if gd.get("node") is not None:
            data["node"] = gd["node"]
            data["device"] = int(gd["dev"])
        where = f" at iteration {data['iteration']}" if "iteration" in data else ""
        return [(EventKind.NAN_CHECK, f"Megatron NaN check on rank {data['rank']}{where}: {gd['msg']}", data)]
    m = NAN_ANOMALY_RE.search(text)
    if m:
        data = {"function": m.group("fn"), "output_index": int(m.group("idx")), "check": "anomaly_mode"}
        return [(EventKind.NAN_CHECK, f"autograd anomaly mode: {m.group('fn')} returned NaN", data)]
    m = NAN_FOUND_RE.search(text)
    if m:
        data = {"check": f"found {m.group('what')} in {m.group('where').strip()}", "result": m.group("what").lower()}
        if m.group("rank"):
            data["rank"] = int(m.group("rank"))
        if m.group("dev"):
            data["device"] = int(m.group("dev"))
        return [(EventKind.NAN_CHECK, _short(data["check"]), data)]
    m = NAN_OTHER_RE.search(text)
    if m:
        data = {"check": m.group(0).rstrip(".")}
        if m.group("loss"):
            data["result"] = m.group("loss")
        return [(EventKind.NAN_CHECK, _short(m.group(0)), data)]
    return []


# --- loss scale at its minimum ----------------------------------------------------------------------
# DeepSpeed's exception (deepspeed/runtime/fp16/loss_scaler.py, raise_error_at_min_scale); fairseq
#   FP16Optimizer's "FloatingPointError: Minimum loss scale reached (X). Your loss is probably exploding."
#   The sentence after it is printed only there (and by fairseq2's scaler at its minimum): a paste that cut
#   the first words still shows it.
LS_MIN_RE = re.compile(r"Current loss scale already at minimum|Minimum loss scale reached \((?P<scale>[^()]*+)\)"
                       r"|Your loss is probably exploding")
# NVIDIA apex amp's dynamic loss scaler (apex/amp/scaler.py, update_scale): one line per skipped step,
#   "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0"
APEX_OVERFLOW_RE = re.compile(r"Gradient overflow\. {1,2}Skipping step, loss scaler (?P<scaler>\d{1,4}) "
                              r"reducing loss scale to (?P<scale>[\d.eE+\-]{1,40})")

# The FP16_Optimizer of apex.fp16_utils (and early DeepSpeed's) prints two lines a skipped step:
#   "Grad overflow on iteration N", then "Using dynamic loss scale of X", X the scale that overflowed,
#   which it then halves, never below 1 (apex/fp16_utils/fp16_optimizer.py, _update_scale)
GRAD_OVERFLOW_RE = re.compile(r"Grad overflow on iteration:? ?(?P<step>\d{1,12})")
USING_SCALE_RE = re.compile(r"Using dynamic loss scale of (?P<scale>[\d.eE+\-]{1,40})")
# Paddle's AmpScaler on each reduction (python/paddle/amp/grad_scaler.py, _update):
#   "Found inf or nan, current scale is: 0.001953125, decrease to: 0.001953125*0.5"
PADDLE_SCALE_RE = re.compile(r"Found inf or nan, current scale is: (?P<scale>[\d.eE+\-]{1,40}), decrease to: "
                             r"[\d.eE+\-]{1,40}\*(?P<ratio>[\d.eE+\-]{1,40})")
# icefall's recipes warn once the AMP GradScaler's scale is below 0.01 and stop below 1e-5
#   (k2-fsa/icefall egs/librispeech/ASR/zipformer/train.py: "Grad scale is small: {cur_grad_scale}")
SMALL_SCALE_RE = re.compile(r"Grad scale is small: (?P<scale>[\d.eE+\-]{1,40})")
# the fp16 optimizer of MLPerf's GNMT reference (mlcommons/training, rnn_translator/pytorch/seq2seq/train/
#   fp_optimizers.py) skips the update of a non-finite gradient norm: "Gradient norm: inf", then
#   "Skipped batch, new scale: 2048.0", the scale divided by its downscale factor
SKIPPED_BATCH_RE = re.compile(r"Skipped batch, new scale: (?P<scale>[\d.eE+\-]{1,40})")

# the MixedPrecisionTrainer of OpenAI's improved-diffusion and guided-diffusion (guided_diffusion/fp16_util.py,
#   optimize_fp16) on a non-finite gradient: "Found NaN, decreased lg_loss_scale to 16.929000000013357", the
#   base-2 logarithm of the scale, lowered by one a skipped step
LG_SCALE_RE = re.compile(r"Found NaN, decreased lg_loss_scale to (?P<lg>-?\d{1,4}(?:\.\d{1,20})?)")


def _scale_event(framework: str, m: re.Match[str], message: str,
                 **data: Any) -> list[tuple[EventKind, str, dict[str, Any]]]:
    data["framework"] = framework
    with contextlib.suppress(ValueError):
        data["scale"] = float(m.group("scale"))
    return [(EventKind.LOSS_SCALE, f"{message} {m.group('scale')}", data)]


def _loss_scale(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    a = APEX_OVERFLOW_RE.search(text)
    if a is not None:
        data: dict[str, Any] = {"framework": "apex", "scaler": int(a.group("scaler"))}
        with contextlib.suppress(ValueError):
            data["new_scale"] = float(a.group("scale"))
        return [(EventKind.LOSS_SCALE, f"apex amp overflow: step skipped, loss scale -> {a.group('scale')}", data)]
    u = USING_SCALE_RE.search(text)
    if u is not None:
        return _scale_event("apex.fp16_utils", u, "fp16 overflow: step skipped at loss scale", attempted=True)
    u = SKIPPED_BATCH_RE.search(text)
    if u is not None:
        skipped: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            skipped["new_scale"] = float(u.group("scale"))
        return _scale_event("mlperf-gnmt", u, "fp16 overflow: batch skipped, loss scale ->", **skipped)
    u = SMALL_SCALE_RE.search(text)
    if u is not None:
        return _scale_event("icefall", u, "icefall: the AMP grad scale is small:")
    g = LG_SCALE_RE.search(text)
    if g is not None:
        lg = float(g.group("lg"))
        return [(EventKind.LOSS_SCALE, f"fp16 overflow: step skipped, loss scale -> 2^{lg:g}",
                 {"framework": "guided-diffusion", "lg_loss_scale": lg, "new_scale": 2.0 ** lg})]
    u = PADDLE_SCALE_RE.search(text)
    if u is not None:
        reduced: dict[str, Any] = {}
        with contextlib.suppress(ValueError):
            reduced["new_scale"] = float(u.group("scale")) * float(u.group("ratio"))
        return _scale_event("paddle", u, "Paddle AMP: inf or nan found, loss scale reduced from", **reduced)
    m = LS_MIN_RE.search(text)
    if m is None:
        return []
    if m.group(0).startswith("Your loss"):
        return [(EventKind.LOSS_SCALE_MIN, "fairseq: minimum loss scale reached, your loss is probably exploding",
                 {"framework": "fairseq"})]
    if m.group("scale") is None:
        return [(EventKind.LOSS_SCALE_MIN, "DeepSpeed: loss scale already at minimum, run exits",
                 {"framework": "deepspeed"})]
    data = {"framework": "fairseq"}
    with contextlib.suppress(ValueError):
        data["min_loss_scale"] = float(m.group("scale"))
    return [(EventKind.LOSS_SCALE_MIN, f"fairseq: minimum loss scale reached ({m.group('scale')})", data)]


# --- torch.distributed.elastic agent lines ----------------------------------------------------------
# source: InternRobotics/StreamVLN#66 ("[date] torch.distributed.elastic.multiprocessing.api: [ERROR] failed
#   (exitcode: -8) local_rank: 1 (pid: N) of binary: ...", "Sending process N closing signal SIGTERM");
#   hpcaitech/Open-Sora#826 (glog "E0318 ... api.py:833] failed (exitcode: -8) ...").
AGENT_FAILED_RE = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\)"
                             r"(?: of binary: (?P<bin>\S+))?")
AGENT_SIGTERM_RE = re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG\w+)")
SIGNAL_EXC_RE = re.compile(r"SignalException: Process (?P<pid>\d+) got signal: (?P<sig>\d+)")


def _signal_events(code: int | None, signum: int | None, base: dict[str, Any], who: str
                   ) -> list[tuple[EventKind, str, dict[str, Any]]]:
    """The SIGNAL (and, for SIGKILL, HOST_OOM) events that accompany a process death."""
    if signum is None and code is not None and code < 0:
        signum = -code
    if signum is None:
        return []
    name = SIGNALS.get(signum, f"signal {signum}")
    data = {**base, "signal": signum, "signal_name": name}
    out = [(EventKind.SIGNAL, f"{who} died of {name}", data)]
    if signum == 9:
        out.append((EventKind.HOST_OOM, f"{who} was SIGKILLed: likely the host OOM killer",
                    {**data, "likely_host_oom": True}))
    return out


def _elastic_line(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = AGENT_FAILED_RE.search(text)
    if m:
        code = int(m.group("code"))
        data: dict[str, Any] = {"origin": "agent", "exitcode": code, "local_rank": int(m.group("lr")),
                                "pid": int(m.group("pid"))}
        if m.group("bin"):
            data["binary"] = m.group("bin")
        who = f"worker local_rank {data['local_rank']} (pid {data['pid']})"
        out = [(EventKind.ELASTIC_FAILURE, f"elastic agent: {who} failed with exitcode {code}", data)]
        return out + _signal_events(code, None, {k: data[k] for k in ("local_rank", "pid", "exitcode")}, who)
    m = AGENT_SIGTERM_RE.search(text)
    if m:
        data = {"origin": "agent", "pid": int(m.group("pid")), "signal_name": m.group("sig"),
                "signal": SIGNAL_NUMBERS.get(m.group("sig")), "terminated_by_agent": True}
        return [(EventKind.ELASTIC_FAILURE,
                 f"elastic agent sent {m.group('sig')} to worker pid {data['pid']} (another worker failed)", data)]
    m = SIGNAL_EXC_RE.search(text)
    if m:
        return _signal_events(None, int(m.group("sig")), {"pid": int(m.group("pid"))}, f"process {m.group('pid')}")
    return []


# --- signals, segfaults, host OOM -------------------------------------------------------------------
# source: pytorch/pytorch#75087 ("[default3]:Fatal Python error: Segmentation fault"); shell job messages
#   "Segmentation fault (core dumped)", "Bus error (core dumped)", "Killed", DataLoader "is killed by signal:
#   Killed.", kernel "Out of memory: Killed process N (name)", slurmstepd "oom-kill event" (as printed by bash, torch.utils.data and the kernel).
FATAL_PY_RE = re.compile(r"Fatal Python error: (?P<what>Segmentation fault|Aborted|Bus error|Floating point exception"
                         r"|Illegal instruction)")
SHELL_SIG_RE = re.compile(r"(?:^|\s)(?P<what>Segmentation fault|Bus error|Aborted|Floating point exception|Killed)"
                          r"(?: \(core dumped\))?(?:\s+(?P<cmd>.+))?$")
LOADER_KILLED_RE = re.compile(r"DataLoader worker \(pids? (?P<pid>[\d, ]+)\) is killed by signal: (?P<what>[^.]+)\.?")
# The name is the task's comm (at most 15 characters, include/linux/sched.h) and anon-rss follows within
# the same sentence (mm/oom_kill.c): both bounded, so a line repeating the phrase is read in linear time.
KERNEL_OOM_RE = re.compile(r"Out of memory: Killed process (?P<pid>\d+) \((?P<name>[^)]{0,64}+)\)"
                           r"(?:.{0,300}?anon-rss:(?P<rss>\d+)kB)?")
SLURM_OOM_RE = re.compile(r"Detected (?P<n>\d+) oom.kill event")
# A shell's job message names the job's pid: "line 12: 4567 Killed  python train.py".
_JOB_MESSAGE_RE = re.compile(r"(?<!\d)\d++ (Segmentation fault|Bus error|Aborted|Floating point exception|Killed)")
_NUMBER_RE = re.compile(r"\d+")
# A process's exit status past 128 is 128 + the signal that ended it (POSIX shells, and docker's and
# Kubernetes' exit codes: 137 = SIGKILL, most often the host's OOM killer): "command terminated with exit
# code 137", "exited with code 137", "returned non-zero exit status 137", "Exit Code: 137"
EXIT_SIGNAL_RE = re.compile(r"\b(?:exit(?:ed)?(?: with)? (?:code|status)|returned non-zero exit status)\s?:?\s?"
                            r"(?P<code>13[4579]|139)\b", re.IGNORECASE)
_WHAT_SIGNAL = {"Segmentation fault": 11, "Aborted": 6, "Bus error": 7, "Floating point exception": 8,
                "Illegal instruction": 4, "Killed": 9, "Terminated": 15}


def _signals(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = FATAL_PY_RE.search(text)
    if m:
        return _signal_events(None, _WHAT_SIGNAL[m.group("what")], {"fatal_python_error": m.group("what")},
                              "Python process")
    m = LOADER_KILLED_RE.search(text)
    if m:
        pids = [int(p) for p in _NUMBER_RE.findall(m.group("pid"))]
        signum = _WHAT_SIGNAL.get(m.group("what").strip())
        base: dict[str, Any] = {"dataloader_worker": True, "pid": pids[0]}
        if signum is None:
            return [(EventKind.SIGNAL, _short(m.group(0)), {**base, "signal_text": m.group("what")})]
        who = f"DataLoader worker (pid {pids[0]})"
        out = _signal_events(None, signum, base, who)
        if signum == 7:
            # a worker's SIGBUS is a write to /dev/shm past its end: the host's shared memory is exhausted
            # (PyTorch's own message: "It is possible that dataloader's workers are out of shared memory",
            # torch/csrc/DataLoader.cpp, https://github.com/pytorch/pytorch/blob/main/torch/csrc/DataLoader.cpp)
            out.append((EventKind.HOST_OOM, f"{who} died of SIGBUS: out of shared memory (/dev/shm)",
                        {**base, "signal": 7, "likely_host_oom": True, "shared_memory": True}))
        return out
    m = KERNEL_OOM_RE.search(text)
    if m:
        data: dict[str, Any] = {"pid": int(m.group("pid")), "name": m.group("name"), "likely_host_oom": True,
                                "kernel_oom_killer": True}
        if m.group("rss"):
            data["anon_rss_gib"] = int(m.group("rss")) / 1024**2
        return [(EventKind.HOST_OOM, f"kernel OOM killer killed {data['name']} (pid {data['pid']})", data)]
    m = SLURM_OOM_RE.search(text)
    if m:
        return [(EventKind.HOST_OOM, _short(text), {"oom_kill_events": int(m.group("n")), "likely_host_oom": True,
                                                    "slurm": True})]
    m = EXIT_SIGNAL_RE.search(text)
    if m:
        code = int(m.group("code"))
        return _signal_events(None, code - 128, {"exit_status": code}, f"a process (exit status {code})")
    m = SHELL_SIG_RE.search(text)
    # "Killed" must be the shell's job message, not prose that happens to contain the word.
    if m and (m.start("what") <= 1 or any(j.group(1) == m.group("what") for j in _JOB_MESSAGE_RE.finditer(text))):
        base = {"shell_message": m.group("what")}
        if m.group("cmd"):
            base["command"] = m.group("cmd").strip()
        return _signal_events(None, _WHAT_SIGNAL[m.group("what")], base, "process")
    return []


# --- GPU hardware: Xid, ECC, fallen off the bus ----------------------------------------------------
# source: leptonai/gpud#46 and #1174 (kernel "NVRM: Xid (PCI:0000:cb:00): 109, pid=..., name=..., ...");
#   jade-hpc-gpu/jade-hpc-gpu.github.io#194 ("CUDA error: uncorrectable ECC error encountered");
#   NVIDIA/NVSentinel#155 (three-line "NVRM: The NVIDIA GPU ... fallen off the bus" without an Xid).
#   Xid meanings: https://docs.nvidia.com/deploy/xid-errors/
XID_RE = re.compile(r"Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+)(?:, pid=(?P<pid>'?[^,]*?'?))?"
                    r"(?:, name=(?P<name>[^,]*))?(?:,\s*(?P<msg>.*))?$")
XID_ERRSTR_RE = re.compile(r"errorString (?P<es>[^,]+)")
XID_CATEGORY = {13: "sm_exception", 31: "mmu_fault", 45: "preemptive_cleanup", 48: "ecc", 63: "ecc_page_retirement",
                64: "ecc_page_retirement", 79: "gpu_lost", 92: "ecc", 94: "ecc", 95: "ecc", 109: "ctx_switch_timeout",
                **dict.fromkeys(range(144, 151), "nvlink")}
NVRM_GPU_RE = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)")
NVRM_PCIID_RE = re.compile(r"NVRM: \(PCI ID: (?P<id>[0-9a-fA-F:]+)\)")
GPU_IS_LOST_RE = re.compile(r"GPU (?P<pci>[0-9a-fA-F:.]+): GPU is lost")
ECC_RE = re.compile(r"(?P<unc>uncorrectable )?ECC error|CUDA_ERROR_ECC_UNCORRECTABLE")


def _xid(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = XID_RE.search(text)
    if m is None:
        return []
    xid = int(m.group("xid"))
    data: dict[str, Any] = {"xid": xid, "pci": m.group("pci")}
    pid = (m.group("pid") or "").strip("'")
    if pid.isdigit():
        data["pid"] = int(pid)
    if m.group("name"):
        data["name"] = m.group("name").strip()
    if m.group("msg"):
        data["message"] = m.group("msg").strip()
        es = XID_ERRSTR_RE.search(m.group("msg"))
        if es:
            data["error_string"] = es.group("es").strip()
    if xid in XID_CATEGORY:
        data["category"] = XID_CATEGORY[xid]
    detail = data.get("error_string") or data.get("message") or ""
    return [(EventKind.XID, _short(f"Xid {xid} on GPU {data['pci']}: {detail}".rstrip(": ")), data)]


def _ecc(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = ECC_RE.search(text)
    if m is None:
        return []
    data: dict[str, Any] = {"uncorrectable": bool(m.group("unc")) or "UNCORRECTABLE" in m.group(0)}
    cuda = CUDA_ERR_RE.search(text)
    if cuda:
        data["cuda_error"] = cuda.group("err")
    return [(EventKind.ECC, "uncorrectable ECC error" if data["uncorrectable"] else "ECC error", data)]


# --- distributed (c10d) errors ----------------------------------------------------------------------
# source: snowflakedb/ArcticTraining#233 ("[rank1]: torch.distributed.DistBackendError: ... via c10d key-value
#   store by key '0', but store->get('0') got error: Connection reset by peer"); "NCCL error in: ...",
#   "terminate called after throwing an instance of 'c10::DistBackendError'", Rendezvous*Error:
#   torch/distributed/elastic/rendezvous.
DIST_RE = re.compile(r"(?P<exc>(?:(?<![\w.])[\w.]+\.|c10::)?(?:Dist(?:Backend|Store|Network)?Error|Rendezvous\w{0,40}Error))"
                     r"(?:'|: ?(?P<msg>.*))")
# The source location and the version sit within a few hundred characters of "NCCL error in:"; bounded
# so that a line repeating the phrase costs linear time.
NCCL_ERROR_RE = re.compile(r"NCCL error in: (?P<where>[^,]{1,500}+), (?P<err>[^(,]+?)(?: \(|,|$)"
                           r"(?:.{0,500}NCCL version (?P<ver>\S+))?")
STORE_KEY_RE = re.compile(r"store->get\('(?P<key>[^']*)'\)(?: got error: (?P<err>.*))?")


def _dist(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = DIST_RE.search(text)
    n = NCCL_ERROR_RE.search(text)
    if m is None and n is None:
        return []
    data: dict[str, Any] = {}
    if m:
        data["exc_type"] = m.group("exc")
        if m.group("msg"):
            data["message"] = m.group("msg").strip()
    if n:
        data["nccl_error"] = n.group("err").strip()
        if n.group("ver"):
            data["nccl_version"] = n.group("ver")
    k = STORE_KEY_RE.search(text)
    if k:
        data["store_key"] = k.group("key")
        if k.group("err"):
            data["store_error"] = k.group("err").strip()
    head = data.get("exc_type", "NCCL error")
    detail = data.get("store_error") or data.get("nccl_error") or data.get("message", "")
    return [(EventKind.DISTRIBUTED_ERROR, _short(f"{head}: {detail}".rstrip(": ")), data)]


# --- other CUDA errors and CI markers ----------------------------------------------------------------
# source: the CUDA runtime's error strings ("CUDA error: an illegal memory access was encountered",
#   "device-side assert triggered", ...); Megatron-LM's CI (tests/functional_tests: "Training failed. Aborting.",
#   "Exact|Approximate
#   comparison of <metric>: FAILED", "AssertionError: The following metrics failed: <m1>, <m2>").
CUDA_ERR_RE = re.compile(r"CUDA error(?:: | \d{1,4} ')(?P<err>[^.'\n]+?)(?:\.|'|$| when calling)")  # and Marian's
# The gate's own messages: also read by compare/cilog.py, which imports these (one definition).
CI_FAILED_RE = re.compile(r"Training failed\. Aborting\.")
# A metric name is short: bounded, so each "comparison of" looks a few hundred characters ahead, not to
# the end of a line that repeats it. The rest of a line without its trailing blanks is taken as
# words and the blanks before them, possessively: ".*?\s*$" retries the blank run at every character.
GATE_CHECK_RE = re.compile(r"\b(?P<check>Exact|Approximate) comparison of (?P<metric>.{1,200}?): FAILED")
GATE_METRICS_RE = re.compile(r"The following metrics failed: (?P<metrics>(?:[^\S\n]*+\S++)*+)\s*+$")


def _cuda(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    m = CUDA_ERR_RE.search(text)
    if m is None:
        return []
    # an error of the CUDA runtime outside an allocation ends the process: the exception it raises, or the
    # abort of a C++ trainer (Marian), and a sticky error leaves the context unusable
    return [(EventKind.ERROR, _short(f"CUDA error: {m.group('err')}"), {"cuda_error": m.group("err"), "fatal": True})]


def _ci(line: Line, text: str) -> list[tuple[EventKind, str, dict[str, Any]]]:
    if CI_FAILED_RE.search(text):
        return [(EventKind.ERROR, "Megatron CI: training failed, golden-value check not run",
                 {"ci": "megatron", "marker": "training_failed"})]
    m = GATE_CHECK_RE.search(text)
    if m:
        data = {"ci": "megatron", "check": m.group("check").lower(), "metric": m.group("metric"), "passed": False}
        return [(EventKind.GATE, f"{m.group('check')} comparison of {m.group('metric')} failed", data)]
    m = GATE_METRICS_RE.search(text)
    if m:
        metrics = [s.strip() for s in m.group("metrics").split(",") if s.strip()]
        return [(EventKind.GATE, _short(f"golden-value check failed for {', '.join(metrics)}"),
                 {"ci": "megatron", "failed_metrics": metrics, "passed": False})]
    return []


Matcher = Callable[[Line, str], list[tuple[EventKind, str, dict[str, Any]]]]

# (cheap substring test, matcher): the first matcher that returns events wins the line.
_MATCHERS: list[tuple[tuple[str, ...], Matcher]] = [
    (("out of memory",), _oom),
    (("atchdog", "Timeout at NCCL", "Heartbeat monitor"), _nccl),
    (("Unexpected result", "found NaN", "found Inf", "returned nan", "gradients are Nan", "The loss returned"), _nan),
    (("Current loss scale", "Minimum loss scale", "Gradient overflow", "Using dynamic loss scale", "Grad scale is small",
      "probably exploding", "Skipped batch, new scale",
      "Found inf or nan", "decreased lg_loss_scale"), _loss_scale),
    (("(exitcode:", "closing signal", "SignalException"), _elastic_line),
    (("Fatal Python error", "Segmentation fault", "Bus error", "Aborted", "Floating point exception", "Killed",
      "killed by signal", "oom-kill", "oom_kill", "xit code", "xit status", "xited with code"), _signals),
    (("Xid",), _xid),
    (("ECC",), _ecc),
    (("Dist", "Rendezvous", "NCCL error"), _dist),
    (("Training failed", "FAILED", "metrics failed"), _ci),
    (("CUDA error",), _cuda),
]

# a step named in a message: "at iteration=2137", "at step 500", "iteration 17062"
_STEP_IN_TEXT = re.compile(r"\b(?:iteration|iter|step)\s?[=:#]?\s?(\d{1,12})\b", re.I)

# --- Python tracebacks --------------------------------------------------------------------------------
# source: NVIDIA-BioNeMo/bionemo-recipes#794 (frames behind "29: [rank29]: "), alibaba/ROLL#193 (a logger
#   prefix before "Traceback (most recent call last):"); chaining markers are CPython's traceback module text.
TB_START = "Traceback (most recent call last):"
FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
EXC_LINE_RE = re.compile(r"^(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::(?: (?P<msg>.*))?)?$")
BARE_EXC_RE = re.compile(r"^(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failure))"
                         r"(?::(?: (?P<msg>.*))?)?$")
CHAIN_CONTEXT = "During handling of the above exception, another exception occurred:"
CHAIN_CAUSE = "The above exception was the direct cause of the following exception:"
LIBRARY_PATH_RE = re.compile(r"[\\/](?:site|dist)-packages[\\/]|[\\/]lib[\\/]python\d|^<", re.IGNORECASE)
MAX_FRAMES = 40  # keep the outermost 5 and innermost 35 of a deep (recursive) stack
MAX_IDLE = 50  # lines of unrelated output tolerated inside a traceback before giving up on it
_DIGITS = re.compile(r"\d")


def is_user_frame(path: str) -> bool:
    """True for the program's own files, False for site-/dist-packages, the stdlib and ``<frozen ...>``."""
    return LIBRARY_PATH_RE.search(path) is None


@dataclass(slots=True)
class _Traceback:
    start: int
    prefix: str  # a logger prefix before "Traceback", digits normalised (timestamps change per line)
    frames: list[dict[str, Any]] = field(default_factory=list)
    n_frames: int = 0
    idle: int = 0
    last_line: int = 0
    last_raw: str = ""
    chained_from: dict[str, Any] | None = None


@dataclass(slots=True)
class _ElasticEntry:
    fields: dict[str, str] = field(default_factory=dict)
    index: int | None = None
    line: int = 0
    raw: str = ""


@dataclass(slots=True)
class _ElasticBlock:
    """torch.distributed.elastic ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors).
    source: fudan-generative-vision/hallo2#75 (Root Cause block, SIGSEGV), lzhxmu/CPPO#6 (header + SIGKILL)."""

    start: int
    raw: str
    rank: int | None
    script: str | None = None
    root: bool = False
    entry: _ElasticEntry | None = None
    emitted: int = 0
    idle: int = 0


ELASTIC_HEADER_RE = re.compile(r"ChildFailedError:\s*$|^Root Cause \(first observed failure\):")
ELASTIC_FIELD_RE = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<val>.*)$")
ELASTIC_INDEX_RE = re.compile(r"^\s*\[(?P<i>\d+)\]:\s*$")
ELASTIC_SCRIPT_RE = re.compile(r"^(?P<script>\S.*) FAILED\s*$")
EXITCODE_RE = re.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
RANK_FIELD_RE = re.compile(r"(?P<rank>\d+)(?: \(local_rank: (?P<lr>\d+)\))?")
SIGNAL_LINE_RE = re.compile(r"Signal (?P<sig>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")


class SignatureScanner:
    """Stateful per-source scanner; see the module docstring."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.n_tracebacks = 0
        self._tb: dict[int | None, _Traceback] = {}
        self._chain: dict[int | None, dict[str, Any]] = {}  # rank -> last finished traceback, for chaining
        self._elastic: _ElasticBlock | None = None
        self._nvrm: dict[str, Any] | None = None  # "The NVIDIA GPU <pci>" waiting for "fallen off the bus"
        # (rank, iteration) of a "Grad overflow on iteration N" line, whose scale the next line gives
        self._overflow_at: tuple[int | None, int] | None = None
        self._samples = SampleWatch(source)

    @property
    def busy(self) -> bool:
        """True while a multi-line record is open (every line must then be fed, not only gated ones)."""
        return bool(self._tb) or self._elastic is not None or self._overflow_at is not None

    # -- entry points -----------------------------------------------------------------------------------
    def feed(self, line: Line) -> list[Event]:
        if "**" in line.text:  # Markdown bold around a pasted error ("**RuntimeError: CUDA out of memory.**")
            line = Line(line.no, line.text.replace("**", ""), line.rank, line.raw)
        self._samples.feed(line)
        known = catalogue.match(line.text)
        overflow_at, self._overflow_at = self._overflow_at, None  # it waits one line
        out = self._signatures(line, overflow_at)
        if known is not None:
            data: dict[str, Any] = {"known": known.id, "meaning": known.meaning, "category": known.category,
                                    "severity": known.severity, "fatal": known.fatal, "source": known.source}
            if known.signal is not None:
                data["signal"] = known.signal
            if known.normal_in_game:
                data["normal_in_game"] = True
            if known.stops_early:
                data["stops_early"] = True
            ev = next((e for e in out if e.kind is known.kind), None)
            if ev is not None:
                ev.data.update(data)  # a generic reading of the same line gains the known meaning
            else:
                ev = self._event(known.kind, _short(line.text), line, data)
                out.append(ev)
            pat = known.pattern
            own = pat.search(line.text) if pat is not None and "step" in pat.groupindex else None
            if own is not None:
                ev.data["named_step"] = int(own.group("step"))  # "Detected inf/nan during batch_number=0"
            else:
                m = _STEP_IN_TEXT.search(line.text)
                if m is not None:
                    ev.data["named_step"] = int(m.group(1))  # the message's own step: "Loss mismatch at step 2"
        for ev in out:
            if ev.step is None and "named_step" in ev.data:
                ev.step = ev.data["named_step"]  # "Loss became infinite or NaN at iteration=2137!"
        return out

    def _signatures(self, line: Line, overflow_at: tuple[int | None, int] | None) -> list[Event]:
        text = line.text
        # An open traceback only needs the lines of its own rank; other ranks' lines stay gated.
        if line.rank not in self._tb and self._elastic is None and GATE.search(text) is None:
            return []
        out: list[Event] = []
        if self._elastic is not None and self._elastic_feed(line, text, out):
            return out
        tb_exc: str | None = None
        if line.rank in self._tb:
            consumed, tb_exc = self._tb_feed(line, text, out)
            if consumed and tb_exc is None:
                return out
        if TB_START in text:
            self._tb_start(line, text, out)
            return out
        if line.rank not in self._tb and FRAME_RE.match(text):
            # a paste that starts inside a traceback (its header cut off) or a process killed while it
            # hung, which leaves only the stack: the frames still say where it was
            self._tb[line.rank] = _Traceback(line.no, "", last_line=line.no, last_raw=line.raw)
            self._tb_feed(line, text, out)
            return out
        if CHAIN_CONTEXT in text or CHAIN_CAUSE in text:
            prev = self._chain.get(line.rank)
            if prev is not None:
                prev["relation"] = "context" if CHAIN_CONTEXT in text else "cause"
            return out
        if ELASTIC_HEADER_RE.search(text):
            self._elastic_open(line, text, out)
            return out
        if ("NVRM" in text or "GPU is lost" in text) and self._gpu_lost(line, text, out):
            return out
        if "Grad overflow on iteration" in text:
            g = GRAD_OVERFLOW_RE.search(text)
            if g is not None:  # the scale follows on the next line, which becomes the event
                self._overflow_at = (line.rank, int(g.group("step")))
                return out
        for needles, matcher in _MATCHERS:
            if any(n in text for n in needles):
                found = matcher(line, text)
                if found:
                    for kind, _, data in found:
                        if kind is EventKind.LOSS_SCALE and overflow_at is not None and overflow_at[0] == line.rank:
                            data["named_step"] = overflow_at[1]
                    out.extend(self._event(kind, msg, line, data) for kind, msg, data in found)
                    return out
        if tb_exc is None:
            m = BARE_EXC_RE.match(text)
            if m is not None:
                data = {"exc_type": m.group("exc"), "message": (m.group("msg") or "").strip(), "uncaught": True}
                out.append(self._event(EventKind.ERROR, _short(text), line, data))
        return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        for rank in list(self._tb):
            self._tb_emit(rank, None, None, out)
        if self._elastic is not None:
            self._elastic_close(out)
        return out + self._samples.finish()

    # -- helpers ---------------------------------------------------------------------------------------
    def _event(self, kind: EventKind, message: str, line: Line, data: dict[str, Any],
               rank: int | None = None, at: tuple[int, str] | None = None) -> Event:
        if rank is None:
            rank = line.rank if line.rank is not None else data.get("rank")
        no, raw = at if at is not None else (line.no, line.raw)
        return Event(kind, message, self.source, no, raw, rank=rank, data=data)

    # -- tracebacks -------------------------------------------------------------------------------------
    def _tb_start(self, line: Line, text: str, out: list[Event]) -> None:
        if line.rank in self._tb:  # a new traceback before the old one ended: keep the old one as incomplete
            self._tb_emit(line.rank, None, None, out)
        pos = text.index(TB_START)
        tb = _Traceback(line.no, _DIGITS.sub("0", text[:pos]), last_line=line.no, last_raw=line.raw)
        prev = self._chain.pop(line.rank, None)
        if prev is not None and "relation" in prev:
            tb.chained_from = prev
        self._tb[line.rank] = tb

    def _tb_feed(self, line: Line, text: str, out: list[Event]) -> tuple[bool, str | None]:
        """Returns (consumed, exception line text if this line ended the traceback)."""
        tb = self._tb[line.rank]
        if tb.prefix:
            n = len(tb.prefix)
            if _DIGITS.sub("0", text[:n]) == tb.prefix:
                text = text[n:]
        fm = FRAME_RE.match(text)
        if fm:
            tb.n_frames += 1
            frame = {"file": fm.group("file"), "line": int(fm.group("line")), "function": (fm.group("func") or "").strip(),
                     "user": is_user_frame(fm.group("file"))}
            tb.frames.append(frame)
            if len(tb.frames) > MAX_FRAMES:
                del tb.frames[5]
            tb.idle = 0
            tb.last_line, tb.last_raw = line.no, line.raw
            return True, None
        if text[:1].isspace() or text.startswith(("[Previous line repeated", "^")):
            tb.idle = 0
            return True, None
        if TB_START in text:
            return False, None  # a new traceback (chained without marker, or another one): handled by caller
        em = EXC_LINE_RE.match(text)
        # An all-caps name is a logger level ("INFO: ..."), not an exception class.
        if em and tb.frames and not em.group("exc").rsplit(".", 1)[-1].isupper():
            self._tb_emit(line.rank, line, em, out)
            return True, text
        tb.idle += 1
        if tb.idle > MAX_IDLE:
            self._tb_emit(line.rank, None, None, out)
        return False, None

    def _tb_emit(self, rank: int | None, line: Line | None, em: re.Match[str] | None, out: list[Event]) -> None:
        tb = self._tb.pop(rank)
        self.n_tracebacks += 1
        frames = tb.frames
        user = [f for f in frames if f["user"]]
        data: dict[str, Any] = {
            "exc_type": em.group("exc") if em else None,
            "message": (em.group("msg") or "").strip() if em else "",
            "frames": [{k: f[k] for k in ("file", "line", "function")} for f in frames],
            "n_frames": tb.n_frames,
            "user_frames": [{k: f[k] for k in ("file", "line", "function")} for f in user],
            "start_line": tb.start,
            "index": self.n_tracebacks,
        }
        if user:
            data["last_user_frame"] = data["user_frames"][-1]
        if em is None:
            data["incomplete"] = True
        if tb.chained_from is not None:
            data["chained_from"] = tb.chained_from
        if em is not None and line is not None:
            msg = _short(f"{data['exc_type']}: {data['message']}" if data["message"] else data["exc_type"])
            out.append(Event(EventKind.TRACEBACK, msg, self.source, line.no, line.raw, rank=rank, data=data))
            self._chain[rank] = {"exc_type": data["exc_type"], "message": data["message"], "line": line.no,
                                 "index": data["index"]}
        else:
            out.append(Event(EventKind.TRACEBACK, "traceback without its exception line (log cut short?)",
                             self.source, tb.last_line, tb.last_raw, rank=rank, data=data))

    # -- torch.distributed.elastic summary -----------------------------------------------------------------
    def _elastic_open(self, line: Line, text: str, out: list[Event]) -> None:
        if self._elastic is not None:
            if "Root Cause" in text:
                self._elastic_flush(out)
                self._elastic.root = True
                return
            self._elastic_close(out)
        self._elastic = _ElasticBlock(line.no, line.raw, line.rank, root="Root Cause" in text)

    def _elastic_feed(self, line: Line, text: str, out: list[Event]) -> bool:
        """Handle a line inside the summary block; False when the line is not part of it."""
        blk = self._elastic
        assert blk is not None
        if "Root Cause (first observed failure)" in text:
            self._elastic_flush(out)
            blk.root = True
            return True
        f = ELASTIC_FIELD_RE.match(text)
        if f:
            if blk.entry is None:
                blk.entry = _ElasticEntry()
            blk.entry.fields[f.group("key")] = f.group("val").strip()
            if f.group("key") == "exitcode" or not blk.entry.line:
                blk.entry.line, blk.entry.raw = line.no, line.raw
            blk.idle = 0
            if f.group("key") == "traceback":  # the last field torch prints: the entry is complete
                self._elastic_flush(out)
            return True
        # "[0]:" looks like a launcher rank prefix, so the cleaned text is empty: look at the raw line.
        i = ELASTIC_INDEX_RE.match(text) or (None if text.strip() else ELASTIC_INDEX_RE.match(line.raw.strip()))
        if i:
            self._elastic_flush(out)
            blk.entry = _ElasticEntry(index=int(i.group("i")), line=line.no, raw=line.raw)
            return True
        stripped = text.strip()
        if stripped.startswith("====="):
            if blk.root:
                self._elastic_close(out)
            return True
        if stripped.startswith("-----"):
            self._elastic_flush(out)
            return True
        s = ELASTIC_SCRIPT_RE.match(stripped)
        if s and blk.script is None:
            blk.script = s.group("script")
            return True
        if stripped in ("Failures:", "<NO_OTHER_FAILURES>"):
            return True
        # Anything else (a child's traceback printed in the 'traceback :' field, other output) is left
        # to the other matchers; the block closes after MAX_IDLE such lines.
        self._elastic_flush(out)  # an entry's fields are contiguous
        blk.idle += 1
        if blk.idle > MAX_IDLE:
            self._elastic_close(out)
        return False

    def _elastic_flush(self, out: list[Event]) -> None:
        blk = self._elastic
        if blk is None or blk.entry is None:
            return
        entry, blk.entry = blk.entry, None
        fv = entry.fields
        data: dict[str, Any] = {"origin": "summary", "root_cause": blk.root}
        if entry.index is not None:
            data["failure_index"] = entry.index
        if blk.script:
            data["script"] = blk.script
        for key in ("time", "host", "error_file"):
            if key in fv:
                data[key] = fv[key]
        if "rank" in fv and (r := RANK_FIELD_RE.match(fv["rank"])):
            data["rank"] = int(r.group("rank"))
            if r.group("lr"):
                data["local_rank"] = int(r.group("lr"))
        code: int | None = None
        if "exitcode" in fv and (c := EXITCODE_RE.match(fv["exitcode"])):
            code = int(c.group("code"))
            data["exitcode"] = code
            if c.group("pid"):
                data["pid"] = int(c.group("pid"))
        signum: int | None = None
        if "traceback" in fv:
            sig = SIGNAL_LINE_RE.search(fv["traceback"])
            if sig:
                signum = int(sig.group("sig"))
                data["pid"] = data.get("pid", int(sig.group("pid")))
            elif fv["traceback"] and not fv["traceback"].startswith("To enable traceback"):
                data["traceback"] = _short(fv["traceback"])
        if signum is None and code is not None and code < 0:
            signum = -code
        if signum is not None:
            data["signal"] = signum
            data["signal_name"] = SIGNALS.get(signum, f"signal {signum}")
        rank = data.get("rank", blk.rank)
        who = f"rank {rank}" if rank is not None else "a worker"
        if "host" in data:
            who += f" on {data['host']}"
        what = f"exitcode {code}" if code is not None else "failed"
        if signum is not None:
            what += f" ({data['signal_name']})"
        at = (entry.line or blk.start, entry.raw or blk.raw)
        line = Line(at[0], "", blk.rank, at[1])
        out.append(self._event(EventKind.ELASTIC_FAILURE, f"{'root cause: ' if blk.root else ''}{who} {what}",
                               line, data, rank=rank, at=at))
        base: dict[str, Any] = {k: data[k] for k in ("rank", "local_rank", "pid", "exitcode", "host") if k in data}
        for kind, msg, d in _signal_events(None, signum, base, who):
            out.append(self._event(kind, msg, line, d, rank=rank, at=at))
        blk.emitted += 1

    def _elastic_close(self, out: list[Event]) -> None:
        blk = self._elastic
        if blk is None:
            return
        self._elastic_flush(out)
        if blk.emitted == 0:  # header without any failure entry (log cut short)
            data: dict[str, Any] = {"origin": "summary"}
            if blk.script:
                data["script"] = blk.script
            out.append(Event(EventKind.ELASTIC_FAILURE, "torch.distributed.elastic: child process failed",
                             self.source, blk.start, blk.raw, rank=blk.rank, data=data))
        self._elastic = None

    # -- GPU fallen off the bus ------------------------------------------------------------------------------
    def _gpu_lost(self, line: Line, text: str, out: list[Event]) -> bool:
        m = NVRM_GPU_RE.search(text)
        if m:
            self._nvrm = {"pci": m.group("pci"), "start_line": line.no}
        m = NVRM_PCIID_RE.search(text)
        if m and self._nvrm is not None:
            self._nvrm["pci_device_id"] = m.group("id")
        if "fallen off the bus" in text and "Xid" not in text:
            data = dict(self._nvrm or {})
            self._nvrm = None
            where = f" {data['pci']}" if "pci" in data else ""
            out.append(self._event(EventKind.GPU_LOST, f"GPU{where} has fallen off the bus", line, data))
            return True
        m = GPU_IS_LOST_RE.search(text)
        if m:
            out.append(self._event(EventKind.GPU_LOST, f"GPU {m.group('pci')} is lost", line, {"pci": m.group("pci")}))
            return True
        return bool(NVRM_GPU_RE.search(text) or NVRM_PCIID_RE.search(text))
