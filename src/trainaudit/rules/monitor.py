"""MONxxx: what the live monitor (``trainaudit.monitor``) finds on the model itself, with torch,
while it trains. The monitor detects these; here they are declared (documentation, guidance) so
they can be listed, configured and explained like every other rule, and their ``check`` reads
what the monitor recorded in its JSONL file (its first-NaN record and its alerts), so that
``diagnose`` and ``watch`` on that file report them in the run's stories."""

from __future__ import annotations

from trainaudit.answer.schema import Category, Severity
from trainaudit.ingest.formats.monitor import MonitorReader
from trainaudit.model import Event, EventKind
from trainaudit.rules.base import Context, Guidance, Hit, Rule, Scope, Thresholds


def _recorded(ctx: Context, kind: EventKind) -> list[Event]:
    """Events of ``kind`` read from a monitor file."""
    mine = {s.path for s in ctx.run.sources if s.format == MonitorReader.name}
    return [e for e in ctx.events(kind) if e.source in mine]


class _Recorded(Rule):
    """A monitor rule whose findings are the monitor's own alerts, as its file recorded them."""

    def check(self, ctx: Context) -> list[Hit]:
        hits = []
        for e in _recorded(ctx, EventKind.WARNING):
            if e.data.get("rule") != self.id:
                continue
            message = e.message.split(": ", 1)[-1]
            sev = e.data.get("severity")
            known = isinstance(sev, str) and sev in Severity._value2member_map_
            h = self.hit(message, 0.9, metric=e.data.get("metric"), first_bad_step=e.step, last_step=e.step,
                         **({"severity": Severity(str(sev))} if known else {}))
            h.ev("alert", e, "the monitor's alert")
            hits.append(h)
        return hits[:1]  # the monitor alerts once per rule


class FirstNonFinite(Rule):
    """The first NaN/Inf of the run, located by replaying the step: the module whose output
    became non-finite first (forward), the gradient at a module's output (backward), the loss,
    or the input batch itself.

    Why: the module (or batch) where the first NaN appears is where to look; everything after it
    is contamination.

    Fix: a NaN in the input batch is a data problem (check the preprocessing of that batch, which
    the monitor can save); a module's forward overflow calls for a lower lr, clipping, bf16 or a
    normalisation layer there.

    Example: ``{"type": "nonfinite", "step": 57, "phase": "forward", "module": "0",
    "input_nonfinite": true, "detail": "non-finite input entering 0"}`` in the monitor's file.
    """

    id = "MON101"
    name = "first-non-finite"
    category = Category.NAN_INF
    severity = Severity.CRITICAL
    scope = Scope.MONITOR
    guidance = Guidance(
        fix="Inspect the module (or input batch) named as the origin: a NaN in the input is a data problem; a "
            "forward overflow calls for a lower lr, gradient clipping, bf16 or normalisation there.",
        impact="No non-finite value at that step.",
        verify="Re-run the saved batch through the model and check every module output is finite.")

    def check(self, ctx: Context) -> list[Hit]:
        found = _recorded(ctx, EventKind.NAN_CHECK)
        if not found:
            return []
        e = found[0]
        phase, module = e.data.get("phase"), e.data.get("module")
        detail = e.data.get("detail") or e.message
        h = self.hit(f"first NaN/Inf at step {e.step} ({phase}): {detail}", 0.97, metric=module,
                     first_bad_step=e.step, last_step=e.step, data=dict(e.data))
        if phase == "forward" and e.data.get("input_nonfinite") and e.data.get("call") == 0:
            # the first call of the step already received a non-finite input: the batch itself,
            # so the learning rate or the model cannot have made it
            h.cause = f"the input batch of step {e.step} holds a non-finite value (replayed by the monitor)"
        h.ev("origin", e, "the monitor's replay of the first non-finite step")
        return [h]


class ParamsNotInOptimizer(_Recorded):
    """Trainable parameters (``requires_grad=True``) that are not in any optimizer param group:
    they get gradients but never change.

    Why: a module added after the optimizer was built, or filtered out of the param groups,
    silently does not train.

    Fix: build the optimizer after the model is complete, from ``model.parameters()``.

    Example: a classifier head added after ``AdamW(model.backbone.parameters())``.
    """

    id = "MON201"
    name = "params-not-in-optimizer"
    category = Category.PLATEAU
    severity = Severity.HIGH
    scope = Scope.MONITOR
    guidance = Guidance(
        fix="Build the optimizer after the model is complete, from model.parameters() (or add the missing "
            "parameters to a param group).",
        impact="Every trainable parameter is updated.",
        verify="Check that every parameter with requires_grad is in optimizer.param_groups.")


class ParamsWithoutGrad(_Recorded):
    """Trainable parameters that received no gradient after a backward: unused in the forward,
    or cut off by a ``detach()`` / ``torch.no_grad()`` in the graph (``inspect`` reports it too,
    from one sample batch).

    Why: those parameters never train; a detached graph can leave whole sub-networks frozen.

    Fix: find where the graph is cut (``detach``, ``.data``, ``no_grad``, a non-differentiable
    op) or drop the unused parameters (DDP also needs ``find_unused_parameters`` for them).

    Example: an auxiliary head built in ``__init__`` but never called in ``forward``.
    """

    id = "MON202"
    name = "params-without-grad"
    category = Category.PLATEAU
    severity = Severity.MEDIUM
    scope = Scope.MONITOR
    guidance = Guidance(
        fix="Find where the graph is cut (detach, .data, no_grad, a non-differentiable op) or remove the unused "
            "parameters.",
        impact="Every trainable parameter receives a gradient.",
        verify="After one backward, check that p.grad is not None for every trainable parameter.")


class FrozenParams(_Recorded):
    """A large share of the parameters is frozen (``requires_grad=False``); ``inspect`` reports it
    too, with the same thresholds.

    Why: intended for fine-tuning with adapters; unintended, the model cannot learn (a
    ``requires_grad_(False)`` left over, a pretrained backbone frozen by default).

    Fix: unfreeze what should train; check the share against what the recipe intends.

    Example: 95 % of the parameters frozen by a ``requires_grad_(False)`` on the backbone.
    """

    id = "MON203"
    name = "frozen-params"
    category = Category.PLATEAU
    severity = Severity.MEDIUM
    also = (Severity.INFO, Severity.HIGH)
    scope = Scope.MONITOR
    guidance = Guidance(
        fix="Unfreeze the parameters that should train (requires_grad_(True)) and rebuild the optimizer.",
        impact="The intended share of parameters trains.",
        verify="Print the trainable share and compare it with the recipe.")

    class Params(Thresholds):
        medium: float = 0.5  # frozen share from which it is more than an adapter fine-tune's usual
        high: float = 0.999  # everything frozen: nothing can learn

    def severity_for(self, share: float) -> Severity:
        """info for a frozen part (adapters, a frozen embedding), medium above ``medium``, high above
        ``high``."""
        return Severity.HIGH if share >= self.p.high else Severity.MEDIUM if share >= self.p.medium else Severity.INFO
