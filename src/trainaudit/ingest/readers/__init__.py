"""All readers, in tie-break order (earlier wins when two sniff the same confidence).

Each module defines one or more :class:`~trainaudit.ingest.base.Reader` subclasses; add new
ones to ``READER_CLASSES``.
"""

from __future__ import annotations

from trainaudit.ingest.base import LineReader, Reader
from trainaudit.ingest.readers.composer import ComposerReader
from trainaudit.ingest.readers.deepspeed import DeepSpeedReader
from trainaudit.ingest.readers.fairseq import FairseqReader
from trainaudit.ingest.readers.generic import CsvReader, JsonlReader
from trainaudit.ingest.readers.golden import GoldenValuesReader
from trainaudit.ingest.readers.hf import HFReader, HFTrainerStateReader
from trainaudit.ingest.readers.keras import KerasCSVReader, KerasReader
from trainaudit.ingest.readers.lightning import LightningCSVReader, LightningReader
from trainaudit.ingest.readers.megatron import MegatronReader
from trainaudit.ingest.readers.mlflow import MLflowReader
from trainaudit.ingest.readers.mmengine import MMEngineReader
from trainaudit.ingest.readers.monitor import MonitorReader
from trainaudit.ingest.readers.nanogpt import NanoGPTReader
from trainaudit.ingest.readers.nemo import NemoReader
from trainaudit.ingest.readers.tensorboard import TensorBoardReader
from trainaudit.ingest.readers.text import TextLogReader
from trainaudit.ingest.readers.torchtitan import TorchtitanReader
from trainaudit.ingest.readers.ultralytics import UltralyticsReader
from trainaudit.ingest.readers.wandb import WandbReader

READER_CLASSES: list[type[Reader]] = [
    MegatronReader,
    GoldenValuesReader,
    TensorBoardReader,
    MLflowReader,
    WandbReader,
    HFReader,
    HFTrainerStateReader,
    LightningReader,
    LightningCSVReader,
    KerasReader,
    KerasCSVReader,
    NanoGPTReader,
    TorchtitanReader,
    ComposerReader,
    NemoReader,
    DeepSpeedReader,
    MMEngineReader,
    FairseqReader,
    UltralyticsReader,
    MonitorReader,
    JsonlReader,
    CsvReader,
    TextLogReader,
]


def _make(cls: type[Reader]) -> Reader:
    if cls is DeepSpeedReader:
        # Plain text gives nothing; CSV/JSONL are not logs DeepSpeed prints into.
        others = [c() for c in READER_CLASSES if issubclass(c, LineReader) and c is not DeepSpeedReader
                  and c.name not in ("text", "csv", "jsonl")]
        return DeepSpeedReader([r for r in others if isinstance(r, LineReader)])
    return cls()


def all_readers() -> list[Reader]:
    return [_make(cls) for cls in READER_CLASSES]


def reader_by_name(name: str) -> Reader | None:
    for cls in READER_CLASSES:
        if cls.name == name:
            return _make(cls)
    return None
