"""Fit the commit ranking on the Megatron-LM dev set and write it into the package.

    python tools/fit_ranking.py [-o src/trainaudit/history/ranking.json]

Every case of ``tests/corpus/megatron`` is audited as ``tools/accuracy.py megatron`` does; the
commits each audit ranked (their features do not depend on the model) and the labelled culprit
make one sample of the conditional-logit model of :mod:`trainaudit.history.ranking`, fitted with
numpy (deterministic). The file records how it was fitted; ``python tools/accuracy.py megatron``
then scores it, in and out of sample.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy

from trainaudit.history.ranking import MODEL_FILE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/fit_ranking.py", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=MODEL_FILE)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = accuracy.score_megatron(Path(tmp))
    model = accuracy.fit_model(rows)
    args.out.write_text(json.dumps(model.to_json(), indent=1) + "\n", encoding="utf-8")
    print(f"{args.out.name}: {model.meta}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
