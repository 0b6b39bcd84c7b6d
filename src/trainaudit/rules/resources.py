"""TA4xx resources and infrastructure: OOM, memory growth, distributed failures, hangs,
throughput regressions, stragglers, data-loader stalls, hardware faults, crashes."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import numpy as np

from trainaudit.answer.builder import QUOTE_CHARS
from trainaudit.answer.schema import Category, Severity
from trainaudit.ingest import catalogue
from trainaudit.model import Event, EventKind, Series, SourceKind
from trainaudit.rules.base import Context, Grid, Guidance, Hit, Rule, Thresholds
from trainaudit.rules.numerics import MIN_SCALE_RE
from trainaudit.series.roles import elapsed_clock, norm, peak
from trainaudit.series.stats import (
    change_point,
    downsample,
    first_sustained,
    monotone_tail,
    rolling_median,
    trend_slope,
)

OOM_GUIDANCE = Guidance(
    fix="If reserved-but-unallocated memory is large set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; otherwise "
        "reduce the micro-batch (keep the global batch with gradient accumulation), use activation checkpointing, "
        "ZeRO/FSDP sharding or bf16.",
    impact="Peak memory below the GPU capacity; the run passes the step where it died.",
    verify="Re-run with torch.cuda.max_memory_allocated() logged and check the headroom at the failing step.")
DISTRIBUTED_GUIDANCE = Guidance(
    fix="Fix the root rank's own failure first; for a genuine hang set NCCL_DEBUG=INFO and "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1, check the network, and dump stacks of the stuck rank.",
    impact="All ranks reach the end of training.",
    verify="Re-run and check every rank logs the completion marker; no watchdog timeout.")

_UNITS = {"b": 1 / 2 ** 30, "kib": 1 / 2 ** 20, "kb": 1 / 2 ** 20, "mib": 1 / 1024, "mb": 1 / 1024, "gib": 1.0,
          "gb": 1.0, "tib": 1024.0, "tb": 1024.0}
# A number starts where its run of digits and dots starts: from inside a long run it would fail the same way.
_SIZE = r"(?<![0-9.])([0-9.]++)\s*+(B|KiB|KB|MiB|MB|GiB|GB|TiB|TB)"
_OOM_FIELDS = {
    "requested": re.compile(r"Tried to allocate " + _SIZE, re.I),
    "total": re.compile(r"(?:total capac\w*+(?: of)? " + _SIZE + r"|" + _SIZE + r" total capacity)", re.I),
    "free": re.compile(r"(?:of which " + _SIZE + r" is free|" + _SIZE + r" free)", re.I),
    "allocated": re.compile(r"(?:" + _SIZE + r" is allocated by PyTorch|" + _SIZE + r" already allocated)", re.I),
    "reserved_unallocated": re.compile(r"" + _SIZE + r" is reserved by PyTorch but unallocated", re.I),
}


def oom_numbers(text: str) -> dict[str, float]:
    """GiB numbers of a CUDA OOM message, every PyTorch wording (1.x parenthesised, 2.x sentences)."""
    out: dict[str, float] = {}
    for key, pat in _OOM_FIELDS.items():
        m = pat.search(text)
        if m:
            g = [x for x in m.groups() if x is not None]
            out[key] = float(g[0]) * _UNITS[g[1].lower()]
    return out


def _completed(ctx: Context) -> bool:
    return any(e.data.get("completed") for e in ctx.events(EventKind.PHASE))


def _first(events: list[Event]) -> Event:
    return events[0]


def _trained_after(ctx: Context, e: Event) -> int:
    """Training-loss points logged at steps after the event's (0 when it has no step of its own)."""
    loss = ctx.series("loss")
    if loss is None or e.step is None:
        return 0
    return int(np.sum(loss.steps > e.step))


class CudaOOM(Rule):
    """Detects CUDA out-of-memory errors and reads their numbers: requested, free, total,
    allocated, and "reserved by PyTorch but unallocated". When the reserved-but-unallocated
    memory is at least the request (or 10% of the GPU), the cause is fragmentation, not size.

    Why: the run dies; in distributed jobs the other ranks then fail in NCCL, which hides the
    real cause further down the log.

    Fix: fragmentation -> ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; otherwise a
    smaller micro-batch with gradient accumulation, activation checkpointing, ZeRO/FSDP
    sharding, shorter sequences, bf16.

    Example: ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB ... 9.35
    GiB is reserved by PyTorch but unallocated``. TensorFlow's ``ResourceExhaustedError: OOM when
    allocating tensor with shape[...]`` and a notebook's ``OutOfMemoryError  Traceback`` header
    count too (without numbers).

    An out-of-memory message the run outlived (``survived_points`` training-loss points or more logged
    at later steps: an allocator that retried smaller, a loop that skipped the batch) is a note, not
    what stopped the run.

    Thresholds: ``frag_frac`` reserved-unallocated share of total that, with the free memory
    covering the request, means fragmentation (0.1); ``survived_points`` (3).
    """

    id = "TA401"
    name = "cuda-oom"
    category = Category.OOM
    severity = Severity.CRITICAL
    also = (Severity.INFO,)
    guidance = OOM_GUIDANCE

    class Params(Thresholds):
        frag_frac: float = 0.1
        survived_points: int = 3

    def check(self, ctx: Context) -> list[Hit]:
        ooms = ctx.events(EventKind.OOM)
        if not ooms:
            return []
        e = _first(ooms)
        nums = oom_numbers(e.raw + " " + e.message)
        for k, v in e.data.items():  # the signature scanner may already have parsed them (GiB)
            if k in _OOM_FIELDS and isinstance(v, (int, float)) and k not in nums:
                nums[k] = float(v)
        req, ru, tot = nums.get("requested"), nums.get("reserved_unallocated"), nums.get("total")
        free = nums.get("free")
        # fragmentation: the reserved-but-unallocated memory would serve the request by itself, or a
        # large share of the GPU sits reserved-but-unallocated and together with the free memory
        # would cover it (if even that is short, the model simply does not fit)
        frag = ru is not None and req is not None and (
            ru >= req or (bool(tot) and ru >= self.p.frag_frac * tot and (free or 0.0) + ru >= req))
        parts = [f"{k.replace('_', ' ')} {v:.2f} GiB" for k, v in nums.items()]
        # TensorFlow names the device in its message, not CUDA (a CPU tensor can fail the same way); Metal is
        # the Apple GPU's
        what, said = _OOM_WHAT.get(str(e.data.get("known")), ("CUDA out of memory", "CUDA out-of-memory error"))
        msg = what + (f" ({', '.join(parts)})" if parts else "")
        if e.rank is not None:
            msg += f" on rank {e.rank}"
        if frag:
            msg += "; the reserved-but-unallocated memory would cover the request: fragmentation"
        ranks = sorted({x.rank for x in ooms if x.rank is not None})
        after = _trained_after(ctx, ooms[-1])
        if after >= self.p.survived_points:
            # TensorFlow's allocator logs a failed attempt at INFO and retries smaller ("failed to allocate
            # ... CUDA_ERROR_OUT_OF_MEMORY", tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc,
            # GpuDriver::DeviceAllocate); a loop may catch the error and skip the batch. Training went on.
            msg += "; the run went on training after it: not what stopped it"
            h = self.hit(msg, 0.5, metric=None, first_bad_step=ctx.step_of(e), last_step=ctx.step_of(ooms[-1]),
                         severity="info", data={"numbers": nums, "rank": e.rank, "ranks": ranks, "survived": True})
            h.ev("oom", e, "the out-of-memory message")
            loss = ctx.series("loss")
            if loss is not None:
                h.point("trained", loss, len(loss) - 1, f"the last {loss.name}, logged after it")
            return [h]
        h = self.hit(msg, 0.97, metric=None, first_bad_step=ctx.step_of(e), last_step=ctx.step_of(e), fatal=True,
                     data={"numbers": nums, "fragmentation": bool(frag), "rank": e.rank, "ranks": ranks})
        h.ev("oom", e, said, value=req, unit="GiB" if req is not None else None)
        if req is not None and ru is not None:
            h.ev("oom_ru", e, "reserved by PyTorch but unallocated", value=ru, unit="GiB")
            h.calc("frag", "reserved-but-unallocated memory over the requested allocation", "{oom_ru} / {oom}", unit="ratio")
        # every other number the message gives that its quoted line does not show as it is (past the
        # quote's end on a long line, or converted from MiB), cited as read
        for key in ("total", "free", "allocated"):
            if key in nums and f"{nums[key]:.2f}" not in (e.raw or "")[:QUOTE_CHARS]:
                h.ev(f"oom_{key}", e, f"{key} memory in the out-of-memory error", value=nums[key], unit="GiB")
        return [h]


