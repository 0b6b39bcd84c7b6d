"""A run's own configuration, read from its artifacts with the place each value was read: the
hyper-parameters a log prints (HF ``TrainingArguments`` dumps, argparse ``Namespace``, Megatron's
``arguments`` block, Hydra/YAML ``key: value`` lines), the HF Trainer's ``***** Running training
*****`` block, Lightning's precision and distributed banners, library versions (``pip freeze``
lines, ``torch version 2.3.0``, ``"transformers_version"`` in a saved config), and JSON/YAML config
files inside a run folder or beside a log. Also the run's planned length and whether it says it
finished (:func:`plan_of`).

Only the head and the tail of each text file are searched (a config is printed when training
starts, the end-of-training lines when it stops), and a line that carries a logged metric value is
never read as configuration (``lr=0.001`` on a step line is the lr series, compared step by step).
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainaudit.answer.paths import display_path
from trainaudit.errors import InputError
from trainaudit.ingest.sources import STREAM_ERRORS, InputFile, context_file, expand_inputs
from trainaudit.model import EventKind, Run
from trainaudit.safeio import LIMITS, load_json, load_yaml

HEAD_LINES = 5000  # lines searched from the start of a text file (argument dumps, banners)
TAIL_LINES = 500  # and from its end (end-of-training lines)
MAX_CONFIG_BYTES = 1 << 20  # a JSON/YAML config file larger than this is not read
MAX_BESIDE = 20  # config files read from the folder of a log given on its own
QUOTE_CHARS = 300  # a quoted line is cut to this many characters

# Canonical name -> the spellings frameworks print for it (compared case-insensitively, the last
# dotted part of a key: Hydra's ``optimizer.lr`` is ``lr``).
ALIASES: dict[str, tuple[str, ...]] = {
    "learning_rate": ("learning_rate", "lr", "base_lr", "max_lr", "peak_lr", "init_lr"),
    "min_lr": ("min_lr", "end_lr"),
    "lr_schedule": ("lr_scheduler_type", "lr_scheduler", "lr_decay_style", "lr_schedule"),
    "warmup_steps": ("warmup_steps", "lr_warmup_iters", "warmup_iters", "num_warmup_steps"),
    "warmup_ratio": ("warmup_ratio", "lr_warmup_fraction"),
    "batch_size": ("per_device_train_batch_size", "per_gpu_train_batch_size", "batch_size", "micro_batch_size",
                   "train_micro_batch_size_per_gpu"),
    "global_batch_size": ("global_batch_size", "total_train_batch_size"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", "accumulate_grad_batches", "grad_accum_steps"),
    "fp16": ("fp16",),
    "bf16": ("bf16",),
    "precision": ("precision", "mixed_precision"),
    "optimizer": ("optim", "optimizer", "optimizer_type"),
    "weight_decay": ("weight_decay",),
    "max_grad_norm": ("max_grad_norm", "clip_grad", "gradient_clip_val"),
    "adam_beta1": ("adam_beta1",),
    "adam_beta2": ("adam_beta2",),
    "adam_epsilon": ("adam_epsilon", "adam_eps"),
    "seed": ("seed", "random_seed"),
    "data_seed": ("data_seed",),
    "world_size": ("world_size",),
    "max_steps": ("max_steps", "train_iters", "num_training_steps"),
    "num_train_epochs": ("num_train_epochs", "max_epochs", "num_epochs"),
}
CANONICAL: dict[str, str] = {alias: name for name, aliases in ALIASES.items() for alias in aliases}
# The order differences are reported in: what changes the optimisation first, bookkeeping last.
RANK: tuple[str, ...] = ("learning_rate", "lr_schedule", "warmup_steps", "warmup_ratio", "min_lr", "batch_size",
                         "global_batch_size", "gradient_accumulation_steps", "fp16", "bf16", "precision", "optimizer",
                         "weight_decay", "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon", "world_size",
                         "max_steps", "num_train_epochs")
SEEDS = ("seed", "data_seed")
VERSION = "version:"  # prefix of a library version's name

# ``key=value`` / ``key: value`` / Megatron's ``  key ........ value``; keys after a quote are a
# logged dict's (a metric line), not configuration. Bounded pieces: linear on any line.
KV_RE = re.compile(r"(?<![\w.\-'\"])(?:--)?([A-Za-z_][\w.\-]{0,63}+)(?:\s{0,4}+[=:]\s{0,4}+|\s{1,4}+\.{2,}+\s{0,4}+)"
                   r"['\"]?([^\s,;'\"}\]\)|]{1,64}+)")
# Phrases of the HF Trainer (transformers/trainer.py, ``_inner_training_loop``), Megatron-LM
# (megatron/training/arguments.py), Lightning (lightning/fabric/connector.py, lightning/pytorch/
# trainer/connectors) and accelerate (accelerate/state.py) that give a setting in words.
PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("max_steps", re.compile(r"Total optimization steps = ([\d,]{1,15})")),
    ("num_train_epochs", re.compile(r"Num Epochs = ([\d,]{1,12})")),
    ("batch_size", re.compile(r"Instantaneous batch size per device = ([\d,]{1,12})")),
    ("global_batch_size", re.compile(r"Total train batch size \(w\. parallel, distributed & accumulation\) = "
                                     r"([\d,]{1,15})")),
    ("gradient_accumulation_steps", re.compile(r"Gradient Accumulation steps = ([\d,]{1,12})")),
    ("world_size", re.compile(r"using world size: (\d{1,7})")),
    ("world_size", re.compile(r"MEMBER: \d{1,7}/(\d{1,7})")),
    ("world_size", re.compile(r"Num processes: (\d{1,7})")),
    ("precision", re.compile(r"Using (16bit|bfloat16|16-mixed|bf16-mixed|bf16-true|16-true) "
                             r"(?:Automatic Mixed Precision|None)")),
)
# Lightning's end of fit (lightning/pytorch/loops/fit_loop.py): the limit it reached is its plan.
FIT_STOPPED_RE = re.compile(r"`Trainer\.fit` stopped: `(max_steps|max_epochs)=(\d{1,12})` reached")
# HF Trainer's last info line of ``train()`` (transformers/trainer.py).
TRAINING_COMPLETED_RE = re.compile(r"Training completed\. ")
LIBRARIES = ("torch", "pytorch", "transformers", "lightning", "pytorch_lightning", "pytorch-lightning", "accelerate",
             "deepspeed", "megatron-core", "megatron_core", "transformer_engine", "transformer-engine", "apex", "peft",
             "trl", "jax", "tensorflow", "nccl", "cuda", "cudnn")
# ``torch==2.3.0`` (pip freeze), ``torch version: 2.3.0``, ``PyTorch version 2.3``, ``"transformers_version":
# "4.40.0"`` (a saved HF config), ``deepspeed 0.14.0``.
VERSION_RE = re.compile(r"(?<![\w.\-])(" + "|".join(re.escape(lib) for lib in LIBRARIES) + r")"
                        r"(?:==|\"?_version\"?\s{0,4}+:\s{0,4}+\"?|\s{1,4}+version:?\s{0,4}+v?|\s{1,4}+v?(?=\d))"
                        r"(\d{1,4}\.\d{1,4}[\w.+\-]{0,30}+)", re.IGNORECASE)
CONFIG_NAMES = (".json", ".yaml", ".yml")
# The HF Trainer's training bar: tqdm with no description, first on the console (``  0%|   | 0/80 [``);
# its total is ``max_steps`` (transformers/trainer_callback.py, ProgressCallback.on_train_begin).
TQDM_RE = re.compile(r"(?:^|\r)\s{0,8}+\d{1,3}+%\|[^|\r\n]{0,200}+\|\s{0,4}+\d{1,12}+/(\d{1,12}+) \[")
# Settings whose value is a word (the others must be numbers or booleans: ``seed=seed`` in a
# traceback's source line is no setting).
WORDS = frozenset({"lr_schedule", "optimizer", "precision"})


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration value and where it was read (``line`` 0: a file without lines)."""

    name: str
    value: Any
    path: str
    line: int
    quote: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path

    def shown(self) -> str:
        v = self.value
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)


