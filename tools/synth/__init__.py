"""Real tiny training runs with injected faults, labelled, as test and demo data.

``PYTHONPATH=tools python -m synth OUT_DIR [--case NAME ...] [--list]`` trains each case on CPU
(torch, fixed seeds, one thread), writes the files a framework would have written (Megatron-style
or HF-style stdout, ``metrics.jsonl``, TensorBoard events, ``stderr.log`` for crashes) under
``OUT_DIR/<case>/`` and the labels to ``OUT_DIR/manifest.json``. See docs/synth.md.

torch (and tensorboard, transformers, lightning for some cases) is imported lazily: importing
this package does not need it.
"""

from __future__ import annotations

from synth.cases import Case, GroundTruthError, Truth, catalogue
from synth.generate import MANIFEST, generate

__all__ = ["MANIFEST", "Case", "GroundTruthError", "Truth", "catalogue", "generate"]
