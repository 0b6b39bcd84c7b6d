"""The run corpus: real tiny runs with known causes, printed as people paste them.

``PYTHONPATH=src:tools python -m synth.corpus tests/corpus/runs [--family NAME ...] [--list]``

Each *family* is one generator: a training scenario (``synth.scenarios``, or a run through the real
HF Trainer / Lightning Trainer, ``synth.framework_runs``) rendered by one logger. A family trains one
run per seed and writes each *variant* of its console as a corpus case: another logging interval,
a paste cut at the start (``head``), at the end (``tail``) or at both (``window``: a dozen points
around the fault), a ``[rank0]:`` (torchrun) or ``0:`` (``srun --label``) prefix on every line.
Every case is a folder ``<family>-s<seed>-<variant>/`` holding the log and a ``label.json`` with the
schema of ``tests/corpus/logs`` plus ``family`` (cases of one family share one run generator: they
belong to one group when folds are drawn), ``label_basis: "injected"`` and ``source: "tools/synth
<family> seed N"``.

``first_bad_step`` is the step counter as the log prints it: the first printed step at or after the
step where the run shows its fault (a logging interval moves it to the next printed step); epochs
for the epoch printers (Keras, the plain epoch printer). A paste that starts after the fault began
(a plateau from step 1) is labelled at its first printed step.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from synth import printers, scenarios
from synth.cases import Truth
from synth.printers import HEAD, TAIL, Line
from synth.runlog import RunLog

LABEL = "label.json"
NO_TAIL_CUT = ("crash", "oom", "loss_scale_collapse", "distributed_failure")  # the error is the end of the log
FROM_START = ("plateau", "grad_vanishing")  # the symptom is there from the first step on


@dataclass(frozen=True, slots=True)
class Family:
    printer: str  # a key of printers.PRINTERS, or "hf" / "lightning-bar" / "lightning-csv" for real framework runs
    scenario: str
    seeds: tuple[int, ...]
    variants: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.printer}-{self.scenario}"

    @property
    def all_variants(self) -> tuple[str, ...]:
        """The listed variants, plus a short paste (a dozen points around the fault, or from the
        middle of a healthy run) where none is listed: pasted logs are often that short."""
        if any("window" in v for v in self.variants) or self.printer not in printers.PRINTERS:
            return self.variants
        return (*self.variants, "every10-window" if self.printer not in printers.EPOCH_PRINTERS else "window")


def _f(printer: str, scenario: str, seeds: tuple[int, ...], *variants: str) -> Family:
    return Family(printer, scenario, seeds, variants)


FAMILIES: list[Family] = [
    # healthy runs, every printer
    _f("plain-pipe", "healthy-classifier", (1, 2), "every5", "every10-head", "every1-tail"),
    _f("plain-kv", "healthy-slow", (1, 2), "every10", "every5-tail"),
    _f("plain-logging", "healthy-loader", (1, 2), "every10", "every20-rank"),
    _f("plain-nanogpt", "healthy-lm-cosine", (1, 2, 5), "every10", "every10-head", "every5-window"),
    _f("plain-tqdm", "healthy-classifier", (5, 6), "every5", "every10-tail"),
    _f("plain-epochs", "healthy-epochs", (1, 2), "full", "tail"),
    _f("keras2", "healthy-epochs", (3, 4), "full", "head"),
    _f("keras3", "healthy-classifier", (7, 8), "full", "window"),
    _f("deepspeed", "healthy-fp16", (1, 2, 3), "every10", "every5-rank"),
    _f("megatron", "healthy-lm-cosine", (3, 4), "every10", "every5-head"),
    _f("megatron", "healthy-fp16", (4, 5), "every10", "every20-srun"),
    _f("plain-logging", "healthy-fp16", (6, 7), "every10"),
    _f("plain-kv", "healthy-classifier", (9, 10), "every10"),
    _f("keras2", "healthy-slow", (5,), "full"),
    _f("megatron", "healthy-classifier", (11, 12), "every10", "every5-head"),
    _f("deepspeed", "healthy-loader", (5,), "every10"),
    # faults
    _f("plain-pipe", "nan-batch", (1, 2), "every5", "every10-head"),
    _f("megatron", "nan-lr-jump", (1, 2), "every5", "every10-window"),
    _f("keras2", "nan-batch", (3,), "full"),
    _f("plain-kv", "lr-too-high", (1, 2), "every5", "every10-tail"),
    _f("megatron", "lr-jump", (1, 2), "every10", "every5-head"),
    _f("keras3", "lr-too-high-epochs", (1, 2), "full"),
    _f("plain-logging", "spike", (1, 2), "every5", "every10-head"),
    _f("megatron", "spike", (3, 4), "every5", "every10-window"),
    _f("keras2", "spike", (5,), "full"),
    _f("deepspeed", "loss-scale-ds", (1, 2, 3), "every10", "every5-head-rank"),
    _f("megatron", "loss-scale", (4, 5), "every5", "every10-srun"),
    _f("plain-pipe", "loss-scale", (6,), "every10"),
    _f("plain-pipe", "lr-too-low", (1, 2), "every10", "every10-tail"),
    _f("plain-kv", "zero-grad", (1,), "every10", "every20"),
    _f("megatron", "shuffled-targets", (1, 2), "every10"),
    _f("keras3", "lr-too-low", (3,), "full"),
    _f("keras2", "overfit-epochs", (1, 2), "full", "tail"),
    _f("keras3", "overfit-epochs", (3, 4), "full"),
    _f("plain-epochs", "overfit-epochs", (5, 6), "full", "head"),
    _f("megatron", "exploding", (1, 2), "every5", "every10-head"),
    _f("plain-pipe", "exploding", (3, 4), "every5", "every10-window"),
    _f("plain-pipe", "vanishing", (1, 2), "every10", "every10-tail"),
    _f("plain-kv", "vanishing", (3, 4), "every10", "every20-head"),
    _f("plain-logging", "memory-leak", (1, 2), "every5", "every10-head"),
    _f("deepspeed", "memory-leak-large", (3, 4), "every10", "every5-tail"),
    _f("megatron", "slow-steps", (1, 2), "every5", "every10-head"),
    _f("plain-nanogpt", "slow-steps", (3, 4), "every5", "every10-window"),
    _f("plain-logging", "slow-loader", (1, 2), "every5", "every10-head"),
    _f("plain-kv", "slow-loader", (3, 4), "every5", "every10-tail"),
    _f("plain-pipe", "crash", (1, 2), "every10", "every10-head-rank"),
    _f("megatron", "crash", (3,), "every5"),
    _f("plain-tqdm", "crash", (4,), "every5"),
    _f("plain-kv", "oom", (1, 2), "every10", "every5-head-rank"),
    _f("megatron", "oom", (3, 4), "every10", "every5-srun"),
    _f("plain-pipe", "rank-exit", (1, 2), "every10-rank", "every5-srun"),
    _f("deepspeed", "rank-exit", (3,), "every10-rank"),
    _f("megatron", "rank-hang", (1,), "every5-rank", "every10"),
    _f("plain-logging", "rank-hang", (2,), "every10-rank"),
    _f("plain-pipe", "healthy-gan", (1, 2), "every10", "every20-head"),
    _f("plain-kv", "healthy-gan", (3,), "every10"),
    # seeds whose GAN covers the modes before the fault (the check in scenarios.gan); none shared with
    # the healthy GAN families, so no run prefix sits in two families
    _f("plain-pipe", "gan-collapse", (4, 7), "every10", "every10-window"),
    _f("plain-logging", "gan-collapse", (9, 11), "every10", "every20-tail"),
]


# --- variants -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Variant:
    every: int = 1
    cut: str | None = None  # "head" | "tail" | "window"
    prefix: str = ""

    @classmethod
    def parse(cls, text: str) -> Variant:
        every, cut, prefix = 1, None, ""
        for tok in text.split("-"):
            if tok.startswith("every"):
                every = int(tok[5:])
            elif tok in ("head", "tail", "window"):
                cut = tok
            elif tok == "rank":
                prefix = "[rank0]: "
            elif tok == "srun":
                prefix = "0: "
            elif tok not in ("full", "newlines"):  # "newlines": a printer option (synth.framework_runs)
                raise ValueError(f"unknown variant token {tok!r}")
        return cls(every, cut, prefix)


def _first_at_or_after(steps: list[int], s: int) -> int | None:
    return next((p for p in steps if p >= s), None)


def printed_label(truth: Truth, category: str, steps: list[int]) -> tuple[int | None, list[int] | None]:
    """(first_bad_step, window) in printed steps ``steps`` (sorted) from a truth in the same unit."""
    if truth.first_bad_step is None or not steps:
        return None, None
    lo, hi = truth.window or (truth.first_bad_step, truth.first_bad_step)
    if category in FROM_START and truth.first_bad_step <= steps[0]:
        span = max(1, (len(steps) + 3) // 4)
        return steps[0], [steps[0], steps[min(len(steps) - 1, span)]]
    fb = _first_at_or_after(steps, truth.first_bad_step)
    if fb is None:  # the run died before the next printed step: the last printed one shows it
        fb = _first_at_or_after(steps, lo)
    if fb is None and category in NO_TAIL_CUT:  # the error follows the last printed step
        return steps[-1], [steps[-1], max(hi, steps[-1])]
    if fb is None:
        return None, None
    w_lo = _first_at_or_after(steps, lo) or fb
    w_hi = _first_at_or_after(steps, hi) or steps[-1]
    return fb, [min(w_lo, fb), max(w_hi, fb)]


def cut_lines(lines: list[Line], variant: Variant, fb: int | None, category: str, seed: int) -> list[Line]:
    """The paste: ``lines`` cut as ``variant`` says, keeping the fault in view."""
    if variant.cut is None:
        return lines
    steps = sorted({s for s, _ in lines if HEAD < s < TAIL})
    n = len(steps)
    i = steps.index(fb) if fb in steps and category != "healthy" else 0
    pre = 6 + seed % 5 if variant.cut != "window" else 5
    post = 10 + seed % 5 if variant.cut != "window" else 6
    if category == "healthy":
        start, end = steps[int(n * 0.35)], steps[int(n * 0.7)]
    else:
        start, end = steps[max(0, i - pre)], steps[min(n - 1, i + post)]
    keep_head = variant.cut == "tail"
    keep_tail = variant.cut == "head" or category in NO_TAIL_CUT
    out = []
    for s, text in lines:
        if s == HEAD:
            if keep_head:
                out.append((s, text))
        elif s == TAIL:
            if keep_tail or variant.cut == "head":
                out.append((s, text))
        elif (keep_head or s >= start) and (keep_tail or s <= end):
            out.append((s, text))
    return out


def text_of(lines: list[Line], prefix: str) -> str:
    parts = []
    for _s, text in lines:
        if prefix:
            text = "\r".join(prefix + seg if seg else seg for seg in text.split("\r"))
        parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


# --- truths in the printer's unit ---------------------------------------------------------------

def truth_in(truth: Truth, log: RunLog, epoch_printer: bool) -> Truth:
    """The truth in the unit of the printer: steps to epochs for the epoch printers, and back."""
    native_epochs = truth.facts.get("step_unit") == "epoch"
    if truth.first_bad_step is None or native_epochs == epoch_printer:
        return truth
    per = int(log.config["steps_per_epoch"])
    lo, hi = truth.window or (truth.first_bad_step, truth.first_bad_step)
    if epoch_printer:
        def conv(s: int) -> int:
            return math.ceil(s / per)
    else:
        def conv(s: int) -> int:
            return s * per
    return Truth(conv(truth.first_bad_step), (conv(lo), conv(hi)), truth.fault_step, truth.facts)


_MEM_RE = re.compile(r"(?:MemAllocated=|mem_allocated_mb[ =])([\d.]+)")


def visible_memory_onset(truth: Truth, lines: list[Line], every: int) -> Truth:
    """A leak shows in the log where the printed memory first differs from the last value printed
    before the leak (a printer that rounds may show it some steps after it began)."""
    assert truth.first_bad_step is not None and truth.fault_step is not None
    printed = [(s, m.group(1)) for s, t in lines if HEAD < s < TAIL and (m := _MEM_RE.search(t))]
    before = [v for s, v in printed if s < truth.fault_step]
    first = next((s for s, v in printed if s >= truth.fault_step and before and v != before[-1]), None)
    if first is None:
        raise AssertionError("the leak does not show in the printed memory")
    return Truth(first, (first, first + 2 * every), truth.fault_step, truth.facts)


# --- writing ------------------------------------------------------------------------------------

_HOST_PATH_RE = re.compile(r"(?:/[\w.+-]+)+/site-packages/")


def neutral(text: str, case_dir: Path | None = None) -> str:
    """No path of the generating machine in the corpus."""
    text = _HOST_PATH_RE.sub("/opt/venv/lib/python3/site-packages/", text)
    if case_dir is not None:
        text = text.replace(str(case_dir.resolve()), "output").replace(str(case_dir), "output")
    return text


def write_case(out: Path, name: str, filename: str, text: str, label: dict[str, Any]) -> dict[str, Any]:
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / filename).write_text(neutral(text), encoding="utf-8")
    (d / LABEL).write_text(json.dumps(label, indent=2) + "\n", encoding="utf-8")
    return label


def base_label(family: str, seed: int, framework: str, category: str, cause: str, variant: str,
               fb: int | None, window: list[int] | None, unit: str) -> dict[str, Any]:
    return {
        "source": f"tools/synth {family} seed {seed}",
        "where": f"generated by `python -m synth.corpus` (tools/synth/corpus.py), variant {variant}",
        "framework": framework,
        "category": category,
        "first_bad_step": fb if category != "healthy" else None,
        "first_bad_step_window": window if category != "healthy" else None,
        "cause": cause,
        "label_basis": "injected",
        "label_confidence": "high",
        "notes": f"first_bad_step in printed {unit}s",
        "family": family,
        "variant": variant,
        "step_unit": unit,
    }


def render_family(fam: Family, out: Path) -> list[dict[str, Any]]:
    if fam.printer in ("hf", "lightning-bar", "lightning-csv"):
        from synth import framework_runs

        return framework_runs.render_family(fam, out)
    framework, printer, opts = printers.PRINTERS[fam.printer]
    category = scenarios.SCENARIOS[fam.scenario][0]
    epoch_printer = fam.printer in printers.EPOCH_PRINTERS
    labels = []
    for seed in fam.seeds:
        o = scenarios.run(fam.scenario, seed)
        o.log.config.setdefault("steps_per_epoch", 20)
        truth = truth_in(o.truth, o.log, epoch_printer)
        for vname in fam.all_variants:
            v = Variant.parse(vname)
            lines = printer(o.log, **opts) if epoch_printer else printer(o.log, every=v.every, **opts)
            steps = sorted({s for s, _ in lines if HEAD < s < TAIL})
            if category == "memory_growth":
                truth = visible_memory_onset(truth, lines, v.every)
            fb, window = printed_label(truth, category, steps)
            lines = cut_lines(lines, v, fb, category, seed)
            steps = sorted({s for s, _ in lines if HEAD < s < TAIL})
            fb, window = printed_label(truth, category, steps)
            if category != "healthy" and fb is None:
                raise AssertionError(f"{fam.name} seed {seed} {vname}: the fault is not in the paste")
            label = base_label(fam.name, seed, framework, category, o.cause, vname, fb, window,
                               "epoch" if epoch_printer else "step")
            labels.append(write_case(out, f"{fam.name}-s{seed}-{vname}", "log.txt", text_of(lines, v.prefix), label))
    return labels


def generate(out: Path, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    fams = [f for f in all_families() if not names or f.name in names]
    unknown = set(names or ()) - {f.name for f in fams}
    if unknown:
        raise click.UsageError(f"unknown families: {', '.join(sorted(unknown))} (see --list)")
    labels: list[dict[str, Any]] = []
    for name in {f.name for f in fams}:  # a family may be listed in parts (seeds added later)
        for old in out.glob(f"{name}-s*"):
            if old.is_dir() and (old / LABEL).is_file() and old.name.rsplit("-s", 1)[0] == name:
                shutil.rmtree(old)
    for fam in fams:
        labels += render_family(fam, out)
    return labels


def all_families() -> list[Family]:
    from synth import framework_runs

    return FAMILIES + framework_runs.families()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--family", "families", multiple=True, metavar="NAME", help="Only this family (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the families, then exit.")
def main(out_dir: Path | None, families: tuple[str, ...], list_only: bool) -> None:
    """Train the run corpus and write it, one folder per case, to OUT_DIR.

    Example: PYTHONPATH=src:tools python -m synth.corpus tests/corpus/runs
    """
    if list_only:
        for fam in all_families():
            click.echo(f"{fam.name:36s} seeds {','.join(map(str, fam.seeds)):8s} {' '.join(fam.all_variants)}")
        return
    if out_dir is None:
        raise click.UsageError("OUT_DIR is required (or use --list)")
    t0 = time.perf_counter()
    labels = generate(out_dir, families or None)
    click.echo(f"{len(labels)} cases in {time.perf_counter() - t0:.1f}s -> {out_dir}", err=True)


if __name__ == "__main__":
    sys.exit(main())
