"""INSxxx: what ``trainaudit inspect`` finds on a model and one sample batch, with torch, before a
run is started (or on a checkpoint). ``inspect`` detects these (``trainaudit.inspect.model``); here
they are declared, with their thresholds, so they are listed, documented and explained like every
other rule. Two checks of ``inspect`` are the live monitor's (``MON202`` parameters without a
gradient, ``MON203`` frozen parameters) and are reported under those ids.
"""

from __future__ import annotations

from trainaudit.answer.schema import Category, Severity
from trainaudit.rules.base import Guidance, Rule, Scope, Thresholds


class NonFiniteGradients(Rule):
    """Parameters whose gradient is NaN or Inf after one forward and backward pass on the sample
    batch.

    Why: a non-finite gradient on the first batch is not a training-dynamics problem: the forward
    overflows (a log of zero, a division by zero, fp16 range) or the batch itself holds NaN/Inf.

    Fix: run the forward on the batch with ``torch.autograd.detect_anomaly()`` to find the first
    operation that produces it; check the batch for NaN/Inf.

    Example: ``torch.log(probs)`` on a softmax output that underflows to 0.
    """

    id = "INS101"
    name = "nonfinite-gradients"
    category = Category.NAN_INF
    severity = Severity.HIGH
    scope = Scope.INSPECT
    guidance = Guidance(
        fix="Find the first operation that produces NaN/Inf (torch.autograd.detect_anomaly() on one batch) and "
            "guard it (log_softmax instead of log(softmax), an epsilon in divisions); check the batch for NaN/Inf.",
        impact="Every gradient of the sample batch is finite.",
        verify="Re-run trainaudit inspect with the same --sample-batch: no INS101.")


class ZeroGradients(Rule):
    """Trainable parameters whose gradient is exactly zero on the sample batch.

    Why: an exact zero means no signal reaches them: a dead ReLU in front, a saturated
    activation, a mask that zeroes the path, or a loss that does not depend on them.

    Fix: follow the path from the loss to these parameters (dead units, saturation, masks).

    Example: the layer behind a ReLU whose units are all negative after a bad initialisation.
    """

    id = "INS201"
    name = "zero-gradients"
    category = Category.GRAD_VANISHING
    severity = Severity.MEDIUM
    scope = Scope.INSPECT
    guidance = Guidance(
        fix="Follow the path from the loss to these parameters: dead ReLUs or saturated activations in front "
            "(initialisation, a smaller lr, LeakyReLU/GELU), a mask that zeroes it, or a loss that ignores it.",
        impact="Every trainable parameter receives a non-zero gradient.",
        verify="Re-run trainaudit inspect with the same --sample-batch: no INS201.")


class DeadReLU(Rule):
    """A ReLU whose units are never active (never positive) on the sample batch, for more than
    ``share`` of its units.

    Why: a unit that is never active passes no gradient: it cannot recover, and the layers
    before it stop learning through it.

    Fix: check the initialisation and the scale of the inputs; a smaller learning rate;
    LeakyReLU or GELU.

    Example: a ReLU behind a layer whose bias was initialised to -10.
    """

    id = "INS202"
    name = "dead-relu"
    category = Category.GRAD_VANISHING
    severity = Severity.MEDIUM
    scope = Scope.INSPECT
    guidance = Guidance(
        fix="Check the initialisation and the input scale of the layer before it; use a smaller learning rate, "
            "or LeakyReLU / GELU.",
        impact="Most units of the layer are active on some inputs.",
        verify="Re-run trainaudit inspect with the same --sample-batch: no INS202 for that layer.")

    class Params(Thresholds):
        share: float = 0.5  # of the layer's units never active on the batch


class SaturatedActivations(Rule):
    """A tanh or sigmoid whose outputs sit at their limits for more than ``share`` of them on the
    sample batch.

    Why: the derivative is near zero there, so gradients vanish through the layer.

    Fix: normalise the inputs (or add a normalisation layer before it), scale the
    initialisation down.

    Example: a tanh on unnormalised pixel values in 0..255.
    """

    id = "INS203"
    name = "saturated-activations"
    category = Category.GRAD_VANISHING
    severity = Severity.MEDIUM
    scope = Scope.INSPECT
    guidance = Guidance(
        fix="Normalise the inputs of the layer (or add a normalisation layer before it) and scale its "
            "initialisation down.",
        impact="The activation's outputs stay in its responsive range.",
        verify="Re-run trainaudit inspect with the same --sample-batch: no INS203 for that layer.")

    class Params(Thresholds):
        share: float = 0.5  # of the layer's outputs at the limits


class EmbeddingHeavy(Rule):
    """Embeddings hold more than ``share`` of all parameters: most of the model is a lookup table.

    Why: for a small model a large vocabulary leaves little capacity in the layers that learn;
    the loss flattens early.

    Fix: a smaller vocabulary, tied input/output embeddings, or a larger hidden size / more
    layers.

    Example: a 2-layer model with a 50k-token vocabulary and 128 hidden units.
    """

    id = "INS301"
    name = "embedding-heavy"
    category = Category.PLATEAU
    severity = Severity.MEDIUM
    scope = Scope.INSPECT
    guidance = Guidance(
        fix="Use a smaller vocabulary, tie the input and output embeddings, or give the model more hidden size / "
            "layers.",
        impact="Most parameters sit in the layers that learn.",
        verify="Re-run trainaudit inspect: the embedding share is under the threshold.")

    class Params(Thresholds):
        share: float = 0.5  # of all parameters in embeddings


class MixedParameterDtypes(Rule):
    """The parameters are in more than one dtype.

    Why: often intended (a bf16 body with fp32 norms); unintended, a half-precision parameter
    updated without a float32 master copy loses small updates, and mixed dtypes meet in a matmul
    as an error or a silent cast.

    Fix: keep master weights in float32 and use autocast for half-precision compute.

    Example: a checkpoint whose head was saved in fp16 and whose body in fp32.
    """

    id = "INS302"
    name = "mixed-parameter-dtypes"
    category = Category.NAN_INF
    severity = Severity.LOW
    scope = Scope.INSPECT
    guidance = Guidance(
        fix="Keep the parameters in float32 and compute in half precision with torch.autocast (or convert the "
            "model with one .to(dtype)).",
        impact="One parameter dtype, or a mix the recipe intends.",
        verify="Re-run trainaudit inspect: one dtype listed.")