@dataclass(slots=True)
class Plan:
    """How long the run meant to train and whether it says it finished."""

    planned: int | None = None  # optimizer steps (or iterations) it planned
    planned_from: Setting | None = None
    finished: Setting | None = None  # the end-of-training line (or the reader's end event)
    last_step: int | None = None
    epochs: Setting | None = None  # the epochs it planned, when its plan is in epochs


def _value(text: str) -> Any:
    t = text.strip().strip("'\"").rstrip(".")
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        v = float(t.replace(",", "")) if t[:1].isdigit() or t[:1] in "-+." else None
    except ValueError:
        v = None
    if v is not None and math.isfinite(v):
        return int(v) if v.is_integer() and "." not in t and "e" not in low else v
    return t


def _quote(raw: str) -> str:
    raw = raw.replace("\r", " ").strip()
    return raw if len(raw) <= QUOTE_CHARS else raw[:QUOTE_CHARS - 3] + "..."


def settings_of_line(text: str) -> list[tuple[str, Any]]:
    """The settings one line of a log gives, as ``(canonical name, value)``."""
    out: list[tuple[str, Any]] = []
    for name, pat in PHRASES:
        m = pat.search(text)
        if m:
            out.append((name, _value(m.group(1))))
    for m in VERSION_RE.finditer(text):
        lib = m.group(1).lower().replace("-", "_")
        lib = {"pytorch": "torch", "pytorch_lightning": "lightning", "megatron_core": "megatron_core"}.get(lib, lib)
        out.append((VERSION + lib, m.group(2)))
    if "=" in text or ":" in text or ".." in text:
        for m in KV_RE.finditer(text):
            key = m.group(1).rsplit(".", 1)[-1].lower()
            canonical = CANONICAL.get(key)
            value = _value(m.group(2))
            if canonical is not None and (canonical in WORDS or not isinstance(value, str)):
                out.append((canonical, value))
    return out


