"""Every rule of the registry against its fixture, ``tests/rules/fixtures/<ID>.json`` (as Ruff keeps
``resources/test/fixtures`` beside its rules): each ``fires`` input makes the rule fire with the
category, first bad step and message given, and each ``silent`` input keeps it silent, because a
false alarm is a bug too. Every rule alone also stays silent (nothing above info) on every healthy
log of the corpus and every recorded healthy run. The list of rules comes from the registry: a rule without a fixture fails here.

Fixture format (paths relative to ``tests/``; what each input is: ``fixtures/SOURCES.md``)::

    {"fires": [{"input": ["corpus/logs/<case>/log.txt"], "first_bad_step": 220, "category": "nan_inf",
                "message": "loss is NaN from step"}],
     "silent": [{"input": ["rules/fixtures/data/tiny/healthy.jsonl"]}]}

The rules the golden-value gate or a run-vs-run comparison reports (scope ``gate``) are run by
their producer: an entry says ``"compare": "golden"`` (``input``: the golden file, then the
actual values; ``config``: the test's model_config.yaml) or ``"compare": "runs"`` (``input``:
the baseline runs, then the candidate). So are the rules of ``inspect`` (scope ``inspect``): an
entry names the models file as ``input``, its ``model`` function and, for the checks that need
one, its ``batch`` function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import fit_thresholds
import pytest
from shared_data import CORPUS_LOGS

from trainaudit.answer.schema import Severity
from trainaudit.compare.pipeline import run_golden
from trainaudit.compare.runs import compare_runs
from trainaudit.errors import InputError
from trainaudit.ingest import load_run
from trainaudit.inspect.model import inspect_target
from trainaudit.model import Run
from trainaudit.rules import ALL_RULES, Context, Rule, configured, run_rules
from trainaudit.rules.base import Scope

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ENTRY_KEYS = {"input", "first_bad_step", "category", "message", "compare", "config", "model", "batch"}


@dataclass(frozen=True)
class Found:
    """One finding, whichever layer produced it (a rule's Hit or a comparison's Finding)."""

    category: str
    first_bad_step: int | None
    message: str
    severity: str


def fixture(cls: type[Rule]) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{cls.id}.json").read_text(encoding="utf-8"))


@cache
def _run(inputs: tuple[str, ...]) -> Run:
    run, problems = load_run([str(TESTS / p) for p in inputs])
    assert not [p for p in problems if p.fatal], problems
    return run


def _found(hits: list[Any]) -> list[Found]:
    return [Found(str(h.category), h.first_bad_step, h.message, str(h.severity)) for h in hits]


def alone(cls: type[Rule], inputs: list[str]) -> list[Found]:
    """The rule by itself (with its fitted thresholds) on the run read from ``inputs``."""
    return _found(configured(cls).check(Context.of(_run(tuple(inputs)))))


def inspected(cls: type[Rule], entry: dict[str, Any]) -> list[Found]:
    """The rule's findings as ``inspect`` reports them on the entry's model (and batch)."""
    models = str(TESTS / entry["input"][0])
    batch = f"{models}:{entry['batch']}" if "batch" in entry else None
    return _found([f for f in inspect_target(f"{models}:{entry['model']}", batch).findings if f.rule == cls.id])


def through_engine(cls: type[Rule], entry: dict[str, Any]) -> list[Found]:
    """The rule's findings as the engine reports them: every rule on the run, or the comparison
    that produces a gate rule's findings."""
    paths = [str(TESTS / p) for p in entry["input"]]
    if cls.scope is Scope.INSPECT:
        return inspected(cls, entry)
    if cls.scope is not Scope.GATE:
        return _found([h for h in run_rules(_run(tuple(entry["input"]))) if h.rule == cls.id])
    if entry["compare"] == "golden":
        answer, _, _ = run_golden(paths[0], paths[1:], model_config=str(TESTS / entry["config"]))
    else:
        answer, _, _ = compare_runs(paths[:-1], paths[-1])
    assert answer.validation.all_passed, [c for c in answer.validation.checks if not c.passed]
    return _found([f for f in answer.findings if f.rule == cls.id])


def _matches(found: list[Found], entry: dict[str, Any]) -> bool:
    return any(f.category == entry["category"] and f.first_bad_step == entry["first_bad_step"]
               and entry["message"] in f.message and f.severity != Severity.INFO for f in found)


def _healthy_logs() -> list[Path]:
    out = []
    for d in sorted(p for p in CORPUS_LOGS.iterdir() if p.is_dir()):
        if json.loads((d / "label.json").read_text(encoding="utf-8"))["category"] == "healthy":
            out.extend(f for f in d.iterdir() if f.name != "label.json")
    return out


RULES = [pytest.param(cls, id=cls.id) for cls in ALL_RULES]
RUN_RULES = [pytest.param(cls, id=cls.id) for cls in ALL_RULES if cls.scope is not Scope.GATE]
HEALTHY = _healthy_logs()
# the recorded healthy runs (fixtures/SOURCES.md), which the threshold fit also keeps silent
HEALTHY_RECORDED = [TESTS / p for p in fit_thresholds.HEALTHY_RECORDED]


def _entries(kind: str) -> list[Any]:
    out = []
    for cls in ALL_RULES:
        path = FIXTURES / f"{cls.id}.json"
        entries = fixture(cls)[kind] if path.exists() else []
        out += [pytest.param(cls, e, id=f"{cls.id}-{i}-{Path(e['input'][-1]).parent.name}")
                for i, e in enumerate(entries)]
    return out


