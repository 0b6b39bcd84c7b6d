"""Run cases and write their files plus ``manifest.json`` (the labels) into an output folder."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainaudit.errors import InputError
from synth import writers
from synth.cases import Case, GroundTruthError, catalogue

MANIFEST = "manifest.json"

STYLE_FILES = {"megatron": ("train.log", "megatron"), "hf": ("stdout.log", "hf")}


def select(names: Sequence[str] | None) -> list[Case]:
    cases = catalogue()
    if not names:
        return list(cases.values())
    unknown = [n for n in names if n not in cases]
    if unknown:
        raise InputError(f"unknown case(s): {', '.join(unknown)} (see --list)")
    return [cases[n] for n in names]


def generate(out_dir: Path, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Train every selected case, write ``out_dir/<case>/...`` and ``out_dir/manifest.json``;
    returns the manifest. Raises :class:`GroundTruthError` if a run does not match its label."""
    try:
        import torch
    except ImportError as exc:  # torch is an optional extra
        raise InputError("synth needs torch: pip install 'trainaudit[torch,tensorboard]'") from exc
    cases = select(names)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    total = time.perf_counter()
    for case in cases:
        entries.append(run_case(case, out_dir))
    manifest = {"generator": "synth", "torch": torch.__version__, "python": platform.python_version(),
                "seconds_total": round(time.perf_counter() - total, 2), "cases": entries}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def run_case(case: Case, out_dir: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    if "framework" in case.tags:
        from synth import frameworks

        files, truth = frameworks.run(case, out_dir)
    else:
        log = case.train()
        try:
            truth = case.truth(log)
        except GroundTruthError as exc:
            raise GroundTruthError(f"case {case.name}: {exc}") from None
        files = write_case(case, log, out_dir / case.name)
    return {
        "case": case.name,
        "category": case.category,
        "also_acceptable": list(case.also_acceptable),
        "healthy": case.healthy,
        "first_bad_step": truth.first_bad_step,
        "first_bad_step_window": list(truth.window) if truth.window else None,
        "fault_step": truth.fault_step,
        "step_unit": truth.facts.get("step_unit", "epoch" if case.name.startswith("overfit") else "step"),
        "style": case.style,
        "description": case.description,
        "files": [{**f, "path": f"{case.name}/{f['path']}"} for f in files],
        "facts": truth.facts,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def write_case(case: Case, log: Any, case_dir: Path) -> list[dict[str, Any]]:
    case_dir.mkdir(parents=True, exist_ok=True)
    files: list[dict[str, Any]] = []
    name, fmt = STYLE_FILES[case.style]
    write = writers.write_megatron if case.style == "megatron" else writers.write_hf
    files.append({"path": name, "format": fmt, "metrics": write(log, case_dir / name)})
    files.append({"path": "metrics.jsonl", "format": "jsonl", "metrics": writers.write_jsonl(log, case_dir / "metrics.jsonl")})
    tb_dir = case_dir / "tb"
    tags = writers.write_tensorboard(log, tb_dir, case.style)
    for ev in sorted(tb_dir.iterdir()):
        files.append({"path": f"tb/{ev.name}", "format": "tensorboard", "metrics": tags})
    if writers.write_stderr(log, case_dir / "stderr.log"):
        files.append({"path": "stderr.log", "format": "traceback", "metrics": []})
    return files
