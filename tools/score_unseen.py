"""Score labelled logs nobody has tuned on yet, once, with the code and model of this checkout.

    python tools/score_unseen.py CASE_DIR... [--record NAME [--what TEXT]]

Each CASE_DIR is a corpus case folder (a log and its ``label.json``, as in ``tests/corpus/logs``),
or a folder of them. A case already in ``tests/corpus/logs``, ``tests/corpus/runs`` or ``tests/corpus/pending`` is left out: it has been seen. Every
case is decided by the shipped model (``src/trainaudit/diagnosis/model.json``) over the rules with
their shipped thresholds, as ``trainaudit diagnose`` decides it, and printed with its label.

``--record NAME`` appends the answers to ``tests/corpus/prospective.json`` as one batch, with the
commit they were made at, before the cases join the corpus (and before any change is made because of
them). It refuses when ``src/`` differs from that commit: the record must name the code that answered.
``python tools/accuracy.py prospective`` scores the recorded answers against the labels.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy
import fit_diagnosis as fd

from trainaudit.diagnosis.model import shipped

RECORD = accuracy.CORPUS / "prospective.json"


def unseen_cases(paths: list[Path]) -> list[accuracy.LogCase]:
    seen = {p.name for root in accuracy.PROSPECTIVE_ROOTS for p in root.iterdir()}
    out: list[accuracy.LogCase] = []
    for p in paths:
        roots = [p] if (p / "label.json").is_file() else sorted(d for d in p.iterdir() if (d / "label.json").is_file())
        for d in roots:
            files = sorted(f for f in d.iterdir() if f.name != "label.json")
            if d.name not in seen and files:
                out.append(accuracy.LogCase(d.name, files[0], json.loads((d / "label.json").read_text(encoding="utf-8"))))
    return out


def score(cases: list[accuracy.LogCase]) -> list[fd.Outcome]:
    loaded = fd.load_all([fd.Case(c, "logs", fd.group_of(str(c.label["source"])), [c.path]) for c in cases])
    model = shipped()
    return [fd._outcome(a, model) for a in fd.analyse_loaded(loaded)]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=accuracy.REPO, check=True, capture_output=True, text=True).stdout.strip()


def record(name: str, outcomes: list[fd.Outcome], what: str | None = None) -> None:
    if _git("status", "--porcelain", "--", "src"):
        raise SystemExit("score_unseen: src/ has changes not committed: commit them so the record names the code")
    doc = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {"batches": []}
    if any(b["batch"] == name for b in doc["batches"]):
        raise SystemExit(f"score_unseen: batch {name!r} is already recorded")
    doc["batches"].append({
        "batch": name, "commit": _git("rev-parse", "--short=7", "HEAD"), "date": datetime.date.today().isoformat(),
        **({"what": what} if what else {}), "cases": [{"case": o.result.case.name, "category": o.result.category, "verdict": o.result.verdict,
                   "confidence": round(o.confidence, 3), "first_bad_step": o.result.first_bad,
                   "step_ok": o.result.step_ok} for o in outcomes]})
    RECORD.write_text(dump(doc), encoding="utf-8")


def dump(doc: dict) -> str:
    """The record with one line per case (a batch's cases read as a table in a diff)."""
    lines = ["{", ' "batches": [']
    for i, b in enumerate(doc["batches"]):
        head = {k: v for k, v in b.items() if k != "cases"}
        lines.append("  " + json.dumps(head)[:-1] + ', "cases": [')
        lines += ["   " + json.dumps(c) + ("," if j < len(b["cases"]) - 1 else "") for j, c in enumerate(b["cases"])]
        lines.append("  ]}" + ("," if i < len(doc["batches"]) - 1 else ""))
    return "\n".join([*lines, " ]", "}"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/score_unseen.py", description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="case folders, or folders of them")
    ap.add_argument("--record", metavar="NAME", help="append the answers to tests/corpus/prospective.json")
    ap.add_argument("--what", metavar="TEXT", help="what the batch is (where its logs come from), for the record")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.is_dir()]
    if missing:
        ap.error(f"not a folder: {', '.join(missing)}")
    cases = unseen_cases(args.paths)
    if args.record and not cases:
        ap.error("no case there is unseen: nothing to record (a case already in logs/, runs/ or pending/ has been seen)")
    outcomes = score(cases)
    for o in outcomes:
        r = o.result
        print(f"{'OK ' if r.cat_ok else 'BAD'} {r.case.name[:60]:60s} label={r.case.category:21s} "
              f"answer={r.category:21s} {r.verdict:12s} confidence={o.confidence:.2f} step_ok={r.step_ok}")
    print(fd.summarise(outcomes))
    if args.record:
        record(args.record, outcomes, args.what)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
