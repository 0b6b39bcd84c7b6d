"""MONxxx: what the live monitor (``trainaudit.monitor``) finds on the model itself, with torch,
while it trains. The monitor detects these; here they are declared (documentation, guidance) so
they can be listed, configured and explained like every other rule."""

from __future__ import annotations

from trainaudit.answer.schema import Category, Severity
from trainaudit.rules.base import Guidance, Rule, Scope


class FirstNonFinite(Rule):
    """The first NaN/Inf of the run, located by replaying the step: the module whose output
    became non-finite first (forward), the gradient at a module's output (backward), the loss,
    or the input batch itself.

    Why: the module (or batch) where the first NaN appears is where to look; everything after it
    is contamination.

    Fix: a NaN in the input batch is a data problem (check the preprocessing of that batch, which
    the monitor can save); a module's forward overflow calls for a lower lr, clipping, bf16 or a
    normalisation layer there.
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


class ParamsNotInOptimizer(Rule):
    """Trainable parameters (``requires_grad=True``) that are not in any optimizer param group:
    they get gradients but never change.

    Why: a module added after the optimizer was built, or filtered out of the param groups,
    silently does not train.

    Fix: build the optimizer after the model is complete, from ``model.parameters()``.
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


class ParamsWithoutGrad(Rule):
    """Trainable parameters that received no gradient after a backward: unused in the forward,
    or cut off by a ``detach()`` / ``torch.no_grad()`` in the graph.

    Why: those parameters never train; a detached graph can leave whole sub-networks frozen.

    Fix: find where the graph is cut (``detach``, ``.data``, ``no_grad``, a non-differentiable
    op) or drop the unused parameters (DDP also needs ``find_unused_parameters`` for them).
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


class FrozenParams(Rule):
    """A large share of the parameters is frozen (``requires_grad=False``).

    Why: intended for fine-tuning with adapters; unintended, the model cannot learn (a
    ``requires_grad_(False)`` left over, a pretrained backbone frozen by default).

    Fix: unfreeze what should train; check the share against what the recipe intends.
    """

    id = "MON203"
    name = "frozen-params"
    category = Category.PLATEAU
    severity = Severity.MEDIUM
    scope = Scope.MONITOR
    guidance = Guidance(
        fix="Unfreeze the parameters that should train (requires_grad_(True)) and rebuild the optimizer.",
        impact="The intended share of parameters trains.",
        verify="Print the trainable share and compare it with the recipe.")
