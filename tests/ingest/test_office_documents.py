"""Office documents are zip packages of one document's XML: not archives of logs. Given alone
they are one line and exit 2; inside a directory they are skipped with a note."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from shared_data import run_cli, sample_block, write_lines

# The parts of a minimal WordprocessingML package (ECMA-376 Part 1, 11.3.10 main document part;
# Part 2, Open Packaging Conventions: [Content_Types].xml and the package relationships).
CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    '</Types>')
RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="word/document.xml"/></Relationships>')


def _document(paragraphs: list[str]) -> str:
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    return ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
            '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
            f"<w:body>{body}</w:body></w:document>")


def _docx(path: Path) -> Path:
    # A run report as someone writes it up: numbers, and NaN where the loss blew up.
    paras = ["Training notes", "step 1 loss 2.31 lr 0.001", "step 2 loss 2.12 lr 0.001",
             "step 3 loss nan lr 0.001", "The loss became NaN at step 3."]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", CONTENT_TYPES)
        zf.writestr("_rels/.rels", RELS)
        zf.writestr("word/document.xml", _document(paras))
    return path


def _odt(path: Path) -> Path:
    # OpenDocument: the first member is "mimetype", stored uncompressed (ODF 1.2 Part 3, 3.3)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")
        zf.writestr("content.xml", '<?xml version="1.0"?><office:document-content '
                    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0">'
                    "<office:body>step 3 loss nan</office:body></office:document-content>")
    return path


def test_a_docx_given_alone_is_one_line_and_exit_2(tmp_path: Path) -> None:
    doc = _docx(tmp_path / "report.docx")
    for command in (["diagnose", str(doc), "-o", str(tmp_path / "out")], ["parse", str(doc), "-o",
                                                                          str(tmp_path / "s.csv")]):
        res = run_cli(*command)
        assert res.returncode == 2, res.stdout + res.stderr
        err = res.stderr.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in res.stderr
        assert "report.docx" in err and "office document (Word document)" in err
        assert "UNHEALTHY" not in res.stdout and "nan_inf" not in res.stdout


def test_an_odt_given_alone_is_named_as_opendocument(tmp_path: Path) -> None:
    res = run_cli("parse", str(_odt(tmp_path / "notes.odt")), "-o", str(tmp_path / "s.csv"))
    assert res.returncode == 2 and "office document (OpenDocument text)" in res.stderr, res.stderr


def test_office_documents_in_a_directory_are_skipped_with_a_note(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _docx(run / "report.docx")
    _odt(run / "notes.odt")
    write_lines(run / "train.log", sample_block("megatron.txt", "Megatron-LM/issues/756"))
    out = tmp_path / "out"
    res = run_cli("diagnose", str(run), "-o", str(out), "--json")
    assert res.returncode == 0, res.stderr
    assert f"{run}/report.docx: skipped: an office document (Word document)" in res.stderr
    assert f"{run}/notes.odt: skipped: an office document (OpenDocument text)" in res.stderr
    answer = json.loads(res.stdout)
    paths = [s["path"] for s in answer["source_refs"]]
    assert not [p for p in paths if "docx" in p or "odt" in p], paths
    assert answer["final_answer"]["category"] != "nan_inf"


def test_a_plain_zip_of_logs_is_still_an_archive(tmp_path: Path) -> None:
    log = write_lines(tmp_path / "train.log", sample_block("megatron.txt", "Megatron-LM/issues/756"))
    zpath = tmp_path / "artifacts.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.write(log, "logs/train.log")
        zf.writestr("logs/mimetype", "text/plain")  # a member of that name deeper down is no package marker
    res = run_cli("parse", str(zpath), "-o", str(tmp_path / "s.csv"))
    assert res.returncode == 0, res.stderr
    assert "artifacts.zip!logs/train.log" in (tmp_path / "s.csv").read_text()