# what the device's out-of-memory error is called, by the catalogue entry that read it (CUDA's otherwise)
_OOM_WHAT = {"tf-oom": ("out of memory: TensorFlow could not allocate a tensor", "TensorFlow's out-of-memory error"),
             "metal-oom": ("out of memory on the Apple GPU (Metal: Insufficient Memory)", "Metal's out-of-memory error")}


class HostOOM(Rule):
    """Detects the host (CPU RAM) OOM killer: a worker killed with SIGKILL / exit code -9, or the
    kernel's "Out of memory: Killed process" message.

    Why: the run dies without a Python traceback, which makes it look like a mysterious crash.

    Fix: fewer data-loader workers or prefetch, memory-mapped datasets, smaller CPU offload
    buffers, more host memory per GPU; for a worker's SIGBUS, a larger /dev/shm (``--shm-size``).

    Example: ``exitcode  : -9 (pid: 14750)`` / ``Signal 9 (SIGKILL) received by PID 14750``.
    """

    id = "TA402"
    name = "host-oom"
    category = Category.OOM
    severity = Severity.CRITICAL
    guidance = OOM_GUIDANCE

    def check(self, ctx: Context) -> list[Hit]:
        evs = ctx.events(EventKind.HOST_OOM)
        if not evs:
            return []
        e = evs[0]
        what = "host shared memory exhausted" if e.data.get("shared_memory") else "host out of memory / SIGKILL"
        h = self.hit(f"{what}: {e.message}", 0.8, first_bad_step=ctx.step_of(e), last_step=ctx.step_of(e),
                     fatal=True, data={"rank": e.rank})
        h.ev("kill", e, "worker killed (host OOM)")
        return [h]


def _mem_gib_factor(name: str) -> float | None:
    n = name.lower()
    if "byte" in n:
        return 1 / 2 ** 30
    if "(mb)" in n or "mib" in n or n.endswith("_mb"):
        return 1 / 1024
    if "gb" in n or "gib" in n:
        return 1.0
    return None


