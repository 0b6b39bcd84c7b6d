"""Combine rule hits into root causes ("stories") and a verdict.

Findings are grouped by what explains what, then ordered by severity and by what came first:

- numerics: a grad-norm spike before a loss spike before NaN is one story; an lr jump shortly
  before the first symptom is its likely cause; anything after a loss-scale collapse is
  ``loss_scale_collapse``;
- infrastructure: hardware faults explain OOMs, crashes and NCCL timeouts; an OOM explains the
  NCCL aborts of the other ranks; the rank that failed first is the root;
- not learning: lr 0 or vanishing gradients explain a flat loss;
- memory growth explains a later OOM; stalls and stragglers explain throughput loss.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from trainaudit.answer.schema import SEVERITY_ORDER
from trainaudit.rules.base import Hit

NUMERIC = ("loss_scale_collapse", "grad_explosion", "divergence", "loss_spike", "nan_inf")
# within the same step, the category that explains the others comes first
_NUMERIC_TIE = {c: i for i, c in enumerate(NUMERIC)}
INFRA = ("hardware_fault", "oom", "distributed_failure", "crash")
_INFRA_ORDER = {c: i for i, c in enumerate(INFRA)}


@dataclass
class Story:
    category: str
    severity: str
    hits: list[Hit]  # primary first
    issue: str
    first_bad_step: int | None
    confidence: float
    fix: str = ""
    expected_impact: str = ""
    verify: str = ""
    needs_more_data: list[str] = field(default_factory=list)
    fatal: bool = False


@dataclass
class Diagnosis:
    verdict: str
    category: str
    first_bad_step: int | None
    stories: list[Story]
    hits: list[Hit]
    summary: str
    needs_more_data: list[str] = field(default_factory=list)
    quick_fixes: list[str] = field(default_factory=list)


def _sev(h: Hit | Story) -> int:
    return SEVERITY_ORDER[h.severity]


def _step(h: Hit) -> float:
    return math.inf if h.first_bad_step is None else float(h.first_bad_step)


FIXES: dict[str, tuple[str, str, str]] = {
    # category: (fix, expected impact, how to verify)
    "nan_inf": ("Lower the peak learning rate or lengthen warm-up, clip gradients (e.g. max norm 1.0), prefer bf16 over "
                "fp16, and resume from the last checkpoint before the first bad step.",
                "No non-finite loss or grad norm; training continues past the first bad step.",
                "Re-run from the checkpoint before the first bad step and check that loss and grad norm stay finite "
                "beyond it (trainaudit diagnose shows no TA101)."),
    "divergence": ("Lower the learning rate (or undo the lr change that preceded the rise), lengthen warm-up, clip "
                   "gradients; restart from the checkpoint at the loss minimum.",
                   "The loss keeps decreasing past the step where it diverged.",
                   "Re-run and compare the loss curve over the same steps: no TA201 finding, final loss below the "
                   "previous best."),
    "loss_spike": ("Clip gradients, lower the peak lr, inspect or skip the batch at the spike step; for LLMs consider "
                   "z-loss / QK-norm.",
                   "No spike at that step; less wasted compute and lower risk of divergence.",
                   "Re-run over the spike step (same data order) and check the loss stays within its rolling band."),
    "loss_scale_collapse": ("Switch to bf16, or keep fp16 with a lower lr, gradient clipping and a larger "
                            "loss-scale window; find the layer that overflows (activation statistics).",
                            "Loss scale stays stable; no skipped steps and no NaN.",
                            "Log the loss scale / skipped-step counter and check it stops halving."),
    "grad_explosion": ("Clip the gradient norm (near its healthy value), lower the learning rate; for RNNs use "
                       "LSTM/GRU or orthogonal init.",
                       "Grad norm stays in its early range; the loss no longer blows up.",
                       "Log grad norm and check its growth factor stays below 10x."),
    "grad_vanishing": ("Use ReLU/GELU, residual connections and normalisation layers; He/Xavier init.",
                       "Early layers receive gradients; the loss decreases.",
                       "Log per-layer grad norms and check the smallest is within 1e-3 of the largest."),
    "plateau": ("Check that parameters require grad and are in the optimizer, that the lr is > 0 after warm-up, and "
                "that labels match the inputs (inspect one batch).",
                "The loss falls below its initial value within the first few hundred steps.",
                "Overfit a single small batch: the loss must go near 0; then re-run."),
    "overfitting": ("Stop at the validation minimum (early stopping, keep that checkpoint); add data/augmentation, "
                    "weight decay or dropout, or train fewer epochs.",
                    "Validation loss ends at (or below) its minimum; smaller generalisation gap.",
                    "Re-run with early stopping and compare the final validation loss to the minimum."),
    "oom": ("If reserved-but-unallocated memory is large set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; "
            "otherwise reduce the micro-batch (keep the global batch with gradient accumulation), use activation "
            "checkpointing, ZeRO/FSDP sharding or bf16.",
            "Peak memory below the GPU capacity; the run passes the step where it died.",
            "Re-run with torch.cuda.max_memory_allocated() logged and check the headroom at the failing step."),
    "memory_growth": ("Find the leak: accumulate loss.item() not the tensor, detach what you keep, clear caches.",
                      "Flat memory after warm-up; no OOM later in the run.",
                      "Log allocated memory every N steps and check the slope is ~0 after warm-up."),
    "distributed_failure": ("Fix the root rank's own failure first; for a genuine hang set NCCL_DEBUG=INFO and "
                            "TORCH_NCCL_ASYNC_ERROR_HANDLING=1, check the network, and dump stacks of the stuck rank.",
                            "All ranks reach the end of training.",
                            "Re-run and check every rank logs the completion marker; no watchdog timeout."),
    "throughput_regression": ("Compare nodes/GPUs around the step where it slowed (clocks, thermal, dmesg, other "
                              "processes), the data source, and any checkpoint/eval activity starting there.",
                              "Step time back to its level before the change.",
                              "Re-run and compare median step time before/after the same step."),
    "data_pipeline": ("Increase DataLoader num_workers, enable pin_memory and persistent_workers, prefetch, or "
                      "preprocess/cache the data on fast storage.",
                      "No periodic slow steps; higher throughput.",
                      "Log step time and data-wait time; the periodic slow steps disappear."),
    "hardware_fault": ("Drain the node and report the Xid/ECC error; resume from the last checkpoint on healthy "
                       "hardware.",
                       "The run proceeds without the fault on other hardware.",
                       "Check dmesg / nvidia-smi -q on the node; the re-run on other nodes passes the failing step."),
    "crash": ("Fix the exception at the deepest user-code frame; for signals, check CUDA/NCCL/driver versions and "
              "run with CUDA_LAUNCH_BLOCKING=1 and faulthandler enabled.",
              "The run passes the step where it crashed.",
              "Re-run to the same step; no traceback."),
}


def _story(category: str, hits: list[Hit], issue: str, n_loss: int) -> Story:
    hits = sorted(hits, key=lambda h: (h.precursor, -_sev(h), _step(h)))
    primary = next((h for h in hits if not h.precursor), hits[0])
    sev = max((h.severity for h in hits), key=SEVERITY_ORDER.__getitem__)
    conf = max(h.confidence for h in hits if not h.precursor) if any(not h.precursor for h in hits) else primary.confidence
    first = min((h.first_bad_step for h in hits if h.first_bad_step is not None and not h.precursor), default=None)
    if first is None:
        first = primary.first_bad_step
    fix, impact, verify = FIXES.get(category, FIXES["crash"])
    st = Story(category=category, severity=sev, hits=hits, issue=issue, first_bad_step=first, confidence=conf,
               fix=fix, expected_impact=impact, verify=verify, fatal=any(h.fatal for h in hits))
    if category in NUMERIC + ("plateau", "overfitting", "grad_vanishing") and 0 < n_loss < 20:
        st.confidence *= 0.8
        st.needs_more_data.append("a longer stretch of the log: fewer than 20 logged training-loss points")
    return st


def _incidents(num: list[Hit]) -> list[list[Hit]]:
    """Split numeric hits into incidents: symptoms that start after the previous incident ended
    (plus a small gap) are a separate story; each precursor joins the incident it precedes."""
    symptoms = sorted((h for h in num if not h.precursor), key=_step)
    groups: list[list[Hit]] = []
    end = -math.inf
    for h in symptoms:
        gap = max(10.0, 0.01 * _step(h))
        if groups and _step(h) <= end + gap:
            groups[-1].append(h)
        else:
            groups.append([h])
            end = -math.inf
        last = h.last_step if h.last_step is not None else h.first_bad_step
        end = max(end, float(last) if last is not None else _step(h))
    for p in (h for h in num if h.precursor):
        target = next((g for g in groups if _step(p) <= _step(g[0]) + max(10.0, 0.01 * _step(g[0]))
                       and _step(g[0]) - _step(p) <= max(50.0, 0.05 * _step(g[0]))), None)
        if target is not None:
            target.append(p)
        else:
            groups.append([p])  # a cause with no symptom after it (e.g. an lr jump the run absorbed)
    return groups


def _numeric_story(num: list[Hit], n_loss_points: int, has: set[str]) -> Story:
    symptoms = [h for h in num if not h.precursor]
    if not symptoms:
        return _story(num[0].category, num, num[0].message, n_loss_points)
    if any(h.category == "loss_scale_collapse" for h in symptoms):
        cat = "loss_scale_collapse"
    else:
        first = min(_step(h) for h in symptoms)
        # the earliest symptom; ties (same step) go to the one that explains the others
        cat = min((h for h in symptoms if _step(h) == first), key=lambda h: _NUMERIC_TIE[h.category]).category
        # sustained gradient growth (TA204) that starts with the first symptom explains it
        boom = [h for h in symptoms if h.rule == "TA204"]
        if boom and cat in ("divergence", "loss_spike", "nan_inf") and _step(boom[0]) <= first + max(10.0, 0.05 * first):
            cat = "grad_explosion"
    prim = min((h for h in symptoms if h.category == cat), key=_step)
    parts = [prim.message]
    for h in sorted(symptoms, key=_step):
        if h is not prim:
            parts.append(f"then: {h.message}" if _step(h) >= _step(prim) else f"before it: {h.message}")
    issue = "; ".join(parts)
    start = _step(prim)
    cause = ""
    lr_step = None
    for h in [x for x in num if x.rule == "TA206"]:
        near = max(50.0, 0.05 * max(start, 1.0))
        if -3 <= _step(h) - start <= 0 or (_step(h) <= start and start - _step(h) <= near):
            cause = f"likely cause: {h.message}, at or just before the first symptom"
            lr_step = h.first_bad_step
        elif 0 < _step(h) - start <= 3:
            # the symptom "starts" a noisy point or two before the jump: it starts at the jump
            cause = f"likely cause: {h.message}, where the symptom starts"
            lr_step = h.first_bad_step
    for h in [x for x in num if x.rule == "TA103"]:
        lead = h.data.get("lead_steps")
        if lead is not None and _step(h) <= start + 1:
            cause += ("; " if cause else "") + f"the gradient norm spiked first ({h.message})"
    if cause:
        issue = cause + ". " + issue
    st = _story(cat, [prim] + [h for h in num if h is not prim], issue, n_loss_points)
    st.first_bad_step = min((h.first_bad_step for h in symptoms if h.first_bad_step is not None), default=None)
    if lr_step is not None and st.first_bad_step is not None and st.first_bad_step < lr_step:
        st.first_bad_step = lr_step  # a symptom cannot precede its cause
    if any(h.rule == "TA206" for h in num) and "likely cause" in issue:
        st.fix = "Restore the intended lr schedule (the lr jump precedes the symptom); " + st.fix[0].lower() + st.fix[1:]
        st.confidence = min(0.97, st.confidence + 0.05)
    if "grad_norm" not in has:
        st.needs_more_data.append("log the gradient norm (to see whether gradients blew up first)")
        st.confidence *= 0.9
    if "lr" not in has:
        st.needs_more_data.append("log the learning rate (to rule out a schedule change)")
    if cat == "loss_scale_collapse" and "loss_scale" not in has:
        st.needs_more_data.append("log the loss scale every step")
    return st


def diagnose(hits: list[Hit], *, n_loss_points: int = 0, has: set[str] | None = None) -> Diagnosis:
    """``has``: roles that the run logs (``grad_norm``, ``lr``, ``val_loss``, ``loss_scale``...),
    used to say what data would settle a story."""
    has = has or set()
    real = [h for h in hits if h.severity != "info"]
    stories: list[Story] = []
    used: set[int] = set()

    def take(pred) -> list[Hit]:  # type: ignore[no-untyped-def]
        out = [h for h in real if id(h) not in used and pred(h)]
        used.update(id(h) for h in out)
        return out

    # -- infrastructure ----------------------------------------------------------------------
    infra = take(lambda h: h.category in INFRA and h.fatal)
    if infra:
        infra.sort(key=lambda h: (_INFRA_ORDER[h.category], _step(h)))
        root = infra[0]
        mem = take(lambda h: h.category == "memory_growth") if root.category == "oom" else []
        issue = root.message
        if root.category == "oom" and root.data.get("fragmentation"):
            issue = "CUDA OOM caused by allocator fragmentation: " + root.message
        rest = [h for h in infra[1:]]
        if any(h.category == "distributed_failure" for h in rest) and root.category in ("oom", "hardware_fault", "crash"):
            issue += "; the collective timeouts / aborts of the other ranks are consequences"
        if mem:
            issue += f"; memory grew steadily before it ({mem[0].message})"
        st = _story(root.category, [root, *rest, *mem], issue, n_loss_points)
        st.hits.remove(root)
        st.hits.insert(0, root)
        st.first_bad_step = root.first_bad_step if root.first_bad_step is not None else st.first_bad_step
        if root.category == "oom" and root.data.get("fragmentation"):
            st.fix = ("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the reserved-but-unallocated memory "
                      "exceeds the request: fragmentation); if it still fails, reduce the micro-batch.")
        if root.category == "distributed_failure" and root.data.get("root_rank") is None:
            st.needs_more_data.append("the logs of every rank (to see which rank failed first)")
            st.confidence *= 0.85
        if root.category == "crash" and not root.data.get("user_frames"):
            st.needs_more_data.append("the full stderr with the Python traceback")
        stories.append(st)

    # -- numerics: one story per incident (symptoms that overlap in time), precursors attached
    num = take(lambda h: h.category in NUMERIC or h.rule in ("TA103", "TA206"))
    if any(h.category == "loss_scale_collapse" for h in num):
        num += take(lambda h: h.rule == "TA203")
    for group in _incidents(num):
        stories.append(_numeric_story(group, n_loss_points, has))

    # -- not learning ---------------------------------------------------------------------------
    flat = take(lambda h: h.category in ("plateau", "grad_vanishing"))
    if flat:
        vanish = [h for h in flat if h.category == "grad_vanishing"]
        lr0 = [h for h in flat if h.rule == "TA207"]
        cat = "grad_vanishing" if vanish else "plateau"
        lead = vanish[0] if vanish else (lr0[0] if lr0 else min(flat, key=_step))
        issue = lead.message + "".join(f"; {h.message}" for h in flat if h is not lead)
        st = _story(cat, [lead] + [h for h in flat if h is not lead], issue, n_loss_points)
        st.first_bad_step = min((h.first_bad_step for h in flat if h.first_bad_step is not None), default=None)
        if lr0 and not vanish:
            st.fix = "Fix the learning-rate schedule: the lr is 0, so nothing trains (scheduler warm-up/milestones, param groups)."
        if cat == "plateau" and not any(h.data.get("uniform") for h in flat):
            st.needs_more_data.append("the number of classes / vocabulary size (to compare the loss with ln(C))")
        if "grad_norm" not in has:
            st.needs_more_data.append("log the gradient norm (per layer for vanishing gradients)")
        stories.append(st)

    # -- the rest: one story per category ------------------------------------------------------
    perf = take(lambda h: h.category in ("throughput_regression", "data_pipeline"))
    if perf:
        lead = max(perf, key=lambda h: (_sev(h), -_step(h)))
        stories.append(_story(lead.category, [lead] + [h for h in perf if h is not lead],
                              "; ".join(h.message for h in [lead] + [h for h in perf if h is not lead]), n_loss_points))
    for h in take(lambda h: h.category == "overfitting"):
        st = _story("overfitting", [h], h.message, n_loss_points)
        stories.append(st)
    for h in take(lambda _h: True):
        st = _story(h.category, [h], h.message, n_loss_points)
        if h.rule == "TA405":
            st.needs_more_data.append("the end of the log and the scheduler's job record (time limit, preemption)")
        stories.append(st)

    stories.sort(key=lambda s: (-_sev(s), math.inf if s.first_bad_step is None else s.first_bad_step))
    for s in stories:
        s.confidence = round(min(max(s.confidence, 0.05), 0.99), 3)

    fatal = any(s.fatal for s in stories)
    if not stories:
        verdict, category, first = "healthy", "healthy", None
        summary = "No finding above info: the run looks healthy" + (
            f" ({sum(1 for h in hits if h.severity == 'info')} informational note(s))." if hits else ".")
    else:
        p = stories[0]
        verdict = "crash" if fatal else "unhealthy"
        category, first = p.category, p.first_bad_step
        where = f" from step {first}" if first is not None else ""
        summary = f"{'The run crashed' if fatal else 'The run is unhealthy'}: {_CATEGORY_WORDS.get(category, category.replace('_', ' '))}{where}. {_sentence(p.issue)}"
        if len(stories) > 1:
            summary += f" {len(stories) - 1} further problem(s): " + ", ".join(s.category for s in stories[1:4]) + "."
    needs: list[str] = []
    for s in stories:
        for n in s.needs_more_data:
            if n not in needs:
                needs.append(n)
    quick = []
    for s in stories[:3]:
        q = re.split(r"(?<=[a-z0-9)])\. (?=[A-Z])", s.fix)[0].rstrip(".") + "."  # first sentence ("e.g. x" stays)
        if q not in quick:
            quick.append(q)
    return Diagnosis(verdict=verdict, category=category, first_bad_step=first, stories=stories, hits=hits,
                     summary=summary, needs_more_data=needs, quick_fixes=quick)


# How a category reads in a summary sentence (the rest read fine with "_" as a space).
_CATEGORY_WORDS = {"nan_inf": "NaN/Inf values", "oom": "out of memory", "grad_explosion": "exploding gradients",
                   "grad_vanishing": "vanishing gradients", "loss_scale_collapse": "loss-scale collapse",
                   "distributed_failure": "distributed failure", "data_pipeline": "data-pipeline problem"}


def _sentence(text: str, limit: int = 300) -> str:
    text = text.strip()
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "...")) else ".")
