"""MLflow FileStore run folders: ``mlruns/<experiment_id>/<run_id>/{meta.yaml, metrics/, params/}``.

Each metric file holds one metric, one line per logged value (mlflow ``file_store.py``)::

    <timestamp_ms> <value> <step>[ <dataset_name> <dataset_digest>]

The metric name is the file's path below ``metrics/`` (a key with ``/`` such as ``train/loss``
is stored as nested folders). The reader sees one file at a time and sniffing sees only the
base name, so metric files are recognised by their very regular line shape (a 10+ digit
millisecond timestamp, a Python float, an integer step), and the name is recovered from the
path at read time. A run's ``meta.yaml`` gives the run status as an event (FAILED / KILLED
runs are errors) and, when the folder is on disk, the run's ``params/`` become ``config.*`` meta.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from trainaudit.errors import InputError
from trainaudit.ingest.base import Reader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.model import Event, EventKind, SourceKind
from trainaudit.safeio import load_yaml

METRIC_RE = re.compile(r"^(\d{10,16}) (\S+)(?: (-?\d+)(?: \S+ \S+)?)?$")
# mlflow RunStatus enum (mlflow/protos/service.proto)
RUN_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}


def _float(text: str) -> float | None:
    try:
        return float(text)  # str(float) spellings: nan, inf, -inf, 1e-05
    except ValueError:
        return None


def metric_name(display: str, fallback: str) -> str:
    """``train/loss`` for ``.../mlruns/1/<run>/metrics/train/loss`` (archive members too)."""
    parts = display.rsplit("!", 1)[-1].replace("\\", "/").split("/")
    idx = [i for i, p in enumerate(parts[:-1]) if p == "metrics"]
    if not idx:
        return fallback
    pick = idx[0]
    if "mlruns" in parts:  # mlruns/<exp>/<run>/metrics/...: the fixed position wins over a 'metrics' in a key
        at = parts.index("mlruns") + 3
        if at in idx:
            pick = at
    return posixpath.join(*parts[pick + 1:])


class MLflowReader(Reader):
    name = "mlflow"
    kind = SourceKind.METRICS
    description = "MLflow FileStore run folders (mlruns/<exp>/<run>/metrics/<name>, params/, meta.yaml)"

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text or not sample.lines:
            return 0.0
        if sample.name == "meta.yaml":
            keys = {ln.split(":", 1)[0] for ln in sample.lines if ":" in ln}
            if {"experiment_id", "lifecycle_stage"} <= keys and ({"run_id"} <= keys or {"artifact_location"} <= keys):
                return 0.9
            return 0.0
        lines = [ln.strip() for ln in sample.lines[:50]]
        matches = [METRIC_RE.match(ln) for ln in lines]
        # A cut last line of a live run may not match; everything else must.
        if not all(matches[:-1]) or (not matches[-1] and len(lines) == 1):
            return 0.0
        good = [m for m in matches if m and _float(m.group(2)) is not None]
        if not good:
            return 0.0
        return 0.85 if any(m.group(3) is not None for m in good) else 0.5

    def read(self, inp: InputFile, sink: Sink) -> None:
        if inp.name == "meta.yaml":
            self._meta_yaml(inp, sink)
            return
        metric = metric_name(inp.display, inp.name)
        with inp.open() as stream:
            for no, raw in enumerate(stream, 1):
                m = METRIC_RE.match(raw.decode("utf-8", "replace").strip())
                if m is None:
                    continue  # blank or cut-short line
                value = _float(m.group(2))
                if value is None:
                    continue
                # 2-field legacy lines have no step; MLflow itself reads them as step 0.
                step = int(m.group(3)) if m.group(3) is not None else 0
                sink.add(metric, step, value, no)

    def _meta_yaml(self, inp: InputFile, sink: Sink) -> None:
        with inp.open() as stream:
            text = stream.read().decode("utf-8", "replace")
        meta = load_yaml(text, inp.display, invalid="invalid MLflow meta.yaml")
        if not isinstance(meta, dict):
            raise InputError(f"{inp.display}: invalid MLflow meta.yaml (not a mapping)")
        sink.meta("framework", "mlflow")
        if "run_id" not in meta:  # experiment-level meta.yaml
            if meta.get("name") is not None:
                sink.meta("mlflow.experiment_name", str(meta["name"]))
            return
        sink.meta("mlflow.run_id", str(meta["run_id"]))
        sink.meta("mlflow.experiment_id", str(meta.get("experiment_id", "")))
        if meta.get("run_name"):
            sink.meta("mlflow.run_name", str(meta["run_name"]))
        status_code = meta.get("status")
        status = RUN_STATUS.get(status_code, str(status_code)) if isinstance(status_code, int) else str(status_code)
        sink.meta("mlflow.status", status)
        line_no, raw = 1, ""
        for no, ln in enumerate(text.splitlines(), 1):
            if ln.startswith("status:"):
                line_no, raw = no, ln
                break
        data: dict[str, Any] = {"status": status, "start_time_ms": meta.get("start_time"),
                                "end_time_ms": meta.get("end_time")}
        if status in ("FAILED", "KILLED"):
            kind, msg = EventKind.ERROR, f"MLflow run {meta['run_id']} ended with status {status}"
        else:
            kind, msg = EventKind.PHASE, f"MLflow run {meta['run_id']} status {status}"
            data["phase"] = f"mlflow run {status.lower()}"
            data["completed"] = status == "FINISHED"
        sink.event(Event(kind, msg, inp.display, line_no, raw, data=data))
        if inp.fs_path is not None:
            self._params(inp.fs_path.parent / "params", sink)

    @staticmethod
    def _params(folder: Path, sink: Sink) -> None:
        if not folder.is_dir():
            return
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            try:
                text = f.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
            num = _float(text)
            sink.meta(f"config.{f.relative_to(folder).as_posix()}", num if num is not None else text)