class MemoryGrowth(Rule):
    """Detects memory that keeps growing over steps (after the first 10%, where allocator
    warm-up is normal): block medians rising steadily, with the slope per step and, when the
    GPU capacity is known (from an OOM message), the projected step of OOM.

    Why: a leak (tensors kept in a list, ``loss`` accumulated with its graph, growing caches)
    ends in an OOM hours later. Each step that allocates more also takes longer (page faults, the
    allocator's search): a slowdown that starts with the leak is its consequence.

    Fix: accumulate ``loss.item()`` not ``loss``; detach tensors you keep; clear caches; check
    variable-length batches (sort/bucket them).

    Example: ``mem-allocated-bytes`` 10.1 GB -> 10.9 GB -> 11.8 GB -> ... over 5000 steps.


    A memory series that never decreases (up at ``short_up`` of the points or more) is a leak at any
    length (except a peak counter such as ``max_memory_allocated``, which cannot decrease): from ``short_points`` points when it grows ``short_growth``, over ``min_points`` when it
    grows ``creep``, when its last half still holds ``late_share`` of the rise (memory that creeps up while the
    allocator warms up, or while the longest batch so far grows, then holds, is no leak).

    Memory that held a level and then rises at each of the last ``tail`` points or more is a leak
    from where the rise starts, when the rise is ``short_growth`` of the level and more than
    ``tail_noise`` times the level's own spread.

    Thresholds: ``growth`` (0.1), ``monotone`` (0.8), ``min_points`` (10), ``blocks`` (10),
    ``short_points`` (4), ``short_up`` (0.3), ``short_growth`` (0.1), ``creep`` (0.02), ``tail`` (3),
    ``tail_noise`` (2), ``late_share`` (0.2).
    """

    id = "TA403"
    name = "memory-growth"
    category = Category.MEMORY_GROWTH
    severity = Severity.MEDIUM
    explains = frozenset({Category.THROUGHPUT_REGRESSION})
    guidance = Guidance(
        fix="Find the leak: accumulate loss.item() not the tensor, detach what you keep, clear caches.",
        impact="Flat memory after warm-up; no OOM later in the run.",
        verify="Log allocated memory every N steps and check the slope is about 0 after warm-up.")

    class Params(Thresholds):
        growth: float = 0.1
        monotone: float = 0.8
        min_points: int = 10
        blocks: int = 10
        short_points: int = 4
        short_up: float = 0.3
        short_growth: float = 0.1
        creep: float = 0.02
        tail: int = 3
        tail_noise: float = 2.0
        late_share: float = 0.2

    grid: ClassVar[Grid] = {"growth": (0.05, 0.1, 0.2), "short_growth": (0.05, 0.1, 0.2), "min_points": (6, 8, 10, 15),
                              "short_points": (3, 4, 5, 6)}

    def check(self, ctx: Context) -> list[Hit]:
        # every memory figure the log prints (allocated, reserved, peak, used): a leak shows in one
        for name in ctx.roles.memory:
            m = ctx.run.series[name].finite()
            if len(m) < self.p.short_points:
                continue
            hits = self._blocks(ctx, m) if len(m) >= self.p.min_points else []
            if hits:
                return hits
            if peak(name):
                continue  # a running maximum never decreases: only the blocks above can tell a leak in it
            if (h := self._rising_tail(m)) is not None:
                return [h]
            d = np.diff(m.values)
            grown = (m.values[-1] - m.values[0]) / m.values[0] if m.values[0] > 0 else 0.0
            # the last half of the points still holds ``late_share`` of the rise: memory that creeps up while
            # the allocator warms up (or the longest batch so far grows) and then holds is no leak
            late = m.values[-1] - m.values[len(m) // 2] >= self.p.late_share * (m.values[-1] - m.values[0])
            if np.all(d >= 0) and float(np.mean(d > 0)) >= self.p.short_up and late and \
                    grown >= (self.p.short_growth if len(m) < self.p.min_points else self.p.creep):
                # it never goes down: a leak, whatever the length of the paste
                return [self._monotone(m)]
        return []

    def _blocks(self, ctx: Context, m: Series) -> list[Hit]:
        skip = max(1, len(m) // 10)
        st, x = m.steps[skip:], m.values[skip:]
        n_blocks = min(self.p.blocks, x.size // 2)
        if n_blocks < 4:
            return []
        _, bx = downsample(st, x, n_blocks)
        if bx[0] <= 0:
            return []
        growth = (bx[-1] - bx[0]) / bx[0]
        inc = float(np.mean(np.diff(bx) > 0))
        if growth < self.p.growth or inc < self.p.monotone:
            return []
        slope = trend_slope(st.astype(np.float64), x)
        i0 = leak_onset(m)
        shown = (float(x[-1]) - float(x[0])) / float(x[0]) if x[0] > 0 else growth  # as the calc below has it
        msg = f"{m.name} grows {shown:.0%} from step {int(st[0])} to {int(st[-1])}"
        f = _mem_gib_factor(m.name)
        cap = next((oom_numbers(e.raw).get("total") for e in ctx.events(EventKind.OOM) if oom_numbers(e.raw).get("total")), None)
        proj = None
        if f is not None and cap and slope > 0:
            proj = int(st[-1] + (cap - x[-1] * f) / (slope * f))
            msg += f"; at this rate the {cap:.1f} GiB GPU is full near step {proj}"
        msg = msg.replace(f"from step {int(st[0])}", f"from step {int(m.steps[i0])}")
        h = self.hit(msg, min(0.9, 0.5 + growth), metric=m.name, first_bad_step=int(m.steps[i0]), last_step=int(m.steps[-1]),
                     data={"slope_per_step": slope, "projected_oom_step": proj})
        h.point("start", m, skip, f"{m.name} after warm-up")
        h.point("end", m, len(m) - 1, f"last {m.name}")
        h.calc("growth", "relative memory growth", "({end} - {start}) / {start}", unit="ratio")
        return [h]

    def _rising_tail(self, m: Series) -> Hit | None:
        """Memory that rises at every one of the last ``tail`` logged points or more, after a level it
        held, by more than ``tail_noise`` times that level's own spread and ``short_growth`` of it:
        a leak that started where the rise starts."""
        x = m.values
        t = monotone_tail(x, +1)
        if t < self.p.tail or t >= x.size - 1:
            return None
        i0 = x.size - 1 - t  # the last point of the level
        level = x[:i0 + 1]
        rise = float(x[-1] - x[i0])
        if float(x[i0]) <= 0 or rise < self.p.short_growth * float(x[i0]) or rise <= self.p.tail_noise * float(np.ptp(level)):
            return None
        msg = (f"{m.name} rises at each of the last {t} logged points, from {x[i0]:.4g} at step {int(m.steps[i0])} to "
               f"{x[-1]:.4g} (+{rise / float(x[i0]):.0%}), after holding {float(np.median(level)):.4g}")
        h = self.hit(msg, 0.7, metric=m.name, first_bad_step=int(m.steps[i0 + 1]), last_step=int(m.steps[-1]),
                     data={"rising_points": t})
        h.point("start", m, i0, f"{m.name} before the rise")
        h.point("end", m, x.size - 1, f"last {m.name}")
        h.calc("growth", "relative memory growth", "({end} - {start}) / {start}", unit="ratio")
        return h

    def _monotone(self, m: Series) -> Hit:
        growth = (float(m.values[-1]) - float(m.values[0])) / float(m.values[0])
        i0 = leak_onset(m)
        msg = (f"{m.name} never decreases: {m.values[0]:.4g} -> {m.values[-1]:.4g} (+{growth:.0%}) over {len(m)} logged "
               "points")
        h = self.hit(msg, 0.65 if len(m) < self.p.min_points else 0.75, metric=m.name, first_bad_step=int(m.steps[i0]),
                     last_step=int(m.steps[-1]), data={"monotone": True})
        h.point("start", m, 0, f"first {m.name}")
        h.point("end", m, len(m) - 1, f"last {m.name}")
        h.calc("growth", "relative memory growth", "({end} - {start}) / {start}", unit="ratio")
        return h


ONSET_KNOTS = 200  # where a hinge is tried (evenly over the points): the fit costs this many least squares


def leak_onset(m: Series) -> int:
    """The first point of a leak: memory modelled as a level, then a straight rise from a knot (least
    squares over the knots tried, on the logged steps); the leak starts after the last point that is
    still within the level's own spread (the points up to the knot). A leak from the first step rises
    from its first point on; one that starts after a level held since warm-up, from the point after the
    last of that level (where "a tenth of the way to the end" would come steps late)."""
    t = m.steps.astype(np.float64)
    x = m.values
    n = x.shape[0]
    best, knot = math.inf, 0
    for k in np.unique(np.linspace(0, n - 2, min(n - 1, ONSET_KNOTS)).astype(np.int64)).tolist():
        a = np.column_stack([np.ones(n), np.maximum(0.0, t - t[k])])
        coef = np.linalg.lstsq(a, x, rcond=None)[0]
        sse = float(np.sum((a @ coef - x) ** 2))
        if sse < best * (1 - 1e-9):
            best, knot = sse, k
    level = x[:knot + 1]
    top = float(np.median(level)) + float(np.max(np.abs(level - np.median(level))))
    within = np.flatnonzero(x <= top)
    return min(int(within[-1]) + 1 if within.shape[0] else 0, n - 1)


# The exception a rank raises when the collective it waits in is aborted or times out because another
# rank failed (torch.distributed.DistBackendError "NCCL communicator was aborted on rank 3", the
# watchdog's "Watchdog caught collective operation timeout"): its traceback follows the root's failure.
_AFTER_ANOTHER_RANK_RE = re.compile(r"Dist(?:Backend|Store|Network)?Error|communicator was aborted|[Ww]atchdog caught"
                                    r"|collective operation timeout")


def _rank_of_root(ctx: Context) -> tuple[int | None, Event | None, str]:
    """The rank that failed first: an elastic 'Root Cause (first observed failure)', else the
    first non-collective fatal event with a rank (the others then time out in NCCL)."""
    for e in ctx.events(EventKind.ELASTIC_FAILURE):
        if e.data.get("root_cause") or e.data.get("first_observed") or "first observed" in (e.message + e.raw).lower():
            r = e.data.get("rank", e.rank)
            if r is not None:
                return int(r), e, "torch.distributed.elastic reports it as the first observed failure"
    primary = [e for e in ctx.run.events if e.kind in (EventKind.OOM, EventKind.TRACEBACK, EventKind.SIGNAL,
                                                       EventKind.HOST_OOM, EventKind.NAN_CHECK, EventKind.XID,
                                                       EventKind.ECC, EventKind.GPU_LOST) and e.rank is not None
               and not (e.kind == EventKind.TRACEBACK and _AFTER_ANOTHER_RANK_RE.search(
                   f"{e.data.get('exc_type', '')}: {e.data.get('message', '')}"))]
    if primary:
        return primary[0].rank, primary[0], f"its {primary[0].kind.value} comes before the collective failures"
    return None, None, ""


MAX_RANKS_SHOWN = 8  # ranks a collective-failure message names (each quoted where it reports)


class CollectiveFailure(Rule):
    """Detects distributed failures: NCCL watchdog / collective timeouts, c10d store and
    rendezvous errors, torch.distributed.elastic failure summaries; names the rank that died
    first (the root) versus the ranks that aborted after it.

    Why: when one rank dies or hangs, every other rank waits in a collective and times out
    minutes later; their messages dominate the log but are consequences.

    Fix: fix the root rank's own error first (OOM, exception, hardware); for a true hang set
    ``NCCL_DEBUG=INFO``, ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``, check network / IB, and shorten
    the timeout to fail fast; for rendezvous errors check MASTER_ADDR/PORT and the store.

    Example: ``[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753,
    OpType=_REDUCE_SCATTER_BASE, ...) ran for 600061 milliseconds before timing out.``
    """

    id = "TA404"
    name = "collective-failure"
    category = Category.DISTRIBUTED_FAILURE
    severity = Severity.CRITICAL
    guidance = DISTRIBUTED_GUIDANCE

    def check(self, ctx: Context) -> list[Hit]:
        evs = ctx.events(EventKind.NCCL_TIMEOUT, EventKind.DISTRIBUTED_ERROR)
        if not evs:
            return []  # an elastic summary alone is a worker's own failure (signal, exception): TA410/TA402
        e = evs[0]
        ranks = sorted({x.rank for x in evs if x.rank is not None})
        root, root_ev, why = _rank_of_root(ctx)
        msg = f"distributed failure: {e.message}"
        shown = ranks[:MAX_RANKS_SHOWN]
        if ranks:
            more = f" and {len(ranks) - len(shown)} more" if len(ranks) > len(shown) else ""
            msg += f" (ranks reporting: {', '.join(map(str, shown))}{more})"
        ws = ctx.run.meta.get("world_size")
        silent = []
        if root is None and isinstance(ws, int) and ranks and len(ranks) < ws:
            silent = [r for r in range(ws) if r not in ranks]
            if len(silent) == 1:
                root, why = silent[0], "it is the only rank that did not report the timeout (it was stuck elsewhere)"
        if root is not None:
            msg += f"; rank {root} failed first ({why})"
        h = self.hit(msg, 0.9, first_bad_step=ctx.step_of(e), last_step=ctx.step_of(evs[-1]), fatal=True,
                     data={"root_rank": root, "ranks": ranks, "silent_ranks": silent},
                     needs=[] if root is not None else ["the logs of every rank (to see which rank failed first)"])
        h.ev("first", e, "first collective / distributed failure")
        for r in shown:  # each rank the message names is quoted where it reports
            first_of = next(x for x in evs if x.rank == r)
            if first_of is not e:
                h.ev(f"rank{r}", first_of, f"rank {r} reports it")
        if root_ev is not None and root_ev is not e:
            h.ev("root", root_ev, f"the root rank's own failure (rank {root})")
        return [h]


class IncompleteRun(Rule):
    """Detects a run that stops before its configured number of iterations with no completion
    marker and no error (a hang or an external kill), reported at ``info`` for short excerpts.

    Why: a silent stop is a hang (a rank stuck in a collective before the watchdog fires) or
    the scheduler killing the job at its time limit; neither leaves an error in the log.

    Fix: check the scheduler's record (time limit, preemption), enable the NCCL watchdog
    (``TORCH_NCCL_ASYNC_ERROR_HANDLING``), ``py-spy dump`` a hung rank.

    Example: ``iteration 4120/ 10000`` is the last line and nothing follows.

    A metrics file alone (trainer_state.json, metrics.csv) is a snapshot with no end to miss: only a
    log counts.

    Thresholds: ``min_points`` logged steps before this counts above info (50), ``done_frac``
    share of train_iters that counts as complete (0.9).
    """

    id = "TA405"
    name = "incomplete-run"
    category = Category.DISTRIBUTED_FAILURE
    severity = Severity.LOW
    also = (Severity.INFO,)
    end_of_run = True  # every live run "stops without a completion marker"
    guidance = DISTRIBUTED_GUIDANCE
    needs_more_data = ("the end of the log and the scheduler's job record (time limit, preemption)",)

    class Params(Thresholds):
        min_points: int = 50
        done_frac: float = 0.9

    def check(self, ctx: Context) -> list[Hit]:
        if not any(src.kind == SourceKind.LOG for src in ctx.run.sources):
            return []  # a metrics file (trainer_state.json, metrics.csv) is a snapshot: it has no end to miss
        key = next((k for k in ("train_iters", "config.train_iters", "max_steps") if ctx.run.meta.get(k)), "max_steps")
        total = ctx.run.meta.get(key)
        last = ctx.last_step
        if not isinstance(total, (int, float)) or last is None or _completed(ctx):
            return []
        fatal = ctx.events(EventKind.OOM, EventKind.NCCL_TIMEOUT, EventKind.TRACEBACK, EventKind.SIGNAL,
                           EventKind.HOST_OOM, EventKind.ELASTIC_FAILURE, EventKind.LOSS_SCALE_MIN, EventKind.XID,
                           EventKind.ECC, EventKind.GPU_LOST, EventKind.DISTRIBUTED_ERROR)
        if fatal or last >= self.p.done_frac * total:
            return []
        loss = ctx.series("loss")
        n = len(loss) if loss is not None else 0
        sev = "low" if n >= self.p.min_points else "info"
        h = self.hit(f"the log stops at step {last} of {int(total)} without a completion marker or an error "
                     "(hang or external kill, or the log is an excerpt)", 0.35, first_bad_step=last, last_step=last,
                     severity=sev, data={"train_iters": int(total)})
        # the series that logged the last step (the loss when it did), quoting the plan it falls short of
        at_end = [x for x in (loss, *ctx.run.series.values()) if x is not None and len(x) and int(x.steps[-1]) == last]
        if at_end:
            h.point("last", at_end[0], len(at_end[0]) - 1,
                    f"last logged step; the run's configuration plans {int(total)} steps ({key})")
        return [h]


_NAME_WORDS_RE = re.compile(r"[\s()_/]+")  # "time (ms)", "step_time_ms", "ms/it"


def _to_seconds(name: str) -> float:
    """Step-time unit from the metric name: ``(ms)``, ``_ms``, ``ms``, ``ms/it`` -> milliseconds, else seconds."""
    return 1e-3 if "ms" in _NAME_WORDS_RE.split(name.lower()) else 1.0


def _first_slow(v: np.ndarray, start: int, thr: float, ahead: int = 5) -> int:
    seg = v[start:]
    k = min(ahead, seg.size)
    if k == 0:
        return -1
    padded = np.append(seg > thr, np.repeat(seg[-1] > thr, k - 1))
    share = np.lib.stride_tricks.sliding_window_view(padded, k).mean(axis=1)  # slow share of the next k points
    idx = np.flatnonzero((seg > thr) & (share >= 0.8))
    return start + int(idx[0]) if idx.size else -1


# rates in iterations (steps) per second: their inverse is the step time in seconds (tqdm's "it/s",
# HF's train_steps_per_second)
_TQDM_RATES = frozenset({"it_s", "s_it"})  # a progress bar's speed ("541.72it/s", "1.24s/it")
_PER_ITERATION = frozenset({"it_s", "it_sec", "iter_s", "its_s", "steps_s", "steps_per_second",
                            "train_steps_per_second"})


def _time_series(ctx: Context) -> tuple[Series | None, bool]:
    """Step time (higher is worse), or a throughput series (higher is better), or the step time a
    clock running through the run gives."""
    s = ctx.series("step_time", finite=True)
    if s is not None and len(s):
        return s, True
    s = ctx.series("throughput", finite=True)
    if s is not None and len(s):
        return s, False
    return _clock_step_time(ctx), True


def _clock_step_time(ctx: Context, min_points: int = 4) -> Series | None:
    """The time per step of a clock that runs through the run (``elapsed_clock``): its increments over
    the steps between two logged points, a reset dropped; a running average ("step_avg") is no clock."""
    for name, s in ctx.run.series.items():
        n = norm(name)
        if "@rank" in name or not ("time" in n or "elapsed" in n) or any(w in n for w in ("avg", "per", "data", "eta")):
            continue
        if not elapsed_clock(s, min_points):
            continue
        f = s.finite()
        f = f.take((f.values > 0) & (f.steps > 0))
        dv, ds = np.diff(f.values), np.diff(f.steps)
        ok = (ds > 0) & (dv > 0)
        i = np.flatnonzero(ok) + 1
        return Series(f"{name} per step", f.steps[i], dv[ok] / ds[ok], f.lines[i], f.src[i])
    return None


class ThroughputRegression(Rule):
    """Detects a throughput regression: step time (or tokens/samples per second) that worsens
    from some step on and stays worse, found as the best single change point of the log step
    time after warm-up (rolling median first, so eval pauses and one-off slow steps do not move
    it).

    Why: a sustained slowdown means something changed mid-run: thermal throttling, a slow node,
    a data pipeline that ran out of cached data, host memory pressure, a background process.

    Fix: compare the nodes / GPUs (nvidia-smi clocks, dmesg), the data source, and the step at
    which it started against other logs (checkpointing, evaluation, dataset epoch boundary).

    Example: ``elapsed time per iteration (ms)`` 410, 405, 412 ... then 820, 815, 830 from 3000.

    A short paste (``short_points`` to ``min_points`` points) counts only with a clean break: every
    point from some step on at least ``short_ratio`` times worse than every point before it (at
    least 3 points before, 2 after). Fewer points (an epoch-level log of two or three epochs)
    count only for a break of ``tiny_ratio`` or more ("60/60 [00:37, 1.61it/s]" then
    "60/60 [06:06, 6.11s/it]" for epochs of the same size), with a low confidence. So does a short
    paste (3 points or more) worse at every point, ``climb_ratio`` times from first to last, when the
    series is a rate or its name says it is per iteration, step or batch (a bare "time" may be a
    clock running through the epoch). A break starts a point earlier where that point is already the
    square root of the ratio asked for worse than every point before it: a mean over an interval that
    holds the break stands between the two levels.

    Without a step time or a throughput, a clock that runs through the run (``train_time``: the
    time since the start) gives one: its increments over the steps between two logged points.

    Thresholds: ``ratio`` slowdown (1.2; ``bar_ratio``, 1.5, for a progress bar's rate, a moving
    average that evaluation pauses pull around), ``warmup_frac`` points ignored at the start (0.05),
    ``consistency`` fraction of points after the change that are slower (0.7), ``min_delta_s``
    smallest step-time increase that matters, in seconds (0.002; the unit is read from the name:
    ``(ms)``/``_ms`` means milliseconds, otherwise seconds; a rate in iterations per second such as
    tqdm's ``it/s`` is a step time once inverted), ``min_points`` (12),
    ``short_points`` (5), ``short_ratio`` (1.5), ``tiny_ratio`` (5), ``climb_ratio`` (2).
    """

    id = "TA406"
    name = "throughput-regression"
    category = Category.THROUGHPUT_REGRESSION
    severity = Severity.MEDIUM
    also = (Severity.HIGH,)
    guidance = Guidance(
        fix="Compare nodes and GPUs around the step where it slowed (clocks, thermals, dmesg, other processes), the "
            "data source, and any checkpoint or eval activity starting there.",
        impact="Step time back to its level before the change.",
        verify="Re-run and compare the median step time before and after the same step.")

    class Params(Thresholds):
        ratio: float = 1.2
        warmup_frac: float = 0.05
        consistency: float = 0.7
        min_points: int = 12
        min_delta_s: float = 0.002
        short_points: int = 5
        short_ratio: float = 1.5
        tiny_ratio: float = 5.0
        climb_ratio: float = 2.0
        bar_ratio: float = 1.5

    grid: ClassVar[Grid] = {"ratio": (1.1, 1.2, 1.3, 1.5), "short_ratio": (1.2, 1.5, 2.0), "min_points": (8, 12, 16, 24),
                              "short_points": (3, 4, 5, 6), "climb_ratio": (1.5, 2.0, 3.0),
                              "bar_ratio": (1.2, 1.5, 2.0)}

    def check(self, ctx: Context) -> list[Hit]:
        s, time_like = _time_series(ctx)
        if s is None or len(s) < 2:
            return []
        if len(s) < self.p.short_points:
            return self._short(s, time_like, tiny=True)
        if len(s) < self.p.min_points:
            return self._short(s, time_like)
        return self._long(s, time_like) or self._short(s, time_like)

    def _long(self, s: Series, time_like: bool) -> list[Hit]:
        v = s.values if time_like else np.where(s.values > 0, 1.0 / np.maximum(s.values, 1e-300), np.nan)
        ok = np.isfinite(v) & (v > 0)
        if not ok.all():
            s = s.take(ok)
            v = v[ok]
        # warm-up: 3 points of a step-level log; 1 of a short (epoch-level) one, where the third point
        # may already be the change
        skip = max(3 if len(v) >= 50 else 1, int(len(v) * self.p.warmup_frac))
        st, x = downsample(s.steps[skip:], v[skip:], 4000)
        sm = rolling_median(x, 5 if x.size >= 25 else 3)
        k, _ = change_point(np.log(sm), min_seg=max(3, x.size // 20))
        if k < 0:
            return []
        before = float(np.median(x[:k]))
        after = float(np.median(x[k:]))
        r = after / before
        # tqdm's rate is a moving average that eval pauses and slow batches pull around: from bar_ratio
        if r < (self.p.bar_ratio if norm(s.name) in _TQDM_RATES else self.p.ratio):
            return []
        # sub-millisecond "regressions" are OS scheduling noise of a busy host, not training
        seconds = _to_seconds(s.name) if time_like else 1.0 if norm(s.name) in _PER_ITERATION else None
        if seconds is not None and (after - before) * seconds < self.p.min_delta_s:
            return []
        thr = before * math.sqrt(r)
        if float(np.mean(x[k:] > thr)) < self.p.consistency:
            return []
        # first raw point near the change from which the following points are slow too
        i0 = int(np.searchsorted(s.steps, st[max(0, k - 3)]))
        i = _first_slow(v, i0, thr)
        if i < 0:
            i = int(np.searchsorted(s.steps, st[k]))
        j_before = int(np.searchsorted(s.steps, st[k])) - 1
        # the message gives the medians of the points it cites (up to 21 on each side of the change)
        cited_before = np.arange(max(skip, j_before - 20), j_before + 1)
        cited_after = np.arange(max(i, len(s) - 21), len(s))
        mb, ma = float(np.median(s.values[cited_before])), float(np.median(s.values[cited_after]))
        msg = (f"{s.name} worsens {ma / mb:.2f}x from step {int(s.steps[i])} (median {mb:.4g} -> {ma:.4g})"
               if time_like else
               f"{s.name} drops to {ma / mb:.0%} of its level from step {int(s.steps[i])} (median {mb:.4g} -> {ma:.4g})")
        h = self.hit(msg, min(0.9, 0.5 + (r - 1)), metric=s.name, first_bad_step=int(s.steps[i]), last_step=int(s.steps[-1]),
                     severity="high" if r >= 2 else "medium", data={"ratio": r})
        h.point("before", s, j_before, f"{s.name} before the change", indices=cited_before)
        h.point("after", s, len(s) - 1, f"{s.name} after the change", indices=cited_after)
        if time_like:
            h.calc("slowdown", "step time after over before (medians)", "median({after}) / median({before})", unit="x")
        else:
            h.calc("slowdown", "throughput before over after (medians)", "median({before}) / median({after})", unit="x")
        return [h]

    def _short(self, s: Series, time_like: bool, tiny: bool = False) -> list[Hit]:
        if _printed_out_of_step_order(s):
            return []  # two runs pasted side by side (a later line with an earlier step): no before and after
        v = s.values
        ok = v > 0
        if not ok.all():
            s, v = s.take(ok), v[ok]
        bad = v if time_like else 1.0 / v
        found = _clean_break(bad, self.p.tiny_ratio, before=1, after=1) if tiny else \
            _clean_break(bad, self.p.short_ratio)
        what = "slows down" if time_like else "drops"
        # worse at every logged point, ``climb_ratio`` times in all: a slowdown that grows step after
        # step (warm-up goes the other way: the first steps are the slow ones). A bare "time" may be a
        # clock that runs through the epoch (TFLearn's "time: 5.079s"), which grows at every point.
        per_step = not time_like or any(w in s.name.lower() for w in ("iter", "step", "batch", "/it"))
        climbing = found is None and per_step and bad.size >= 3 and monotone_tail(bad, +1) == bad.size - 1 \
            and float(bad[-1]) >= self.p.climb_ratio * float(bad[0])
        if climbing:
            found = (1, float(bad[-1]) / float(bad[0]))
        if found is None:
            return []
        k, r = found
        least = self.p.tiny_ratio if tiny else self.p.short_ratio
        if not climbing and k >= 2 and float(bad[k - 1]) >= math.sqrt(least) * float(np.max(bad[:k - 1])):
            k -= 1  # the point before stands between the two levels: a logged mean over an interval that holds the break
        msg = (f"{s.name} {what} {r:.2f}x or more from step {int(s.steps[k])}: every later point is worse than every "
               f"earlier one ({float(np.median(v[:k])):.4g} -> {float(np.median(v[k:])):.4g}, few points logged)")
        if climbing:
            msg = (f"{s.name} {what} at every one of its {len(v)} logged points, {float(v[0]):.4g} -> {float(v[-1]):.4g} "
                   f"({r:.2f}x; few points logged)")
        h = self.hit(msg, 0.5 if tiny else 0.65, metric=s.name, first_bad_step=int(s.steps[k]),
                     last_step=int(s.steps[-1]), severity="high" if r >= 2 else "medium", data={"ratio": r},
                     needs=[f"more points of {s.name}: {len(s)} logged"] if tiny else [])
        h.point("before", s, k - 1, f"{s.name} before the break", indices=np.arange(0, k))
        h.point("after", s, len(s) - 1, f"{s.name} from the break", indices=np.arange(k, len(s)))
        if time_like:
            h.calc("slowdown", "step time after over before (medians)", "median({after}) / median({before})", unit="x")
        else:
            h.calc("slowdown", "throughput before over after (medians)", "median({before}) / median({after})", unit="x")
        return [h]


def _printed_out_of_step_order(s: Series) -> bool:
    """Points of one file printed in another order than their steps: a later line with an earlier
    step, as when two runs are pasted one under the other to compare them."""
    lines = s.lines[(s.src == s.src[0]) & (s.lines > 0)]
    return bool(np.any(np.diff(lines) < 0))


def _clean_break(bad: np.ndarray, ratio: float, before: int = 3, after: int = 2) -> tuple[int, float] | None:
    """The first index k (``before`` <= k <= n - ``after``) from which every value of ``bad``
    (higher is worse) is at least ``ratio`` times every value before it, with that smallest ratio;
    None without one."""
    n = bad.size
    if n - after < before:
        return None
    # every k at once: the running maximum before k and the minimum from k on
    worst_before = np.maximum.accumulate(bad)[before - 1:n - after]
    best_after = np.minimum.accumulate(bad[::-1])[::-1][before:n - after + 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = best_after / worst_before
    hit = np.flatnonzero((worst_before > 0) & (r >= ratio))
    if hit.size == 0:
        return None
    j = int(hit[0])
    return before + j, float(r[j])


def _aligned(per: dict[str, Series]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Steps logged by every rank, and each series' index (first occurrence) at those steps."""
    firsts = {}
    for k, s in per.items():
        u, i = np.unique(s.steps, return_index=True)
        firsts[k] = (u, i)
    common = firsts[next(iter(firsts))][0]
    for u, _ in firsts.values():
        common = np.intersect1d(common, u)
    return common, {k: i[np.searchsorted(u, common)] for k, (u, i) in firsts.items()}


def _rank_of(name: str, per: dict[str, Series], meta: dict) -> int | None:
    """The rank of one per-rank series. The first rank seen keeps the plain name and the ingest
    sink records it as ``rank_of.<name>``; for runs built otherwise, with the usual contiguous
    ranks 0..N-1, it is the one number the ``@rank`` copies lack."""
    _, sep, r = name.partition("@rank")
    if sep:
        return int(r) if r.isdigit() else None
    if isinstance(meta.get(f"rank_of.{name}"), int):
        return int(meta[f"rank_of.{name}"])
    seen = {int(k.partition("@rank")[2]) for k in per if k.partition("@rank")[2].isdigit()}
    missing = sorted(set(range(len(per))) - seen)
    return missing[0] if len(missing) == 1 else None


class StragglerRank(Rule):
    """Detects a straggler: one rank's own time per step consistently slower than the other
    ranks' from some step on (per-rank series ``<time>@rank<r>``, from launcher prefixes such as
    ``[rank1]:`` or ``[default1]:``). Every per-rank time series is checked: with synchronous
    data parallelism the collective makes the total step time equal on all ranks, so the
    straggler shows in the rank-local part (compute, data loading), when the log has it.

    Why: synchronous training runs at the speed of the slowest rank.

    Fix: check that GPU / node (clocks, thermal, PCIe/NVLink errors, other processes), its data
    shard, and CPU affinity.

    Example: ``compute_time@rank3`` 0.61 s from step 1200 while ranks 0-2 and 4-7 take 0.42 s.

    Thresholds: ``ratio`` a rank's time over the median of the other ranks at the same step
    (1.2), ``min_points`` slow steps (10), ``min_delta_s`` smallest extra time that matters, in
    seconds (0.002; ``(ms)``/``_ms`` in the name means milliseconds).
    """

    id = "TA407"
    name = "straggler-rank"
    category = Category.THROUGHPUT_REGRESSION
    severity = Severity.MEDIUM
    guidance = Guidance(
        fix="Look at the slow rank's node: GPU clocks and thermals, PCIe/NVLink errors, other processes, its data "
            "shard; drain it if it stays slow.",
        impact="Every rank takes about the same time per step.",
        verify="Re-run and compare per-rank step times.")

    class Params(Thresholds):
        ratio: float = 1.2
        min_points: int = 10
        min_delta_s: float = 0.002

    def _families(self, ctx: Context) -> dict[str, dict[str, Series]]:
        base_role = ctx.roles.names.get("step_time")
        fams: dict[str, dict[str, Series]] = {}
        for name, s in ctx.run.series.items():
            base, sep, _ = name.partition("@rank")
            if not sep or base not in ctx.run.series:
                continue
            n = base.lower()
            if base != base_role and ("time" not in n or "stamp" in n):
                continue
            fams.setdefault(base, {base: ctx.run.series[base].finite()})[name] = s.finite()
        return fams

    def check(self, ctx: Context) -> list[Hit]:
        best: tuple[int, Hit] | None = None
        for base, per in self._families(ctx).items():
            per = {k: v for k, v in per.items() if len(v) >= self.p.min_points}
            if len(per) < 2:
                continue
            steps, idx = _aligned(per)
            if steps.size < self.p.min_points:
                continue
            vals = {k: per[k].values[i] for k, i in idx.items()}
            unit = _to_seconds(base)
            names = list(vals)
            matrix = np.stack([vals[k] for k in names])
            others_of = median_of_others(matrix)
            for row, cand in enumerate(names):
                others = others_of[row]
                mine = vals[cand]
                # slower by the ratio AND by real time: sub-ms differences are OS scheduling noise
                slow = (mine >= self.p.ratio * others) & ((mine - others) * unit >= self.p.min_delta_s)
                j = first_sustained(slow, 0.8, self.p.min_points)
                if j < 0:
                    continue
                # The onset is the best change point of the slow/not-slow sequence from there (the
                # start k maximising slow minus not-slow steps after it), so a lone scheduling hiccup
                # a few steps before the real onset does not pull the first bad step earlier.
                gain = np.cumsum((2 * slow[j:].astype(np.int64) - 1)[::-1])[::-1]
                j += int(np.argmax(gain))
                n_slow = int(slow[j:].sum())
                if best is not None and n_slow <= best[0]:
                    continue
                r = float(np.median(mine[j:]) / np.median(others[j:]))
                other = next(k for k in per if k != cand)
                rank = _rank_of(cand, per, ctx.run.meta)
                who = f"rank {rank} ({cand})" if rank is not None else cand
                msg = (f"{who} is {r:.2f}x slower than the median of the other ranks from step {int(steps[j])} "
                       f"({n_slow} of the {steps.size - j} steps from there)")
                h = self.hit(msg, 0.75, metric=cand, first_bad_step=int(steps[j]), last_step=int(steps[-1]),
                             data={"ratio": r, "base": base, "ranks": len(per), "rank": rank})
                h.point("slow", per[cand], int(idx[cand][-1]), f"{cand} from the first slow step",
                        indices=idx[cand][j:])
                h.point("other", per[other], int(idx[other][-1]), f"{other} at the same steps",
                        indices=idx[other][j:])
                h.calc("ratio", "slow rank over another rank (median time at the same steps)",
                       "median({slow}) / median({other})", unit="x")
                best = (n_slow, h)
        return [best[1]] if best else []


def median_of_others(m: np.ndarray) -> np.ndarray:
    """Row r: the per-column median of every row but r, for all rows at once in O(R log R) per
    column (a median over the other rows for each row is quadratic in the rows: 16 000 ranks)."""
    n = m.shape[0]
    order = np.argsort(m, axis=0, kind="stable")
    srt = np.take_along_axis(m, order, axis=0)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n)[:, None].repeat(m.shape[1], axis=1), axis=0)
    k = n - 1  # how many values remain without row r

    def remaining(i: int) -> np.ndarray:  # the i-th smallest of the others: skip r's own slot
        idx = i + (pos <= i)
        return np.take_along_axis(srt, np.minimum(idx, n - 1), axis=0)

    if k % 2:
        return remaining(k // 2)
    return 0.5 * (remaining(k // 2 - 1) + remaining(k // 2))


# A DataLoader hands out batches to its workers in turn, so workers that cannot keep up stall the loop
# once every num_workers batches (https://pytorch.org/docs/stable/data.html#multi-process-data-loading);
# a slow step once every few hundred iterations is a pause of another kind (the first batch of an epoch
# while the workers start, an evaluation, a checkpoint), not a pipeline that falls behind
MAX_WORKER_PERIOD = 64


def _sparse_pauses(steps: np.ndarray) -> bool:
    """Whether slow steps at these ``steps`` (in order) come once every MAX_WORKER_PERIOD steps or fewer."""
    return steps.size >= 2 and float(np.median(np.diff(steps))) > MAX_WORKER_PERIOD


class DataLoaderStall(Rule):
    """Detects data-loader stalls: frequent, periodic slow steps (more than ``slow_factor`` times
    the median step time, on ``min_frac``..``max_frac`` of the steps, at a regular period).
    Evaluation / checkpoint pauses are rarer than ``min_frac`` and are not reported, nor are slow
    steps more than ``MAX_WORKER_PERIOD`` steps apart (a sparse log's first batch of each epoch).

    Why: the GPU waits for data every few steps: too few workers, slow storage, heavy
    augmentation on the main process.

    Fix: more ``num_workers``, ``pin_memory``, ``persistent_workers``, prefetching, faster
    storage or cached/preprocessed data.

    Example: step time 0.12, 0.11, 0.12, 0.95, 0.12, 0.11, 0.12, 0.97 (every 4th step: 4 workers).

    Thresholds: ``slow_factor`` (3), ``min_frac`` (0.05), ``max_frac`` (0.5), ``periodic``
    share of gaps equal to the most common gap (0.7), ``min_stall_s`` extra seconds a slow step
    must take (0.01; unit from the name, ``(ms)``/``_ms`` = milliseconds).
    """

    id = "TA408"
    name = "data-loader-stall"
    category = Category.DATA_PIPELINE
    severity = Severity.LOW
    guidance = Guidance(
        fix="Increase DataLoader num_workers, enable pin_memory and persistent_workers, prefetch, or "
            "preprocess/cache the data on fast storage.",
        impact="No periodic slow steps; higher throughput.",
        verify="Log step time and data-wait time; the periodic slow steps disappear.")

    class Params(Thresholds):
        slow_factor: float = 3.0
        min_frac: float = 0.05
        max_frac: float = 0.5
        periodic: float = 0.7
        min_points: int = 20
        min_stall_s: float = 0.01

    grid: ClassVar[Grid] = {"slow_factor": (2.0, 3.0, 5.0)}

    def check(self, ctx: Context) -> list[Hit]:
        s = ctx.series("step_time", finite=True, min_points=self.p.min_points)
        if s is None:
            return []
        skip = max(2, len(s) // 20)
        x = s.values[skip:]
        med = float(np.median(x))
        if med <= 0:
            return []
        # a stall must cost real time too: sub-10 ms hiccups of a toy run are logging/GC noise
        floor = med + self.p.min_stall_s / _to_seconds(s.name)
        slow = np.flatnonzero((x > self.p.slow_factor * med) & (x > floor))
        frac = slow.size / x.size
        if not (self.p.min_frac <= frac <= self.p.max_frac) or slow.size < 4:
            return []
        gaps = np.diff(slow)
        vals, counts = np.unique(gaps, return_counts=True)
        g = int(vals[np.argmax(counts)])
        # exact period: OS jitter on a busy machine also makes slow steps, but at random gaps
        share = float(np.max(counts)) / gaps.size
        if g < 2 or share < self.p.periodic or _sparse_pauses(s.steps[skip + slow]):
            return []
        i = skip + int(slow[0])
        h = self.hit(f"{frac:.0%} of the steps are over {self.p.slow_factor:g}x the median step time, about every {g} "
                     f"logged steps: the input pipeline stalls", 0.65, metric=s.name, first_bad_step=int(s.steps[i]),
                     last_step=int(s.steps[skip + int(slow[-1])]), data={"period": g})
        lo = max(skip, i - g)
        h.point("window", s, i, f"{s.name} around the first stall", indices=np.arange(lo, min(len(s), i + 2 * g + 1)))
        h.point("typical", s, len(s) - 1, f"{s.name} after warm-up", indices=np.arange(skip, len(s)))
        h.calc("stall", "slowest step near the first stall over the median step time", "max({window}) / median({typical})",
               unit="x")
        return [h]


# the step as printed when it is the first batch of an epoch ("epoch 1, batch 0")
_FIRST_BATCH_RE = re.compile(r"\bbatch 0$")


class DataWaitDominates(Rule):
    """Detects steps that spend most of their time waiting for data: the logged data-loading time
    (``data_time``, ``Data``, ``data_wait``) is ``share`` or more of the step time on at least
    ``min_frac`` of the logged steps (at least ``min_hits`` of them), as mmengine, detectron2 and the
    PyTorch ImageNet example print both. Single waiting steps between steps that do not wait, more
    than ``MAX_WORKER_PERIOD`` steps apart, are pauses (the first batch of each epoch) and do not count;
    nor does a step the log prints as the first batch of an epoch (batch 0), however close to the next.

    Why: the accelerator idles while the input pipeline works; more compute does not help.

    Fix: more DataLoader workers, pin_memory and persistent workers, faster storage or cached /
    preprocessed data, lighter augmentation on the CPU, DALI / GPU decoding.

    Example: ``time: 2.013, data_time: 1.655`` (82% of the iteration is data loading).

    Thresholds: ``share`` (0.5), ``min_frac`` (0.3), ``min_hits`` (2).
    """

    id = "TA411"
    name = "data-wait-dominates"
    category = Category.DATA_PIPELINE
    severity = Severity.MEDIUM
    explains = frozenset({Category.THROUGHPUT_REGRESSION})  # slow steps that wait for data
    guidance = Guidance(
        fix="Increase DataLoader num_workers, enable pin_memory and persistent_workers, cache or preprocess the data "
            "on fast storage, or move decoding and augmentation to the GPU.",
        impact="Data-loading time a small share of each step; higher throughput.",
        verify="Log data time and step time; data time stays well under half of the step time.")

    class Params(Thresholds):
        share: float = 0.5
        min_frac: float = 0.3
        min_hits: int = 2

    grid: ClassVar[Grid] = {"share": (0.3, 0.4, 0.5, 0.6, 0.7)}

    def check(self, ctx: Context) -> list[Hit]:
        d = ctx.series("data_time", finite=True, min_points=self.p.min_hits)
        t = ctx.series("step_time", finite=True, min_points=self.p.min_hits)
        if d is None or t is None:
            return []
        steps, di, ti = np.intersect1d(d.steps, t.steps, return_indices=True)
        # the first batch of an epoch waits while the DataLoader starts its workers (unless they persist,
        # https://pytorch.org/docs/stable/data.html): a pause, whatever share of that step it takes
        texts = ctx.run.meta.get("step_text", {})
        keep = np.array([not _FIRST_BATCH_RE.search(str(texts.get(int(s), ""))) for s in steps], dtype=bool)
        steps, di, ti = steps[keep], di[keep], ti[keep]
        if steps.size < self.p.min_hits:
            return []
        dv, tv = d.values[di], t.values[ti]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # 1e300 / 1e-300
            share = np.where(tv > 0, dv / tv, 0.0)
        hits = np.flatnonzero((share >= self.p.share) & (share <= 1.05))  # a data time above the step time is another clock
        if hits.size < self.p.min_hits or hits.size / steps.size < self.p.min_frac:
            return []
        # single logged steps that wait, with steps that do not around each, far apart: a pause (the first
        # batch of each epoch while the workers start), not steps that wait for data
        high = np.zeros(steps.size + 2, dtype=bool)
        high[1:-1] = share >= self.p.share
        if not np.any(high[hits] | high[hits + 2]) and _sparse_pauses(steps[hits]):
            return []
        i = int(hits[0])
        # the share the evidence shows (the first such step); the count says it is not a one-off
        msg = (f"{d.name} is {float(share[i]):.0%} of {t.name} at step {int(steps[i])}, and a large share on "
               f"{hits.size} of {steps.size} logged steps from there: the steps wait for data")
        h = self.hit(msg, 0.75, metric=d.name, first_bad_step=int(steps[i]), last_step=int(steps[hits[-1]]))
        h.point("data", d, int(di[i]), f"{d.name} at step {int(steps[i])}")
        h.point("step", t, int(ti[i]), f"{t.name} at step {int(steps[i])}")
        h.calc("share", "share of the step spent waiting for data", "{data} / {step}", unit="ratio")
        return [h]


class HardwareFault(Rule):
    """Detects GPU hardware faults: NVIDIA Xid errors, ECC errors, a GPU fallen off the bus.

    Why: no code change fixes these; the node needs draining / a reset, and retrying on the
    same node fails again.

    Fix: drain the node, report the Xid/ECC to the cluster team, resume from the last
    checkpoint elsewhere; Xid 79/74/48/94/95 are hardware, Xid 13/31/43 often software.

    Example: ``NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, ... CTX SWITCH TIMEOUT``.
    """

    id = "TA409"
    name = "hardware-fault"
    category = Category.HARDWARE_FAULT
    severity = Severity.CRITICAL
    guidance = Guidance(
        fix="Drain the node and report the Xid/ECC error; resume from the last checkpoint on healthy hardware.",
        impact="The run proceeds without the fault on other hardware.",
        verify="Check dmesg / nvidia-smi -q on the node; the re-run on other nodes passes the failing step.")

    def check(self, ctx: Context) -> list[Hit]:
        evs = ctx.events(EventKind.XID, EventKind.ECC, EventKind.GPU_LOST)
        if not evs:
            return []
        e = evs[0]
        h = self.hit(f"GPU hardware fault: {e.message}", 0.9, first_bad_step=ctx.step_of(e), last_step=ctx.step_of(evs[-1]), fatal=True,
                     data={"rank": e.rank, "n": len(evs)})
        h.ev("hw", e, f"{e.kind.value} message")
        return [h]


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_LIB = ("site-packages", "dist-packages", "/lib/python", "<frozen", "/torch/", "\\lib\\")


def _explained(e: Event) -> bool:
    """A traceback whose exception is a known message of another kind (a framework's NaN stop, a
    data-loader timeout): that kind's rule reports it, it is not a crash."""
    known = catalogue.match(e.message)
    return known is not None and known.category not in (None, Category.CRASH)


def _follows(tb: Event, known: list[Event], lines: int = 40) -> bool:
    """The traceback comes right after a known fatal message of another kind in the same file (a
    data-loader timeout logged, then the traceback it raises)."""
    return any(k.source == tb.source and 0 <= tb.line - k.line <= lines for k in known)


def _joining(ctx: Context, tb: Event, lines: int = 40) -> Event | None:
    """The store-barrier wait (init_process_group waiting for the other ranks) printed in the
    traceback's file within ``lines`` lines before it, if any: a cut traceback right after it is the
    process group failing to form."""
    start = tb.data.get("start_line")
    start = start if isinstance(start, int) else tb.line
    waits = [w for w in ctx.events(EventKind.WARNING) if w.data.get("known") == "store-barrier-wait"
             and w.source == tb.source and 0 <= start - w.line <= lines]
    return waits[-1] if waits else None


# the deepest frames of a traceback that died waiting for a DataLoader worker's batch
_WAITING_FOR_DATA = ("torch/utils/data/dataloader.py", "multiprocessing/queues.py", "multiprocessing/connection.py")


def _waiting_for_data(tb: Event) -> bool:
    """The traceback's deepest frames are the DataLoader's queue and poll: the process was waiting for a batch."""
    deepest = [str(f.get("file", "")).replace("\\", "/") for f in (tb.data.get("frames") or [])[-3:]]
    return bool(deepest) and all(any(w in f for w in _WAITING_FOR_DATA) for f in deepest)


def user_frames(e: Event) -> list[str]:
    frames: Any = e.data.get("frames")
    out: list[str] = []
    if isinstance(frames, list):
        for f in frames:
            text = f if isinstance(f, str) else f"{f.get('file', '')}:{f.get('line', '')} in {f.get('function', f.get('func', ''))}"
            out.append(text)
    else:
        out = [f"{m.group(1)}:{m.group(2)} in {m.group(3)}" for m in _FRAME_RE.finditer(e.raw)]
    return [f for f in out if not any(k in f for k in _LIB)]


# a traceback raised while the DataLoader fetched or collated a batch: its frames are the loader's fetch, a
# collate function or a dataset's __getitem__
_FETCHING = ("torch/utils/data/_utils/fetch.py", "torch/utils/data/_utils/collate.py", "data_collator.py")
# what such an exception says when one record does not fit the others or cannot be decoded: a tensor's
# view or stack over a record of the wrong length (torch's "shape '[64]' is invalid for input of size 10",
# "stack expects each tensor to be equal size"), a ragged list made a tensor ("expected sequence of length
# 32 at dim 1 (got 19)"), bytes cut short of a whole array (numpy.frombuffer's "buffer size must be a
# multiple of element size"), an image PIL cannot read ("cannot identify image file", "image file is truncated")
_BAD_RECORD = re.compile(r"is invalid for input of size \d|stack expects each tensor to be equal size|expected sequence "
                         r"of length \d+ at dim \d+ \(got \d+\)|buffer size must be a multiple of element size|"
                         r"cannot identify image file|image file is truncated")


def _bad_record(tb: Event) -> bool:
    """The batch the DataLoader fetched held a record that does not fit the others (or cannot be decoded):
    the data is at fault, not the code that reads it."""
    frames = [f"{f.get('file', '')}".replace("\\", "/") + f" {f.get('function', '')}"
              for f in (tb.data.get("frames") or []) if isinstance(f, dict)]
    fetching = any(any(k in f for k in _FETCHING) or f.endswith(" __getitem__") for f in frames)
    return fetching and _BAD_RECORD.search(tb.message) is not None


_STALLED_LOADER = Guidance(
    fix="Find what blocks the DataLoader workers: run with num_workers=0 to get the worker's own error, set a "
        "DataLoader timeout so a stuck worker raises instead of hanging, and check the dataset's __getitem__ for "
        "slow or blocking I/O (network storage, locks) and the workers for host-memory pressure.",
    impact="Batches keep arriving; the run passes the point where it hung.",
    verify="Re-run the same epoch with the DataLoader timeout set; no hang and no timeout error.")


_BAD_RECORD_GUIDANCE = Guidance(
    fix="Find the record: log the index in the dataset's __getitem__ (or the collator) when it raises, check that "
        "shard for truncated or corrupt samples (length, decoding), and re-export it or filter such records out "
        "before batching.",
    impact="Every batch is built; the run passes the step where the loader raised.",
    verify="Read the whole data set once through the same DataLoader and collate function (no training); no "
           "exception.")


# Ctrl-C's exception line, or several ranks' of them printed into one line ("KeyboardInterruptKeyboardInterrupt")
_INTERRUPTED = re.compile(r"(?:\s{0,8}KeyboardInterrupt){1,64}\s{0,8}")


class Crash(Rule):
    """Detects a crash: the last Python exception (with the frames that belong to user code,
    library frames dropped) or a fatal signal (SIGSEGV, SIGABRT, SIGBUS).

    Why: the run died; the last exception is usually the cause, earlier ones may be retries.

    Fix: read the exception and the deepest user frame; for signals, a native-library crash
    (mismatched CUDA/NCCL/driver versions, a bad custom kernel): run with
    ``CUDA_LAUNCH_BLOCKING=1`` and ``faulthandler``.

    A traceback cut before its exception line, printed right after torch.distributed's
    "Waiting in store based barrier" lines, died while the process group was forming: a
    distributed failure (a rank that never joined), not a crash of its own.

    A ``KeyboardInterrupt`` is a person stopping the run (Ctrl-C): it, the other ranks' tracebacks at
    the same step and whatever the launcher prints after it are not a crash, unless the process was
    waiting for a batch from the DataLoader when it was stopped (a stalled input pipeline).

    An exception raised while the DataLoader built a batch (its frames are the loader's fetch, a collate
    function or a dataset's ``__getitem__``) that says a record does not fit the others or cannot be
    decoded ("shape '[64]' is invalid for input of size 10", "expected sequence of length 32 at dim 1
    (got 19)") is a corrupt or truncated sample: a data pipeline failure.

    Example: ``RuntimeError: shape '[4, -1]' is invalid for input of size 30`` from
    ``train.py:88 in forward``.
    """

    id = "TA410"
    name = "crash"
    category = Category.CRASH
    severity = Severity.CRITICAL
    guidance = Guidance(
        fix="Fix the exception at the deepest user-code frame; for signals, check CUDA/NCCL/driver versions and run "
            "with CUDA_LAUNCH_BLOCKING=1 and faulthandler enabled.",
        impact="The run passes the step where it crashed.",
        verify="Re-run to the same step; no traceback.")

    def check(self, ctx: Context) -> list[Hit]:
        # the fp16 scaler giving up and a framework's NaN stop are not crashes: TA104 and TA101 report them
        known = [e for e in ctx.events(EventKind.ERROR) if e.data.get("fatal") and e.data.get("category") not in
                 (None, Category.CRASH)]
        # a reference check's message printed on the lines under its exception (numpy.testing's
        # "AssertionError:" then "Not equal to tolerance ...") is that check failing: TA805 reports it
        checks = ctx.events(EventKind.GATE)
        tbs = [e for e in ctx.events(EventKind.TRACEBACK) if not MIN_SCALE_RE.search(e.message + " " + e.raw)
               and not _explained(e) and not _follows(e, known)
               and not any(g.source == e.source and 0 < g.line - e.line <= 3 for g in checks)]
        sigs = [e for e in ctx.events(EventKind.SIGNAL) if e.data.get("signal") != 9]  # SIGKILL: host OOM (TA402)
        fatal = [e for e in ctx.events(EventKind.ERROR) if e.data.get("fatal") and e not in known]
        stop = next((e for e in tbs if _INTERRUPTED.fullmatch(e.message) and not _waiting_for_data(e)), None)
        if stop is not None:
            # Ctrl-C: a person stopped the run. The other ranks' tracebacks of the same shutdown and what
            # the launcher prints while it kills them are its echo, not a crash (a stop that waited on the
            # DataLoader is kept: that is a stalled input pipeline)
            at = ctx.step_of(stop)
            tbs, sigs, fatal = ([e for e in evs if e.source != stop.source or (e.line < stop.line and ctx.step_of(e) != at)]
                                for evs in (tbs, sigs, fatal))
        if not tbs and not sigs and not fatal:
            return []
        e = tbs[-1] if tbs else sigs[0] if sigs else fatal[0]
        frames = user_frames(e) if tbs else []
        msg = f"the run crashed: {e.message}"
        if frames:
            msg += f" (in user code at {frames[-1]})"
        waiting = bool(tbs) and _waiting_for_data(e)
        if waiting:
            msg = ("the run died waiting for a batch from the DataLoader (the deepest frames are the loader's queue "
                   "and poll): the input pipeline stalled")
        joining = _joining(ctx, e) if tbs and e.data.get("incomplete") else None
        if joining is not None:
            msg = ("the run died while init_process_group waited for the other ranks to join (the traceback is cut "
                   "before its exception): a rank did not start, or died at start-up")
        record = bool(tbs) and not waiting and _bad_record(e)
        if record:
            msg += ("; it was raised while the DataLoader built a batch, over a record that does not fit the others: "
                    "a corrupt or truncated sample in the data")
        category = (Category.DATA_PIPELINE if waiting or record else Category.DISTRIBUTED_FAILURE if joining
                    else self.category)
        # a traceback cut before its exception says the run died, not of what: the exception may be an OOM,
        # a NaN check or a failed reference check as well as a bug
        cut = bool(tbs) and bool(e.data.get("incomplete")) and not waiting and joining is None
        needs = [] if frames else ["the full stderr with the Python traceback"]
        if cut:
            needs.append("the end of the traceback: its exception line names what killed the run")
        h = self.hit(msg, 0.5 if cut else 0.85 if joining is None else 0.7, first_bad_step=ctx.step_of(e),
                     last_step=ctx.step_of(e), fatal=True, category=category,
                     guidance=_STALLED_LOADER if waiting else _BAD_RECORD_GUIDANCE if record else
                     DISTRIBUTED_GUIDANCE if joining else None,
                     data={"user_frames": frames[-5:], "rank": e.rank, "exception": e.data.get("exception")},
                     needs=needs)
        h.ev("exc", e, "last exception" if tbs else "fatal signal" if sigs else "fatal error")
        if joining is not None:
            h.ev("joining", joining, "the last wait for the other ranks before the traceback")
        return [h]


