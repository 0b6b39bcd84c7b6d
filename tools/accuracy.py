"""Accuracy of ``diagnose`` on labelled cases -> docs/accuracy.md.

    python -m accuracy [-o docs/accuracy.md] [--cases DIR] [--shared ../shared]

Two kinds of labelled cases:

- generated: every case of ``synth`` (real tiny torch runs with an injected fault at
  a known step), each of its files diagnosed on its own (a Megatron/HF stdout log, the JSONL
  metrics, the TensorBoard file) and all together;
- public: verbatim sample blocks of ``shared/fixtures/log_samples`` (each with its public
  source), labelled here by hand below.

A case is right on category when the primary category equals the label (or one of the label's
also-acceptable categories), and right on first bad step when the answer falls in the label's
window. A false alarm is a healthy case with any finding above ``info``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainaudit.diagnosis import diagnose_run
from trainaudit.errors import InputError
from trainaudit.ingest import load_run

# (file, '# source:' substring, category, first bad step window or None, note)
PUBLIC: list[tuple[str, str, str, tuple[int, int] | None, str]] = [
    ("keras.txt", "image-segmentation-keras/issues/50", "nan_inf", (1, 1), "Keras epoch with loss: nan"),
    ("keras.txt", "Mobilenet-ssd-keras/issues/21", "nan_inf", (1, 1), "TerminateOnNaN in epoch 1 (the log's step unit is the epoch)"),
    ("hf_transformers.txt", "SY-Xuan/Pink/issues/6", "nan_inf", (1, 1), "HF hidden NaN: loss 0.0, grad_norm nan"),
    ("deepspeed.txt", "transformers/issues/14531", "loss_scale_collapse", None, "loss scale 1, reducing to 1"),
    ("error_signatures.txt", "pytorch/pytorch/issues/18853", "oom", None, "PyTorch 1.x CUDA OOM"),
    ("error_signatures.txt", "GenerateU/issues/10", "oom", None, "PyTorch 2.1 CUDA OOM"),
    ("error_signatures.txt", "murong-xu/CADS/issues/4", "oom", None, "OOM with 9.35 GiB reserved-unallocated"),
    ("error_signatures.txt", "LlamaFactory/issues/6269", "distributed_failure", None, "NCCL watchdog timeout"),
    ("error_signatures.txt", "jade-hpc-gpu", "hardware_fault", None, "uncorrectable ECC error"),
    ("error_signatures.txt", "leptonai/gpud/pull/46", "hardware_fault", None, "Xid 109"),
    ("error_signatures.txt", "NVSentinel/issues/155", "hardware_fault", None, "GPU fallen off the bus"),
    ("error_signatures.txt", "Chinese-LLaMA-Alpaca/issues/534", "loss_scale_collapse", None, "minimum loss scale"),
    ("error_signatures.txt", "hallo2/issues/75", "crash", None, "elastic summary, SIGSEGV"),
    ("megatron.txt", "Megatron-LM/issues/756", "healthy", None, "3 healthy Megatron iterations"),
    ("megatron.txt", "Megatron-Bridge/issues/4024", "healthy", None, "2 healthy Megatron-Bridge iterations"),
    ("hf_transformers.txt", "transformers/pull/35207", "healthy", None, "HF stdout dicts, falling loss"),
]


@dataclass
class Row:
    kind: str
    case: str
    source: str
    label: str
    window: tuple[int, int] | None
    got: str
    verdict: str
    first_bad: int | None
    also: tuple[str, ...] = ()
    error: str = ""

    @property
    def healthy(self) -> bool:
        return self.label == "healthy"

    @property
    def cat_ok(self) -> bool:
        return self.got == self.label or self.got in self.also

    @property
    def step_ok(self) -> bool | None:
        if self.healthy:
            return self.first_bad is None
        if self.window is None:
            return None
        return self.first_bad is not None and self.window[0] <= self.first_bad <= self.window[1]


def _diagnose(paths: list[str]) -> tuple[str, str, int | None, str]:
    try:
        run, _ = load_run(paths)
    except InputError as exc:
        return "-", "-", None, str(exc)
    d = diagnose_run(run)
    return d.category, d.verdict, d.first_bad_step, ""


def synth_rows(root: Path, names: list[str] | None = None) -> list[Row]:
    from synth import catalogue, generate

    rows: list[Row] = []
    for name in names or list(catalogue()):
        out = root / name
        manifest_path = out / "manifest.json"
        try:
            if manifest_path.exists():
                manifest = json.loads(manifest_path.read_text())
            else:
                manifest = generate(out, [name])
        except AssertionError as exc:  # GroundTruthError: the run did not show its fault this time
            rows.append(Row("generated", name, "-", catalogue()[name].category, None, "-", "-", None,
                            error=f"not generated: {exc}"))
            continue
        (lab,) = manifest["cases"]
        window = tuple(lab["first_bad_step_window"]) if lab.get("first_bad_step_window") else None
        files = [f["path"] for f in lab["files"]]
        groups = [[f] for f in files] + ([files] if len(files) > 1 else [])
        for g in groups:
            paths = [str(out / f) for f in g]
            cat, verdict, first, err = _diagnose(paths)
            src = "all files" if len(g) > 1 else Path(g[0]).name if "tfevents" not in g[0] else "tensorboard"
            rows.append(Row("generated", name, src, lab["category"], window, cat, verdict, first,  # type: ignore[arg-type]
                            tuple(lab.get("also_acceptable", ())), err))
    return rows


def public_rows(shared: Path, tmp: Path) -> list[Row]:
    samples = shared / "fixtures" / "log_samples"
    rows: list[Row] = []
    for k, (fname, key, label, window, note) in enumerate(PUBLIC):
        lines: list[str] | None = None
        current: list[str] | None = None
        for line in (samples / fname).read_text(encoding="utf-8").splitlines():
            if line.startswith("# source:"):
                current = [] if key in line else None
                if current is not None:
                    lines = current
            elif current is not None:
                current.append(line)
        if not lines:
            rows.append(Row("public", note, fname, label, window, "-", "-", None, error="block not found"))
            continue
        p = tmp / f"public_{k}.log"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cat, verdict, first, err = _diagnose([str(p)])
        rows.append(Row("public", note, f"{fname}: {key}", label, window, cat, verdict, first, error=err))
    return rows


def render(rows: list[Row], seconds: float) -> str:
    def pct(a: int, b: int) -> str:
        return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"

    lines = ["# Diagnosis accuracy", "",
             "Produced by `python -m accuracy` (generated cases: real tiny torch runs from "
             "`synth`, diagnosed file by file and all files together; public cases: verbatim sample "
             "blocks of `../shared/fixtures/log_samples`, labelled in `trainaudit/diagnosis/accuracy.py`).", ""]
    for kind in ("generated", "public"):
        rs = [r for r in rows if r.kind == kind and not r.error.startswith("not generated")]
        faulty = [r for r in rs if not r.healthy]
        healthy = [r for r in rs if r.healthy]
        stepped = [r for r in faulty if r.step_ok is not None]
        lines += [f"## {kind.capitalize()} cases", "",
                  "| metric | value |", "|---|---|",
                  f"| category accuracy (faulty runs) | {pct(sum(r.cat_ok for r in faulty), len(faulty))} |",
                  f"| first-bad-step accuracy (faulty runs with a labelled window) | "
                  f"{pct(sum(bool(r.step_ok) for r in stepped), len(stepped))} |",
                  f"| false alarms on healthy runs (any finding above info) | "
                  f"{sum(not r.cat_ok for r in healthy)} of {len(healthy)} |", ""]
        lines += ["| case | input | label | first bad (window) | answer | verdict | first bad | ok |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in [x for x in rows if x.kind == kind]:
            win = "-" if r.window is None else (f"{r.window[0]}" if r.window[0] == r.window[1] else f"{r.window[0]}..{r.window[1]}")
            ok = "error: " + r.error if r.error else ("yes" if r.cat_ok and r.step_ok is not False else
                                                      "category" if not r.cat_ok else "step")
            if not r.error and not r.cat_ok and r.step_ok is False:
                ok = "category, step"
            lines.append(f"| {r.case} | {r.source} | {r.label} | {win} | {r.got} | {r.verdict} | "
                         f"{'-' if r.first_bad is None else r.first_bad} | {ok} |")
        lines.append("")
    lines.append(f"Total time {seconds:.0f} s (including training the generated runs on CPU).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accuracy", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=Path("docs/accuracy.md"))
    ap.add_argument("--cases", type=Path, help="folder to generate (or reuse) the synth cases in")
    ap.add_argument("--shared", type=Path, default=Path("../shared"))
    ap.add_argument("--case", action="append", help="only these synth cases")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.cases or Path(tmp) / "synth"
        rows = synth_rows(root, args.case)
        if (args.shared / "fixtures" / "log_samples").is_dir():
            rows += public_rows(args.shared, Path(tmp))
        else:
            print(f"note: {args.shared}/fixtures/log_samples not found; public cases skipped", file=sys.stderr)
    text = render(rows, time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
