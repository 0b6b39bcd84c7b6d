"""Names from input (file names that are not UTF-8, archive member names, metric names with
mathtext) reach every output as text, never as an internal error."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from harness import run

LOG = "".join(f" iteration {i}/ 40 | lm loss: {v:.6E} |\n"
              for i, v in enumerate([5.0 - 0.05 * k for k in range(20)] + [float("nan")] * 5, start=1))


def test_file_name_that_is_not_utf8_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with open(os.path.join(os.fsencode(tmp_path / "d"), b"tr\xffain.log"), "w") as f:
        f.write(LOG)
    assert run(["diagnose", "d", "-o", "out", "-q"], tmp_path).code == 1
    answer = json.loads((tmp_path / "out" / "answer.json").read_text(encoding="utf-8"))
    assert any(r["path"].endswith("tr\\xffain.log") for r in answer["source_refs"])
    assert run(["parse", "d", "-o", "s.csv"], tmp_path).code == 0
    assert "tr\\xffain.log" in (tmp_path / "s.csv").read_text(encoding="utf-8")


def test_archive_member_name_that_is_not_utf8(tmp_path: Path) -> None:
    data = LOG.encode()
    with tarfile.open(tmp_path / "t.tar", "w", format=tarfile.GNU_FORMAT) as t:
        info = tarfile.TarInfo(b"run\xfe/train.log".decode("utf-8", "surrogateescape"))
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    assert run(["diagnose", "t.tar", "-o", "out", "-q"], tmp_path).code == 1
    answer = json.loads((tmp_path / "out" / "answer.json").read_text(encoding="utf-8"))
    assert any(r["path"].endswith("run\\xfe/train.log") for r in answer["source_refs"])
    assert run(["parse", "t.tar", "-o", "s.jsonl"], tmp_path).code == 0
    assert run(["parse", "t.tar", "-o", "s.csv"], tmp_path).code == 0


def test_metric_name_with_mathtext_is_plotted_as_text(tmp_path: Path) -> None:
    rows = "".join(f"{i},{100 + i * i}.5\n" for i in range(1, 31))
    (tmp_path / "m.csv").write_text("step,loss$^{x$\n" + rows)
    assert run(["diagnose", "m.csv", "-o", "out", "-q"], tmp_path).code == 1
    assert list((tmp_path / "out" / "plots").glob("*.png"))


def test_parse_into_a_folder_that_does_not_exist_creates_it(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(LOG)
    assert run(["parse", "a.log", "-o", "new/dir/s.csv"], tmp_path).code == 0
    assert (tmp_path / "new" / "dir" / "s.csv").read_text().startswith("source,")