def _metric_lines(run: Run) -> dict[str, set[int]]:
    """The lines of each source that carry a logged metric value (they are not configuration)."""
    per: dict[int, list[np.ndarray]] = {}
    for s in run.series.values():
        for src in np.unique(s.src).tolist():
            per.setdefault(int(src), []).append(s.lines[s.src == src])
    out: dict[str, set[int]] = {}
    for src, parts in per.items():
        lines = np.unique(np.concatenate(parts))
        if lines.size and src < len(run.sources):
            near = lines[(lines <= HEAD_LINES) | (lines > lines[-1] - 2 * TAIL_LINES)]
            out[run.sources[src].path] = set(near.tolist())
    return out


def _text_lines(inp: InputFile) -> list[tuple[int, str]]:
    """The head and tail lines of a text input, numbered from 1 by newline (a progress bar's
    carriage returns stay inside its line, as the readers number lines)."""
    head: list[tuple[int, str]] = []
    tail: deque[tuple[int, bytes]] = deque(maxlen=TAIL_LINES)
    inp.line_bytes = LIMITS.line_bytes
    with inp.open() as f:
        for n, raw in enumerate(f, 1):
            if n == 1 and b"\x00" in raw[:4096]:
                return []  # binary (TensorBoard, parquet): no configuration lines
            if n <= HEAD_LINES:
                head.append((n, raw.decode("utf-8", "replace").rstrip("\r\n")))
            else:
                tail.append((n, raw))
    return head + [(n, raw.decode("utf-8", "replace").rstrip("\r\n")) for n, raw in tail]


