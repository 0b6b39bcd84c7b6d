"""The sources' sha256 made in a thread while the run is read is the one build_answer makes itself."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from trainaudit.answer.builder import sha256_of
from trainaudit.diagnosis import diagnose_run
from trainaudit.diagnosis.build import SourceHashes, build_answer
from trainaudit.ingest import load_run
from trainaudit.ingest.sources import expand_inputs

LOG = "".join(f"{{'loss': {3 - i / 100}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'epoch': {i / 100}}}\n"
              for i in range(60)) + "{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.001, 'epoch': 0.6}\n" * 5


def test_plain_files_are_hashed_in_the_thread_and_others_left_to_build_answer(tmp_path: Path) -> None:
    plain = tmp_path / "train.log"
    plain.write_text(LOG, encoding="utf-8")
    packed = tmp_path / "other.log.gz"
    packed.write_bytes(gzip.compress(LOG.encode()))
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "inner.log").write_text(LOG, encoding="utf-8")
    paths = [str(plain), str(packed), str(folder), str(tmp_path / "missing.log")]
    hashes = SourceHashes(paths)
    got = {inp.display: hashes.of(inp) for inp in expand_inputs(paths[:3])}
    assert got[str(plain)] == hashlib.sha256(LOG.encode()).hexdigest()
    assert got[str(plain)] == sha256_of(next(i for i in expand_inputs([str(plain)])).open)
    assert got[str(packed)] is None  # the decompressed bytes: build_answer's own
    assert got[f"{folder}/inner.log"] is None  # not a path given: build_answer's own


def test_an_answer_with_the_thread_s_hashes_is_the_answer_without(tmp_path: Path) -> None:
    plain = tmp_path / "train.log"
    plain.write_text(LOG, encoding="utf-8")
    run, _ = load_run([str(plain)])
    diag = diagnose_run(run)
    with_thread = build_answer([str(plain)], run, diag, hashes=SourceHashes([str(plain)]))
    without = build_answer([str(plain)], run, diag)
    assert with_thread.source_refs[0].sha256 == hashlib.sha256(LOG.encode()).hexdigest()
    assert with_thread.model_dump_json() == without.model_dump_json()
