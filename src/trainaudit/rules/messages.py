"""TA5xx: messages with a known meaning. A warning such as ``None of the inputs have
requires_grad=True`` under gradient checkpointing is evidence by itself; the catalogue of such
messages, with the source of each meaning, is :mod:`trainaudit.ingest.catalogue`."""

from __future__ import annotations

from trainaudit.answer.schema import Category, Severity
from trainaudit.model import EventKind
from trainaudit.rules.base import Context, Guidance, Hit, Rule
from trainaudit.series.roles import adversarial


class KnownMessage(Rule):
    """Reports a warning whose meaning is established (the catalogue in
    ``trainaudit.ingest.catalogue``: gradient checkpointing without gradients, a loss broadcast
    over mismatched shapes, a variance over one element, DDP gradient layout, variables without
    gradients ...), with the category the meaning is evidence for.

    Why: these messages are printed once and scroll away, yet they explain a run that does not
    learn or slows down.

    Fix: the catalogue entry's meaning says what to change; its source shows where the message
    comes from.

    Example: ``UserWarning: None of the inputs have requires_grad=True. Gradients will be None``
    with a LoRA fine-tune whose loss does not move.

    In a GAN's log (a player's loss among its series) TensorFlow's "Gradients do not exist for
    variables" is not reported: each player's loss leaves the other player's variables without one.
    """

    id = "TA501"
    name = "known-message"
    category = Category.PLATEAU
    severity = Severity.MEDIUM
    also = (Severity.INFO, Severity.CRITICAL)  # the catalogue entry of the message decides
    guidance = Guidance(
        fix="Act on what the message means (in the finding): it names the mechanism, e.g. enable input gradients "
            "for gradient checkpointing, match the loss's input and target shapes.",
        impact="The message no longer appears and the symptom it explains goes away.",
        verify="Re-run and check the log no longer prints the message.")

    def check(self, ctx: Context) -> list[Hit]:
        hits: list[Hit] = []
        seen: set[str] = set()
        game = any(adversarial(name) for name in ctx.run.series)
        # warnings and errors of the catalogue (NaN checks, OOMs, hardware and gate failures have rules
        # of their own)
        for e in ctx.events(EventKind.WARNING, EventKind.ERROR):
            known, cat = e.data.get("known"), e.data.get("category")
            if not known or not cat or known in seen or cat == Category.CRASH or (game and e.data.get("normal_in_game")):
                continue
            seen.add(known)
            n = sum(1 for x in ctx.events(EventKind.WARNING, EventKind.ERROR) if x.data.get("known") == known)
            h = self.hit(f"{e.data.get('meaning', e.message)} (printed {n} time{'s' if n > 1 else ''})", 0.75,
                         category=Category(cat), severity=Severity(e.data.get("severity", self.severity)),
                         first_bad_step=ctx.step_of(e), last_step=ctx.step_of(e), fatal=bool(e.data.get("fatal")))
            h.ev("msg", e, "the message")
            hits.append(h)
        return hits
