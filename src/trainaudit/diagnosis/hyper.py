"""Name the logged learning rate when it explains a numeric or not-learning story.

The rules say what happened (a divergence, a NaN, exploding gradients, a flat loss); this module
says whether the learning rate the run logged explains it, and then the story's root cause names
it with its value, its step and the line it was read from:

- a jump: the lr-jump rule's finding is the story's cause (a schedule restart, a resumed run with
  another lr);
- too high: the lr at the first bad step is far above what the optimizer trains with (Adam: ten
  times its default; SGD: above what the linear scaling rule gives at any batch);
- warm-up: the first bad step comes while a warm-up raises the lr, or right after it reached its
  peak, and that peak is at or above the usual value for the optimizer;
- too low: a flat loss under an lr a thousand times below Adam's default (a mistyped exponent);
- zero: a flat loss under an lr of 0 (the lr-zero rule's finding), said with its step and line;
- a batch size cut to half or less just before a blow-up, the lr left as it was.

Usual values, from the libraries' own defaults: Adam's default lr is 1e-3 (Kingma & Ba,
https://arxiv.org/abs/1412.6980, section 2; torch.optim.Adam,
https://docs.pytorch.org/docs/stable/generated/torch.optim.Adam.html), the HF Trainer trains with
AdamW at 5e-5 by default (https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments),
SGD with momentum on ImageNet starts at 0.1 for a batch of 256 (Goyal et al.,
https://arxiv.org/abs/1706.02677; https://github.com/pytorch/examples/blob/main/imagenet/main.py).
When the optimizer is unknown, the larger (SGD's) is taken, so only an lr that is too high for
any optimizer is named.

This runs after the rules and the fitted decision have looked at the run: it changes what a root
cause says and cites, never which category is primary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainaudit.answer.paths import display_path
from trainaudit.answer.schema import Category
from trainaudit.diagnosis.engine import Story
from trainaudit.model import Run, Series, SourceKind
from trainaudit.rules.base import Context, PointRef
from trainaudit.series.roles import norm

# The story kinds whose cause a learning rate can be.
EXPLAINED = frozenset({Category.DIVERGENCE, Category.GRAD_EXPLOSION, Category.NAN_INF, Category.LOSS_SPIKE,
                       Category.LOSS_SCALE_COLLAPSE, Category.PLATEAU})
JUMP_RULE = "TA206"
ZERO_RULE = "TA207"
CAUSE = "likely cause: "  # how the engine introduces a cause in a story's issue
# Formats whose trainers use Adam(W) unless told otherwise: the HF Trainer (optim "adamw_torch"),
# Megatron-LM (--optimizer adam), nanoGPT and torchtitan (AdamW).
_ADAM_FORMATS = frozenset({"hf", "hf_trainer_state", "megatron", "nanogpt", "torchtitan"})


@dataclass(frozen=True, slots=True)
class Optimizer:
    name: str  # as the root cause says it
    usual: float  # a warm-up to this or more can be what blew the run up
    high: float  # an lr at or above this explains a blow-up on its own
    low: float  # an lr at or below this explains a flat loss
    fix: str  # what to set it to


# Adam: ten times its default is too high; below a tenth of a thousandth of it, too low (1e-6 itself is
# usual for preference and RL fine-tuning of large language models: the learning_rate default of TRL's
# DPOConfig, https://huggingface.co/docs/trl/dpo_trainer, and verl's actor lr,
# https://verl.readthedocs.io/en/latest/examples/config.html)
ADAM = Optimizer("Adam", 1e-3, 1e-2, 1e-7, "e.g. 3e-4 for Adam (its default is 1e-3; fine-tuning uses 1e-5 to 5e-5)")
# SGD: the linear scaling rule takes 0.1 at a batch of 256 up to 3.2 at a batch of 8k (Goyal et al.),
# so only 10 or more is too high whatever the batch.
SGD = Optimizer("SGD", 0.1, 10.0, 1e-4,
                "e.g. 0.1 or less for SGD with momentum at a batch of 256, scaled linearly with the batch")
# unknown: too high or too low for any of them
ANY = Optimizer("any optimizer", 0.1, 10.0, 1e-7, "e.g. 3e-4 for Adam or 0.1 for SGD with momentum")


@dataclass(slots=True)
class Named:
    """The learning rate as a story's cause: the sentence that names it, the fix it calls for, and
    the logged values it cites."""

    kind: str  # jump | too_high | warmup | too_low | zero | batch
    sentence: str
    fix: str
    points: list[PointRef] = field(default_factory=list)


def optimizer_of(run: Run, lr: Series) -> Optimizer:
    """The optimizer the lr belongs to: from the series' name (Lightning's LearningRateMonitor
    logs ``lr-Adam``, ``lr-SGD``), else from the trainer that wrote it, else unknown."""
    n = norm(lr.name)
    if "adam" in n:
        return ADAM
    if "sgd" in n:
        return SGD
    if len(lr) and run.sources[int(lr.src[0])].format in _ADAM_FORMATS:
        return ADAM
    return ANY


def _where(run: Run, s: Series, i: int) -> str:
    """``file:line`` of a logged value, as a reader finds it (the file's name; a record of a binary
    file has no line to give)."""
    src = run.sources[int(s.src[i])]
    name = Path(display_path(src.path).split("!")[-1]).name or display_path(src.path)
    name = "".join(c if c.isprintable() else "?" for c in name)  # a name is data: no line breaks in prose
    line = int(s.lines[i])
    return name if src.kind is SourceKind.TENSORBOARD or not line else f"{name}:{line}"


def _readable(run: Run, s: Series) -> Series:
    """The same metric read from a text file when ``s`` comes from a binary one (a TensorBoard
    tag ``learning-rate`` next to the log's ``learning rate``): a reader can open that line."""
    if not len(s) or run.sources[int(s.src[0])].kind is not SourceKind.TENSORBOARD:
        return s
    for name, o in run.series.items():
        if o is not s and "@rank" not in name and len(o) and norm(name) == norm(s.name) and \
                all(run.sources[int(i)].kind is not SourceKind.TENSORBOARD for i in np.unique(o.src)):
            return o
    return s


def _same_point(s: Series, p: PointRef) -> PointRef:
    """``p`` as a point of ``s`` when ``s`` logs the same value at its step (else ``p``)."""
    i = int(np.searchsorted(s.steps, p.step))
    if i < len(s) and int(s.steps[i]) == p.step and s.values[i] == p.value:
        return PointRef(p.key, s, i, p.statement)
    return p


def _g(x: float) -> str:
    return f"{x:.4g}"


def _rise_start(x: np.ndarray, end: int) -> int:
    """The index where the run of increases ending at ``end`` starts."""
    i = end
    while i > 0 and x[i - 1] < x[i]:
        i -= 1
    return i


def name_lr(run: Run, ctx: Context, story: Story) -> Named | None:
    """How the logged learning rate explains ``story``, or None when it does not (or none is logged)."""
    if story.category not in EXPLAINED or story.first_bad_step is None:
        return None
    lr = ctx.roles.get(run, "lr")
    if lr is None:
        return None
    lr = _readable(run, lr).finite()
    if not len(lr):
        return None
    bad = int(story.first_bad_step)
    opt = optimizer_of(run, lr)
    x, steps = lr.values, lr.steps
    i = int(np.searchsorted(steps, bad, side="right")) - 1  # the lr in force at the first bad step
    at_bad = i >= 0 and int(steps[i]) == bad

    def at(j: int, what: str) -> PointRef:
        return PointRef(f"lr{j}", lr, j, f"{lr.name} {what}")

    here = [at(i, f"at step {bad}, the first bad step")] if at_bad else []
    bad_words = f"the first bad step {bad}" if at_bad else "the first bad step"

    # the engine took the jump as the cause (its cause sentence leads the issue)
    jump = next((h for h in story.hits if h.rule == JUMP_RULE and h.cause and h.cause in story.issue), None)
    if jump is not None:
        before, after = (_same_point(lr, next(p for p in jump.points if p.key == k)) for k in ("before", "after"))
        j = after.step
        when = "at the first bad step" if j == bad else f"just before {bad_words}"
        return Named("jump", f"the learning rate jumped from {_g(before.value)} to {_g(after.value)} at step {j} "
                             f"({_where(run, after.series, after.index)}), {when}",
                     f"Undo the learning-rate jump at step {j}: restore the schedule ({_g(before.value)} before it), "
                     "check the scheduler state on resume and any lr override in the launch config.",
                     [PointRef("lr_before", before.series, before.index, f"{lr.name} before the jump"),
                      PointRef("lr_after", after.series, after.index, f"{lr.name} after the jump"),
                      *(p for p in here if p.index != after.index)])
    if i < 0:
        return None

    zero = next((h for h in story.hits if h.rule == ZERO_RULE), None)
    if zero is not None and zero.first_bad_step is not None:
        z = int(np.searchsorted(steps, zero.first_bad_step))
        if z < len(x) and x[z] == 0:
            return Named("zero", f"the learning rate was 0 from step {int(steps[z])} ({_where(run, lr, z)})",
                         zero.advice.fix, [at(z, f"at step {int(steps[z])}, the first logged 0")])
    if story.category == Category.PLATEAU:
        top = float(np.max(x))
        if 0 < top <= opt.low:
            return Named("too_low", f"the learning rate was {_g(x[i])} at step {int(steps[i])} "
                                    f"({_where(run, lr, i)}) and never above {_g(top)}, far below the usual range "
                                    f"for {opt.name}: the weights barely move",
                         f"Raise the learning rate ({_g(top)} is far below the usual range; "
                         f"{opt.fix}).", [at(i, f"at step {int(steps[i])}"),
                                           at(int(np.argmax(x)), "at its highest")])
    if x[i] >= opt.high:
        return Named("too_high", f"the learning rate was {_g(x[i])} at {bad_words} ({_where(run, lr, i)}), far "
                                 f"above the usual range for {opt.name}",
                     f"Lower the learning rate ({_g(x[i])} here), {opt.fix}.",
                     here or [at(i, f"at step {int(steps[i])}, the last logged before the first bad step")])

    # warm-up: the lr rose into the first bad step and goes on rising, or reached its peak shortly before
    if i == 0:
        return None  # the first logged lr: nothing rose yet
    if x[i] > x[i - 1] and i + 1 < len(x) and x[i + 1] > x[i]:
        peak = i
        while peak + 1 < len(x) and x[peak + 1] > x[peak]:
            peak += 1  # the warm-up goes on after the first bad step: its peak
        start = _rise_start(x, i)
        if i - start < 2 or x[i] < opt.usual or x[i] < 2 * max(x[start], 0.0):
            return None  # no warm-up yet, or an lr still ordinary at the first bad step
        s = f"the warm-up was still raising the learning rate at {bad_words}: {_g(x[i])} at step {int(steps[i])} " \
            f"({_where(run, lr, i)}), on its way to {_g(x[peak])} at step {int(steps[peak])} ({_where(run, lr, peak)})"
        return Named("warmup", s, f"Lower the peak learning rate ({_g(x[peak])} here) or lengthen the warm-up, "
                                  f"{opt.fix}.",
                     [at(i, f"at step {int(steps[i])}, while the warm-up raised it"), *(p for p in here if p.index != i),
                      at(peak, "at the end of the warm-up")])
    peak = int(np.argmax(x[: i + 1]))  # the highest lr so far, where it was first reached
    start = _rise_start(x, peak)
    if peak - start < 2 or x[peak] < opt.usual or x[peak] < 2 * max(x[start], 0.0):
        return None  # no warm-up, or one to an ordinary peak
    span = int(steps[peak]) - int(steps[start])
    interval = int(steps[peak]) - int(steps[peak - 1])
    if bad - int(steps[peak]) > max(span, 2 * interval):
        return None  # longer after the peak than the warm-up took: the peak lr ran fine for a while
    when = "at" if int(steps[peak]) == bad else "shortly before"
    return Named("warmup", f"the warm-up took the learning rate to its peak of {_g(x[peak])} at step "
                           f"{int(steps[peak])} ({_where(run, lr, peak)}), {when} {bad_words}",
                 f"Lower the peak learning rate ({_g(x[peak])} here) or lengthen the warm-up, {opt.fix}.",
                 [at(peak, "at the end of the warm-up"), *(p for p in here if p.index != peak)])


def _batch_series(run: Run) -> Series | None:
    """The logged batch size (``batch_size``, Megatron's ``global batch size``...), if any."""
    names = sorted((n for n in run.series if "@rank" not in n and norm(n).endswith("batch_size")),
                   key=lambda n: (not norm(n).startswith("global"), len(n), n))
    return run.series[names[0]].finite() if names else None


def name_batch(run: Run, ctx: Context, story: Story) -> Named | None:
    """A batch size cut to half or less shortly before the first bad step of a numeric story, the
    lr unchanged: the same lr on a smaller batch takes larger, noisier steps (the linear scaling
    rule scales the lr with the batch: Goyal et al., https://arxiv.org/abs/1706.02677)."""
    if story.category not in EXPLAINED or story.category == Category.PLATEAU or story.first_bad_step is None:
        return None
    bs = _batch_series(run)
    if bs is None or len(bs) < 2:
        return None
    bad = int(story.first_bad_step)
    i = int(np.searchsorted(bs.steps, bad, side="right")) - 1
    near = max(50.0, 0.05 * bad)  # the window in which the engine takes a precursor as a cause
    c = next((j for j in range(i, 0, -1) if bs.values[j] != bs.values[j - 1]), None)
    if c is None or bad - int(bs.steps[c]) > near or bs.values[c] * 2 > bs.values[c - 1]:
        return None
    pts = [PointRef("bs_before", bs, c - 1, f"{bs.name} before the change"),
           PointRef("bs_after", bs, c, f"{bs.name} after the change")]
    a, b, at_step = float(bs.values[c - 1]), float(bs.values[c]), int(bs.steps[c])
    s = (f"the batch size dropped from {_g(a)} to {_g(b)} at step {at_step} ({_where(run, bs, c)}), "
         f"{'at' if at_step == bad else 'shortly before'} the first bad step")
    fix = f"Scale the learning rate with the batch (the linear scaling rule: {_g(a)} -> {_g(b)} calls for " \
          f"{_g(b / a)}x the lr), or keep the batch size."
    lr = ctx.roles.get(run, "lr")
    if lr is not None:
        lr = _readable(run, lr).finite()
        j = int(np.searchsorted(lr.steps, at_step, side="right")) - 1
        k = int(np.searchsorted(lr.steps, int(bs.steps[c - 1]), side="right")) - 1
        if j < 0 or k < 0 or lr.values[j] < lr.values[k]:
            return None  # the lr was lowered with it
        s += f", with the learning rate still {_g(lr.values[j])} ({_where(run, lr, j)})"
        fix = f"Scale the learning rate with the batch (the linear scaling rule: {_g(a)} -> {_g(b)} calls for " \
              f"{_g(lr.values[j] * b / a)} instead of {_g(lr.values[j])}), or keep the batch size."
        pts.append(PointRef("lr_with_bs", lr, j, f"{lr.name} after the batch-size change"))
    return Named("batch", s, fix, pts)


def name_causes(run: Run, ctx: Context, stories: list[Story]) -> None:
    """Say in each story that the logged learning rate (or a cut in the batch size under it)
    explains what it names, and cite it."""
    for st in stories:
        if any(h.cause and not h.precursor for h in st.hits):
            continue  # a symptom traced its own cause (the monitor found the bad input batch)
        named = name_lr(run, ctx, st)
        if named is None or named.kind == "warmup":
            named = name_batch(run, ctx, st) or named
        if named is None:
            continue
        issue, fix = st.issue, st.fix
        jump = next((h for h in st.hits if h.rule == JUMP_RULE and h.cause), None) if named.kind == "jump" else None
        joined = ". "
        if jump is not None and jump.cause:
            # the lr-jump rule's own cause sentence says less (no line, no first bad step): this one replaces it
            for gone, sep in (("; " + jump.cause, "; "), (jump.cause + "; ", "; "), (jump.cause + ". ", ". ")):
                if gone in issue:
                    issue, joined = issue.replace(gone, "", 1), sep
                    break
        if issue.startswith(CAUSE):  # another cause named already: this one comes first
            issue, joined = issue[len(CAUSE):], "; "
        elif any(h.cause and issue.startswith(h.cause) for h in st.hits):  # "the gradient norm spiked first"
            joined = "; "
        issue = f"{CAUSE}{named.sentence}{joined}{issue}"
        if jump is not None and fix.startswith(jump.advice.fix + " Then: "):
            fix = fix[len(jump.advice.fix + " Then: "):]  # the rule's advice, said again by this one
        st.issue = issue
        if not fix.startswith(named.fix):  # the lr-zero rule's advice leads already
            st.fix = f"{named.fix} Then: {fix[0].lower()}{fix[1:]}" if fix else named.fix
        st.named_cause = "batch_drop" if named.kind == "batch" else f"lr_{named.kind}"
        st.cause_points = named.points
