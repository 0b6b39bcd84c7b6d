"""How far each synth case is from the rule thresholds that decide it, and whether its verdict
survives other seeds, thread counts and initial weights.

``PYTHONPATH=src:tools python -m synth.margins OUT_DIR [--case NAME ...] [--quick]``

A case's verdict is what the tests demand of it: a fault case makes its rule fire with the
expected category and a first bad step inside the label's window (or exactly at the injected step
where the tests say so); a healthy case leaves every rule silent (nothing above ``info``) in every
file it writes. The *margin* of a verdict is the largest factor ``f`` by which the deciding
thresholds can be moved against it, one at a time, and the verdict still holds: a fault case must
still be found with the threshold ``f`` times stricter, a healthy case must stay silent with any
threshold of any rule ``f`` times laxer. Thresholds are moved on the scale they mean:

- ``scale``: the value itself (a z-score, a relative rise, seconds) times or over ``f``;
- ``ratio``: a "times slower / times larger" threshold moves its excess over 1 (1.2 -> 1 + 0.2 f);
- ``frac``: a share of points moves its distance to 1 when made stricter (0.8 -> 1 - 0.2 / f)
  and its value when made laxer (0.8 -> 0.8 / f).

A margin of 1 means the verdict holds only at the exact thresholds: a knife edge. The check
regenerates every case for each :class:`synth.tasks.Variant` (other torch seeds, two threads,
noise on the initial weights) and reports the verdict and margin of each.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from synth import tasks
from synth.cases import GroundTruthError, catalogue
from synth.generate import generate
from trainaudit.diagnosis import diagnose_run
from trainaudit.ingest import load_run
from trainaudit.model import Run
from trainaudit.rules import Config, Hit, rule_class, run_rules

FACTORS = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0)

# rule -> {threshold: how it moves}; "+" means a larger value fires less (stricter), "-" the reverse
PARAMS: dict[str, dict[str, str]] = {
    "TA102": {"z": "scale+", "rel": "scale+", "over_max": "scale+", "min_excess": "scale+"},
    "TA103": {"z": "scale+", "ratio": "ratio+"},
    "TA104": {"min_scale": "scale-", "skip_frac": "frac+"},
    "TA201": {"rel": "scale+", "range_frac": "scale+", "sustain": "frac+"},
    "TA202": {"min_improvement": "scale-", "learned": "scale-"},
    "TA204": {"factor": "ratio+", "frac_high": "frac+", "jump": "ratio+"},
    "TA205": {"abs_min": "scale-", "layer_ratio": "scale-", "decay": "ratio+"},
    "TA206": {"factor": "ratio+", "increment_ratio": "scale+"},
    "TA207": {"zero_frac": "frac+"},
    "TA301": {"ratio": "scale+"},
    "TA403": {"growth": "scale+", "monotone": "frac+", "creep": "scale+"},
    "TA406": {"ratio": "ratio+", "min_delta_s": "scale+", "consistency": "frac+"},
    "TA407": {"ratio": "ratio+", "min_delta_s": "scale+"},
    "TA408": {"slow_factor": "ratio+", "min_stall_s": "scale+", "periodic": "frac+"},
    "TA411": {"share": "frac+"},
}


@dataclass(frozen=True, slots=True)
class Fires:
    """A rule the tests expect to fire on a file of a case (``file`` "" = the case's folder)."""

    file: str
    rule: str
    category: str
    exact: bool = False  # at the label's fault step exactly, not anywhere in its window
    anywhere: bool = False  # the tests only ask that it fires (another rule places the first bad step)


# What tests/rules (test_rules_synth.py, test_rules_frameworks.py, test_rule_coverage.py,
# test_diagnose_cli.py) demand of each fault case; healthy cases must be silent everywhere.
FIRES: dict[str, list[Fires]] = {
    "nan-after-lr-jump": [Fires("train.log", "TA101", "nan_inf")],
    "nan-batch": [Fires("metrics.jsonl", "TA101", "nan_inf"), Fires("stdout.log", "TA101", "nan_inf")],
    "corrupt-batch-spike": [Fires("metrics.jsonl", "TA102", "loss_spike"),
                            Fires("metrics.jsonl", "TA103", "grad_explosion", exact=True)],
    "slow-from-step-k": [Fires("metrics.jsonl", "TA406", "throughput_regression")],
    "shuffled-labels": [Fires("train.log", "TA202", "plateau")],
    "lr-too-high": [Fires("metrics.jsonl", "TA201", "divergence")],
    "lr-jump": [Fires("metrics.jsonl", "TA206", "divergence", exact=True),
                Fires("metrics.jsonl", "TA201", "divergence", anywhere=True)],
    "zero-grad-bug": [Fires("metrics.jsonl", "TA203", "plateau")],
    "lr-zero": [Fires("train.log", "TA207", "plateau")],
    "vanishing-gradients": [Fires("metrics.jsonl", "TA205", "grad_vanishing"),
                            Fires("stdout.log", "TA205", "grad_vanishing")],
    "rnn-exploding": [Fires("metrics.jsonl", "TA204", "grad_explosion")],
    "loss-scale-collapse": [Fires("", "TA104", "loss_scale_collapse")],
    "memory-growth": [Fires("metrics.jsonl", "TA403", "memory_growth"), Fires("tb", "TA403", "memory_growth")],
    "crash-shape-error": [Fires("", "TA410", "crash")],
    "hf-trainer-lr-jump": [Fires("stdout.log", "TA206", "divergence", exact=True),
                           Fires("stdout.log", "TA201", "divergence")],
    "hf-trainer-nan-batch": [Fires("stdout.log", "TA101", "nan_inf", exact=True),
                             Fires("trainer_state.json", "TA101", "nan_inf", exact=True)],
    "lightning-nan-after-lr-jump": [Fires("stdout.log", "TA101", "nan_inf"), Fires("metrics.csv", "TA101", "nan_inf"),
                                    Fires("metrics.csv", "TA206", "divergence", exact=True)],
    "lightning-overfit": [Fires("metrics.csv", "TA301", "overfitting"), Fires("stdout.log", "TA301", "overfitting")],
}

VARIANTS = (tasks.Variant(), tasks.Variant(seed_offset=1), tasks.Variant(seed_offset=2), tasks.Variant(threads=2),
            tasks.Variant(init_noise=1e-3))


def moved(value: float, kind: str, f: float, stricter: bool) -> float:
    """``value`` of a threshold of ``kind`` moved by ``f`` (see the module docstring)."""
    scale, sign = kind[:-1], kind[-1]
    up = stricter == (sign == "+")  # the direction that moves this threshold the asked way
    if scale == "scale":
        return value * f if up else value / f
    if scale == "ratio":
        return 1 + (value - 1) * f if up else 1 + (value - 1) / f
    return 1 - (1 - value) / f if up else value / f  # frac


@dataclass
class Verdict:
    case: str
    ok: bool
    margin: float | None  # None: nothing to move (exact checks), or the verdict fails
    binding: str  # the threshold that gives out first, "rule.param"
    problems: list[str] = field(default_factory=list)


class CaseFiles:
    """The runs of one generated case, loaded once."""

    def __init__(self, root: Path, label: dict[str, Any]) -> None:
        self.root = root
        self.label = label
        self.dir = root / label["case"]
        self._runs: dict[str, Run] = {}

    def run(self, rel: str) -> Run:
        if rel not in self._runs:
            if rel == "tb":
                paths = [str(self.root / f["path"]) for f in self.label["files"] if f["format"] == "tensorboard"][:1]
            else:
                paths = [str(self.dir / rel if rel else self.dir)]
            self._runs[rel] = load_run(paths)[0]
        return self._runs[rel]

    def every_file(self) -> list[str]:
        return [f["path"].split("/", 1)[1] for f in self.label["files"]]


def _fires(files: CaseFiles, check: Fires, config: Config | None) -> str | None:
    """None when ``check`` holds under ``config``, else what went wrong."""
    hits = [h for h in run_rules(files.run(check.file), config) if h.rule == check.rule]
    if not hits:
        return f"{check.rule} silent on {check.file or 'the folder'}"
    h = hits[0]
    if h.category != check.category or h.severity == "info":
        return f"{check.rule} on {check.file}: {h.category}/{h.severity}"
    label = files.label
    if check.exact:
        want = label["fault_step"] - (1 if check.file == "metrics.csv" else 0)  # Lightning's CSV counts from 0
        return None if h.first_bad_step == want else f"{check.rule} at {h.first_bad_step}, not {want}"
    lo, hi = label["first_bad_step_window"]
    if not check.anywhere and (h.first_bad_step is None or not lo <= h.first_bad_step <= hi):
        return f"{check.rule} at {h.first_bad_step}, outside [{lo}, {hi}]"
    return None


def _loud(files: CaseFiles, rel: str, config: Config | None) -> list[Hit]:
    return [h for h in run_rules(files.run(rel), config) if h.severity != "info"]


def _largest(holds: Any) -> float:
    """The largest factor of FACTORS up to which ``holds(f)`` is true (0 when it fails at 1)."""
    best = 0.0
    for f in FACTORS:
        if not holds(f):
            break
        best = f
    return best


def _config(rule: str, param: str, f: float, stricter: bool) -> Config:
    cls = rule_class(rule)
    assert cls is not None, rule
    value = float(cls.defaults()[param])
    return Config(select=[rule], rules={rule: {param: moved(value, PARAMS[rule][param], f, stricter)}})


def judge(root: Path, label: dict[str, Any]) -> Verdict:
    """Verdict and margin of one generated case (its label from the manifest)."""
    files = CaseFiles(root, label)
    name = label["case"]
    problems: list[str] = []
    margin, binding = float("inf"), ""
    if label["healthy"]:
        for rel in files.every_file():
            problems += [f"{rel}: {h.rule} {h.severity} {h.message}" for h in _loud(files, rel, None)]
        d = diagnose_run(files.run(""))
        if (d.verdict, d.category, d.first_bad_step) != ("healthy", "healthy", None):
            problems.append(f"diagnosis {d.verdict}/{d.category} at {d.first_bad_step}")
        if not problems:
            for rule, params in PARAMS.items():
                for param in params:
                    f = _largest(lambda f, r=rule, p=param: all(
                        not _loud(files, rel, _config(r, p, f, stricter=False)) for rel in files.every_file()))
                    if f < margin:
                        margin, binding = f, f"{rule}.{param}"
    else:
        checks = FIRES.get(name, [])
        problems += [p for c in checks if (p := _fires(files, c, None))]
        d = diagnose_run(files.run(""))
        cats = {label["category"], *label["also_acceptable"]}
        lo, hi = label["first_bad_step_window"]
        if d.category not in cats or d.first_bad_step is None or not lo <= d.first_bad_step <= hi:
            problems.append(f"diagnosis {d.category} at {d.first_bad_step}")
        if not problems:
            for c in checks:
                for param in PARAMS.get(c.rule, {}):
                    f = _largest(lambda f, c=c, p=param: _fires(files, c, _config(c.rule, p, f, stricter=True)) is None)
                    if f < margin:
                        margin, binding = f, f"{c.rule}.{param}"
    if problems:
        return Verdict(name, False, None, "", problems)
    if margin == float("inf"):
        return Verdict(name, True, None, "exact")
    return Verdict(name, True, margin, binding if margin < FACTORS[-1] else "-")


def check_variant(out: Path, variant: tasks.Variant, names: Sequence[str]) -> list[Verdict]:
    """Generate ``names`` under ``variant`` into ``out`` and judge each."""
    tasks.use_variant(variant)
    verdicts = []
    try:
        for name in names:
            try:
                manifest = generate(out / name, [name])
            except GroundTruthError as exc:
                verdicts.append(Verdict(name, False, None, "", [f"label does not hold: {exc}"]))
                continue
            verdicts.append(judge(out / name, manifest["cases"][0]))
    finally:
        tasks.use_variant(tasks.Variant())
    return verdicts


def _fmt(v: Verdict) -> str:
    if not v.ok:
        return "FAIL"
    if v.margin is None:
        return "exact"
    return f"{'>=' if v.margin >= FACTORS[-1] else ''}{v.margin:g}"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--case", "cases", multiple=True, metavar="NAME", help="Only this case (repeatable).")
@click.option("--quick", is_flag=True, help="The default variant only (margins, no robustness check).")
def main(out_dir: Path, cases: tuple[str, ...], quick: bool) -> None:
    """Margins of every synth case against its deciding thresholds, under each variant."""
    names = list(cases) or list(catalogue())
    variants = VARIANTS[:1] if quick else VARIANTS
    table: dict[str, list[Verdict]] = {}
    for i, variant in enumerate(variants):
        click.echo(f"variant {i}: {variant}", err=True)
        for v in check_variant(out_dir / f"v{i}", variant, names):
            table.setdefault(v.case, []).append(v)
    head = f"{'case':28s} {'binding threshold (variant 0)':30s} "
    head += " ".join(f"{f'v{i}':>6s}" for i in range(len(variants)))
    click.echo(head)
    failed = 0
    for name, row in table.items():
        click.echo(f"{name:28s} {row[0].binding:30s} " + " ".join(f"{_fmt(v):>6s}" for v in row))
        for i, v in enumerate(row):
            failed += not v.ok
            for p in v.problems:
                click.echo(f"    v{i}: {p}")
    click.echo("variants: " + "; ".join(f"v{i} {v}" for i, v in enumerate(variants)))
    (out_dir / "margins.json").write_text(json.dumps(
        {"variants": [str(v) for v in variants], "factors": FACTORS,
         "cases": {n: [{"ok": v.ok, "margin": v.margin, "binding": v.binding, "problems": v.problems} for v in row]
                   for n, row in table.items()}}, indent=2) + "\n", encoding="utf-8")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