@pytest.mark.parametrize("cls", RULES)
def test_every_rule_has_its_fixture(cls: type[Rule]) -> None:
    path = FIXTURES / f"{cls.id}.json"
    assert path.exists(), f"{cls.id} has no fixture: add {path.relative_to(TESTS)} (see this module's docstring)"
    doc = fixture(cls)
    assert set(doc) == {"fires", "silent"}, sorted(doc)
    assert doc["fires"] and doc["silent"], f"{cls.id}: a fixture needs inputs where it fires and where it stays silent"
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    for e in doc["fires"] + doc["silent"]:
        assert set(e) <= ENTRY_KEYS and e["input"], e
        assert all(f"`{p}`" in sources for p in e["input"]), f"{e['input']}: say where it comes from in SOURCES.md"
        assert all((TESTS / p).exists() for p in e["input"] + ([e["config"]] if "config" in e else [])), e
        assert ("compare" in e) is (cls.scope is Scope.GATE), f"{cls.id}: 'compare' is for gate rules only"
        assert ("model" in e) is (cls.scope is Scope.INSPECT), f"{cls.id}: 'model' is for inspect rules only"
    for e in doc["fires"]:
        assert {"first_bad_step", "category", "message"} <= set(e) and e["message"], e


def test_no_fixture_without_a_rule() -> None:
    ids = {cls.id for cls in ALL_RULES}
    assert not {p.stem for p in FIXTURES.glob("*.json")} - ids


@pytest.mark.parametrize("cls,entry", _entries("fires"))
def test_rule_fires_on_its_fixture(cls: type[Rule], entry: dict[str, Any]) -> None:
    if cls.scope not in (Scope.GATE, Scope.INSPECT):
        found = alone(cls, entry["input"])
        assert _matches(found, entry), (entry, found)
        assert found[0].category == entry["category"]  # its first finding is the one the fixture names
    found = through_engine(cls, entry)
    assert _matches(found, entry), (entry, found)


@pytest.mark.parametrize("cls,entry", _entries("silent"))
def test_rule_is_silent_on_its_fixture(cls: type[Rule], entry: dict[str, Any]) -> None:
    if cls.scope not in (Scope.GATE, Scope.INSPECT):
        assert not alone(cls, entry["input"])
    assert not through_engine(cls, entry)


# Healthy pasted logs on which a rule is known to fire (the false alarms docs/accuracy.md counts; "unread":
# the reader finds no metric in the log): pinned, so that a new false alarm fails here and a fixed one must
# leave this list.
KNOWN_LOUD: dict[str, tuple[str, ...]] = {
    "corpus/logs/tf1-kujason-avod-28/log.txt": ("TA102",),
    # logs collected after the rules were written, scored before any change
    "corpus/logs/fairseq-mailong25-self-supervised-speech-recognition-20/log.txt": ("TA104",),
    "corpus/logs/pytorch-loop-pytorch-tutorials-mario-rl/log.txt": ("TA203",),
    "corpus/logs/megatron-deepspeed-HaibaraAiChan-moe-bak-gpt125m-dense/log.txt": ("TA405",),
    # maskrcnn-benchmark's constant warm-up (a third of the lr until iteration 500) ends in a 3x step, and its
    # data time is 59% of each iteration, in a thread about the lr that calls the run normal
    "corpus/logs/maskrcnn-benchmark-tianzhi0549-FCOS-55/log.txt": ("TA206", "TA411"),
    "corpus/logs/paddle-PaddlePaddle-PaddleClas-3203/log.txt": ("TA201",),
    # a DQN's TD loss and environment fps move when learning starts (value targets grow with the return); its
    # 8th point stands 17x above the 7 before it and comes back
    "corpus/logs/stable-baselines3-ZeshiWu-ML-capstone-project-dqn-breakout-lr5e-4/log.txt": ("TA102", "TA406"),
    # step time that grows by design: a batch-size schedule, batches sorted by utterance length in each epoch
    "corpus/logs/pytorch-loop-KellerJordan-modded-nanogpt-fp8downproj-baseline-batch-schedule/log.txt": ("TA406",),
    "corpus/logs/pytorch-loop-SeanNaren-deepspeech.pytorch-127/log.txt": ("TA406",),
    # RTM3D's maintainer log prints its box score under the name "loss": it rises as the model learns
    "corpus/logs/pytorch-loop-Banconxuan-RTM3D-8/log.txt": ("TA201",),
    # Flair's released NER model: its test loss rises 42 % from epoch 4 while F1 keeps improving (a fine-tune
    # growing confident), more than TA301 lets a still-improving score excuse
    "corpus/logs/flair-ner-ml-models-flair-ner-english-large/loss.tsv": ("TA301",),
}


@pytest.mark.parametrize("cls", RUN_RULES)
def test_rule_is_silent_on_every_healthy_run(cls: type[Rule]) -> None:
    assert len(HEALTHY) >= 50
    loud = {}
    for path in HEALTHY + HEALTHY_RECORDED:
        rel = str(path.relative_to(TESTS))
        if KNOWN_LOUD.get(rel) == ("unread",):
            continue
        found = [f for f in alone(cls, [rel]) if f.severity != Severity.INFO]
        if found:
            loud[rel] = found[0].message
    assert set(loud) == {p for p, rules in KNOWN_LOUD.items() if cls.id in rules}, loud


def test_the_known_unread_healthy_logs_are_still_unread() -> None:
    for rel, rules in KNOWN_LOUD.items():
        if rules == ("unread",):
            with pytest.raises(InputError, match="no metrics or events found"):
                load_run([str(TESTS / rel)])