def _flatten(data: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if depth > 6 or not isinstance(data, dict):
        return out
    for k, v in list(data.items())[:5000]:
        if isinstance(v, dict):
            if set(v) == {"value"} or ("value" in v and "desc" in v):  # W&B config.yaml: {key: {value: ...}}
                out.append((str(k), v["value"]))
            else:
                out += _flatten(v, f"{prefix}{k}.", depth + 1)
        elif not isinstance(v, list):
            out.append((str(k), v))
    return out


def _config_file(inp: InputFile) -> list[Setting]:
    """Settings of a JSON/YAML file (a run's config, ``trainer_state.json``'s top level)."""
    if inp.size > MAX_CONFIG_BYTES:
        return []
    try:
        with inp.open() as f:
            text = f.read(MAX_CONFIG_BYTES + 1).decode("utf-8", "replace")
        data = load_json(text, inp.display) if inp.name.lower().endswith(".json") else load_yaml(text, inp.display)
    except (InputError, OSError, *STREAM_ERRORS):
        return []  # not a readable config: the run's logs decide
    lines = text.split("\n")
    out: list[Setting] = []
    for key, value in _flatten(data):
        last = key.rsplit(".", 1)[-1]
        lib = last.lower().removesuffix("_version") if last.lower().endswith("_version") else None
        name = VERSION + lib if lib in {x.replace("-", "_") for x in LIBRARIES} else CANONICAL.get(last.lower())
        if name is None or isinstance(value, (dict, list)) or value is None:
            continue
        no = next((i for i, ln in enumerate(lines[:HEAD_LINES * 4], 1)
                   if f'"{last}"' in ln or ln.lstrip().startswith((f"{last}:", f"{last} :"))), 0)
        out.append(Setting(name, _value(str(value)), display_path(inp.display), no,
                           _quote(lines[no - 1]) if no else ""))
    return out


def _inputs(paths: list[str]) -> list[InputFile]:
    """The user's inputs, plus the JSON/YAML files beside a log given on its own."""
    out = expand_inputs(paths)
    for given in paths:
        p = Path(given)
        if p.is_file() and not p.name.lower().endswith(CONFIG_NAMES):
            beside = sorted(f for f in p.parent.iterdir() if f.is_file() and f.name.lower().endswith(CONFIG_NAMES)
                            and not f.name.startswith("."))[:MAX_BESIDE]
            out.extend(expand_inputs([str(f) for f in beside]))
    return out


def read_settings(run: Run, paths: list[str]) -> dict[str, Setting]:
    """Every setting the run's artifacts give, the first place each was read winning (a log's
    argument dump before a later echo)."""
    found: dict[str, Setting] = {}
    metric_lines = _metric_lines(run)
    ended: Setting | None = None
    bar: Setting | None = None
    for inp in _inputs(paths):
        try:
            if context_file(inp.name) == "configuration":
                for s in _config_file(inp):
                    found.setdefault(s.name, s)
                continue
            lines = _text_lines(inp)
        except (OSError, InputError, *STREAM_ERRORS):
            continue
        skip = metric_lines.get(inp.display, set())
        shown = display_path(inp.display)
        for no, text in lines:
            # a progress bar's line carries metrics, and may end with the end-of-fit message after a \r
            if bar is None and "%|" in text:
                m = TQDM_RE.search(text)
                if m:
                    bar = Setting("max_steps", int(m.group(1)), shown, no, _quote(text[:m.end()]))
            if ended is None and ("Training completed" in text or "stopped: `max_" in text):
                m = TRAINING_COMPLETED_RE.search(text) or FIT_STOPPED_RE.search(text)
                if m:
                    ended = Setting("finished", True, shown, no, _quote(text[m.start():]))
                    if m.re is FIT_STOPPED_RE:
                        name = "max_steps" if m.group(1) == "max_steps" else "num_train_epochs"
                        found.setdefault(name, Setting(name, int(m.group(2)), shown, no, _quote(text[m.start():])))
            if no in skip:
                continue
            for name, value in settings_of_line(text):
                found.setdefault(name, Setting(name, value, shown, no, _quote(text)))
    if ended is not None:
        found.setdefault("finished", ended)
    if bar is not None:
        found.setdefault("max_steps", bar)
    return found


def plan_of(run: Run, settings: dict[str, Setting], last_step: int | None) -> Plan:
    """The planned length (``max_steps`` / ``train_iters`` / the HF "Total optimization steps" /
    Lightning's ``max_steps`` reached) and the end-of-training marker: a reader's end event (HF
    ``train_runtime`` summary, ``trainer_state.json`` at ``max_steps``, Lightning's "`Trainer.fit`
    stopped", Megatron's "after training is done") or HF's "Training completed." line."""
    plan = Plan(last_step=last_step, epochs=settings.get("num_train_epochs"))
    s = settings.get("max_steps")
    if s is not None and isinstance(s.value, int) and s.value > 0:
        plan.planned, plan.planned_from = s.value, s
    else:
        total = run.meta.get("train_iters") or run.meta.get("max_steps")
        if isinstance(total, int) and total > 0:
            plan.planned = total
    for e in run.events:
        if e.kind is EventKind.PHASE and e.data.get("completed"):
            plan.finished = Setting("finished", True, display_path(e.source), e.line, _quote(e.raw or e.message))
            break
    if plan.finished is None:
        plan.finished = settings.get("finished")
    return plan
