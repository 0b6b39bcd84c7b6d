"""Weights & Biases run folders (``wandb/[offline-]run-<date>-<id>/files/``).

- ``wandb-history.jsonl`` (legacy clients): one JSON object per ``wandb.log`` call with ``_step``,
  ``_runtime``, ``_timestamp`` and the user's keys (nested dicts are flattened with ``.``, as the
  W&B UI shows them). Step = ``train/global_step`` / ``trainer/global_step`` / ``global_step`` when
  the dict carries one (HF and Lightning log the optimizer step there), else ``_step``.
- ``wandb-summary.json``: the last value of every key -> ``wandb.summary.<key>`` meta. When the
  run folder on disk has no history file (current clients keep history only in the binary
  ``run-<id>.wandb``), the summary values also become series points at the summary's step.
- ``config.yaml``: ``{key: {value: ...}}`` -> ``config.<key>`` meta.
- ``output.log`` is the console: left to the text readers. The binary ``run-<id>.wandb`` is not
  decoded; detection reports it as an unknown binary file (skipped inside a folder).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from trainaudit.errors import InputError
from trainaudit.ingest.base import Reader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.model import SourceKind
from trainaudit.safeio import load_json, load_yaml

HISTORY = "wandb-history.jsonl"
SUMMARY = "wandb-summary.json"
STEP_KEYS = ("train/global_step", "trainer/global_step", "global_step")
KEEP_INTERNAL = {"_runtime"}  # seconds since start: useful for throughput and hangs
SUMMARY_MARK = re.compile(r'"_wandb"\s*:|"_runtime"\s*:')


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a logged dict; media/tables (dicts with ``_type``) are skipped."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if _is_number(v):
            if not key.startswith("_") or key in KEEP_INTERNAL:
                out[key] = float(v)
        elif isinstance(v, dict) and "_type" not in v and not key.startswith("_"):
            out.update(flatten(v, key + "."))
    return out


def step_of(d: dict[str, Any], fallback: int) -> int:
    for k in STEP_KEYS:
        if _is_number(d.get(k)) and math.isfinite(d[k]):
            return int(d[k])
    if _is_number(d.get("_step")):
        return int(d["_step"])
    return fallback


def _kind(name: str, sample_lines: list[str]) -> str | None:
    if name == HISTORY:
        return "history"
    if name == SUMMARY:
        return "summary"
    first = sample_lines[0].strip() if sample_lines else ""
    if name == "config.yaml" or name.endswith((".yaml", ".yml")):
        if any(ln.startswith(("wandb_version:", "_wandb:")) for ln in sample_lines):
            return "config"
        return None
    if first.startswith("{"):
        try:
            obj = load_json(first, name)
        except InputError:
            obj = None
        if isinstance(obj, dict):
            if "_step" in obj and ("_runtime" in obj or "_timestamp" in obj):
                return "summary" if "_wandb" in obj else "history"
            return None
        if first == "{" and any(SUMMARY_MARK.search(ln) for ln in sample_lines):  # pretty-printed summary
            return "summary"
    return None


class WandbReader(Reader):
    name = "wandb"
    kind = SourceKind.METRICS
    description = "W&B run folders: files/wandb-history.jsonl, wandb-summary.json, config.yaml"

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text:
            return 0.0
        kind = _kind(sample.name, sample.lines)
        if kind is None:
            return 0.0
        return 0.95 if sample.name in (HISTORY, SUMMARY, "config.yaml") else 0.9

    def read(self, inp: InputFile, sink: Sink) -> None:
        with inp.open() as stream:
            head = stream.read(65536)
        text_head = head.decode("utf-8", "replace")
        kind = _kind(inp.name, text_head.splitlines()[:50]) or "history"
        sink.meta("framework", "wandb")
        if kind == "history":
            self._history(inp, sink)
        elif kind == "summary":
            self._summary(inp, sink)
        else:
            self._config(inp, sink)

    @staticmethod
    def _history(inp: InputFile, sink: Sink) -> None:
        n = 0
        bad = 0
        with inp.open() as stream:
            for no, raw in enumerate(stream, 1):
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                try:
                    d = load_json(line, inp.display)  # Python's json reads W&B's NaN / Infinity / -Infinity
                except InputError:
                    bad += 1  # a line cut short by a killed run
                    continue
                if not isinstance(d, dict):
                    continue
                n += 1
                step = step_of(d, n)
                for key, value in flatten(d).items():
                    sink.add(key, step, value, no)
                if n == 1 and _is_number(d.get("_timestamp")):
                    sink.meta("wandb.start_timestamp", float(d["_timestamp"]))
        if bad and n == 0:
            raise InputError(f"{inp.display}: no valid JSON line in W&B history ({bad} unreadable lines)")

    @staticmethod
    def _summary(inp: InputFile, sink: Sink) -> None:
        with inp.open() as stream:
            text = stream.read().decode("utf-8", "replace")
        d = load_json(text, inp.display, invalid="invalid W&B summary JSON")
        if not isinstance(d, dict):
            raise InputError(f"{inp.display}: invalid W&B summary JSON (not an object)")
        values = flatten(d)
        for key, value in values.items():
            sink.meta(f"wandb.summary.{key}", value)
        runtime = d.get("_wandb", {}).get("runtime") if isinstance(d.get("_wandb"), dict) else None
        if _is_number(runtime) and runtime is not None:
            sink.meta("wandb.runtime_s", float(runtime))
        # A summary holds each key's LAST value, which need not be at the last step: only use it
        # as data when no history exists beside it (then it is the only data there is).
        if inp.fs_path is not None and not (inp.fs_path.parent / HISTORY).exists():
            step = step_of(d, 0)
            for key, value in values.items():
                sink.add(key, step, value, 1)

    @staticmethod
    def _config(inp: InputFile, sink: Sink) -> None:
        with inp.open() as stream:
            text = stream.read().decode("utf-8", "replace")
        cfg = load_yaml(text, inp.display, invalid="invalid W&B config.yaml")
        if not isinstance(cfg, dict):
            raise InputError(f"{inp.display}: invalid W&B config.yaml (not a mapping)")
        for key, entry in cfg.items():
            if not isinstance(key, str) or key.startswith("_") or key == "wandb_version":
                continue
            value = entry.get("value") if isinstance(entry, dict) and "value" in entry else entry
            _config_meta(sink, f"config.{key}", value)


def _config_meta(sink: Sink, key: str, value: Any) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _config_meta(sink, f"{key}.{k}", v)
    elif value is None or isinstance(value, (str, int, float, bool)):
        sink.meta(key, value)
    else:
        sink.meta(key, json.dumps(value, default=str))
