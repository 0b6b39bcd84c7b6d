"""Hostile and broken inputs through the CLI: each case ends with exit 0, 1 or 2 (one line on stderr
for 2) within 10 s and 500 MB, writes nothing outside its output folder, and no secret reaches
any output (answer.json, answer.md, the HTML report, the job summary, stdout/stderr, ``watch``).

Every hostile file is generated here, in a temp dir; fake secrets are built from pieces so the
repository holds no real-looking key.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import files_under, run
from trainaudit.ingest import load_run
from trainaudit.ingest.tfrecord import masked_crc32c

ITER = ("iteration {i}/ 100 | consumed samples: {s} | elapsed time per iteration (ms): 100.0 | "
        "learning rate: 1.0E-04 | global batch size: 8 | lm loss: {loss:.6E} | loss scale: 1.0 | "
        "grad norm: 1.0 | number of skipped iterations: 0 | number of nan iterations: 0 |\n")


def megatron(n: int = 20, loss: float = 5.0) -> str:
    return "".join(ITER.format(i=i, s=8 * i, loss=loss - 0.01 * i) for i in range(1, n + 1))


# -- fake secrets (built from pieces) ----------------------------------------------------------
def _secrets() -> dict[str, tuple[str, str]]:
    """name -> (the line a log would hold, the secret part that must not appear anywhere)."""
    gh = "gh" + "p_" + "Ab3" * 12
    slack_hook = "https://hooks.slack.com/services/" + "T0" + "A" * 8 + "/B0" + "C" * 8 + "/" + "x1Y2" * 6
    aws_secret = "wJalr" + "XUtnFEMI/K7MDENG/" + "bPxRfiCY" + "EXAMPLEKEY"[:0] + "AbCdEfGhIjKlMnO"
    aws_secret = (aws_secret + "Q" * 40)[:40]
    pem = "-----BEGIN RSA " + "PRIVATE KEY-----"
    return {
        "github_token": (f"pushing with token {gh} to origin", gh),
        "slack_webhook": (f"notify {slack_hook} failed", slack_hook.rsplit("/", 1)[1]),
        "url_password_slash": ("fetch https://user:pa/ss" + "w0rd@example.org/x.git failed", "pa/ssw0rd"),
        "url_password_at": ("fetch https://user:p@ss" + "w0rd@example.org/x.git failed", "p@ssw0rd"),
        "aws_secret_bare": (f"credentials {aws_secret} loaded", aws_secret),
        "aws_access_key": ("key " + "AK" + "IA" + "Z" * 16 + " in use", "AK" + "IA" + "Z" * 16),
        "pem_header": (f"{pem} MIIEow" + "IBAAKCAQEA" * 3, "MIIEowIBAAKCAQEA"),
        "colour_split_token": (f"token {gh[:10]}\x1b[31m{gh[10:]}\x1b[0m here", gh[10:]),
        "authorization_header": ("Authorization: Bearer " + "eyX" + "Zq9" * 10, "Zq9Zq9Zq9Zq9"),
        "key_like_name": ("WANDB_API_KEY=" + "a1b2" * 10, "a1b2a1b2a1b2"),
        "openai_key": ("using sk-" + "proj-" + "Qw9" * 10, "Qw9Qw9Qw9Qw9"),
        "hf_token": ("hf_" + "Zz8" * 12 + " loaded", "Zz8Zz8Zz8Zz8"),
    }


SECRETS = _secrets()
TRACEBACK = ("Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
             "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n")


def _outputs(out: Path, o: object) -> str:
    texts = [getattr(o, "stdout", ""), getattr(o, "stderr", "")]
    for p in out.rglob("*"):
        if p.is_file() and p.suffix in (".json", ".md", ".html", ".txt", ""):
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(texts)


@pytest.fixture()
def case(tmp_path: Path) -> tuple[Path, Path]:
    work, out = tmp_path / "work", tmp_path / "work" / "out"
    out.mkdir(parents=True)
    return work, out


def _check_writes(work: Path, before: dict[str, float], out: Path) -> None:
    after = files_under(work)
    changed = [p for p, m in after.items() if before.get(p) != m and not p.startswith(str(out))]
    assert not changed, changed


# -- secrets in every output -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_reaches_no_output(name: str, case: tuple[Path, Path]) -> None:
    work, out = case
    line, secret = SECRETS[name]
    log = work / "train.log"
    log.write_text(megatron(10) + line + "\n" + TRACEBACK.replace("Tried", line + " Tried"))
    summary = work / "out" / "summary.md"
    before = files_under(work)
    o = run(["diagnose", str(log), "-o", str(out), "--html", "--github-summary"], cwd=work,
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert o.code in (0, 1)
    o2 = run(["report", str(out / "answer.json"), "-o", str(out / "again.html")], cwd=work)
    o3 = run(["post", str(out / "answer.json"), "--github-issue", "o/r", "--slack-webhook", "https://example.invalid/x"], cwd=work)
    text = _outputs(out, o) + o2.stdout + o3.stdout + o3.stderr
    assert secret not in text
    assert "\x1b" not in text
    _check_writes(work, before, out)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_reaches_no_watch_output(name: str, case: tuple[Path, Path]) -> None:
    work, out = case
    line, secret = SECRETS[name]
    log = work / "train.log"
    log.write_text(megatron(5) + TRACEBACK.replace("Tried", line + " Tried") + line + "\n")
    o = run(["watch", str(log), "--idle-timeout", "0.5", "--interval", "0.1"], cwd=out)
    assert secret not in o.stdout + o.stderr and "\x1b" not in o.stdout


ESCAPES = {
    "osc_title": "\x1b]0;pwned title\x07",
    "osc_clipboard": "\x1b]52;c;" + "ZWNobyBwd25lZA==" + "\x07",
    "osc_st": "\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\",
    "csi_clear": "\x1b[2J\x1b[H",
    "c1_csi": "\x9b31m",
    "bell_backspace": "\x07\x08\x08",
}
MARKUP = {
    "html_img": '<img src="https://evil.example/t.png" onerror="alert(1)">',
    "md_image": "![x](https://evil.example/track.png)",
    "md_link": "[click here](javascript:alert(1))",
    "html_script": "<script>alert(1)</script>",
    "fence_break": "```\n# injected heading",
}


@pytest.mark.parametrize("name", sorted(ESCAPES) + sorted(MARKUP))
def test_escapes_and_markup_from_a_log_are_neutralised(name: str, case: tuple[Path, Path]) -> None:
    work, out = case
    payload = ESCAPES.get(name) or MARKUP[name]
    log = work / "train.log"
    log.write_text(megatron(10) + TRACEBACK.replace("RuntimeError: CUDA", f"RuntimeError: {payload} CUDA"))
    summary = out / "summary.md"
    o = run(["diagnose", str(log), "-o", str(out), "--github-summary"], cwd=work,
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    md = (out / "answer.md").read_text() + (summary.read_text() if summary.exists() else "")
    for text in (md, o.stdout, o.stderr, (out / "answer.json").read_text()):
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    prose = _prose(md)
    assert "<img" not in prose and "<script" not in prose and "![x](" not in prose and "[click here](" not in prose
    assert "\n# injected" not in prose


def _prose(md: str) -> str:
    """Markdown without its code (fenced blocks and code spans render literally, CommonMark 0.31)."""
    out, fence = [], ""
    for line in md.split("\n"):
        s = line.strip()
        if fence:
            if s.startswith(fence) and set(s) == {"`"}:
                fence = ""
            continue
        if s.startswith("```"):
            fence = s[: len(s) - len(s.lstrip("`"))]
            continue
        out.append(re.sub(r"(`+)(?:(?!\1).)*?\1", "", line))
    return "\n".join(out)


# -- resource bombs and pathological text ------------------------------------------------------
def _gzip_line(path: Path, mib: int) -> None:
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(megatron(5).encode())
        chunk = b"a" * (1 << 20)
        for _ in range(mib):
            f.write(chunk)
        f.write(b"\n" + megatron(5).encode())


def _zip_big(path: Path, mib: int) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf, \
            zf.open("train.log", "w", force_zip64=True) as f:
            chunk = b"a" * (1 << 20)
            for _ in range(mib):
                f.write(chunk)


def _tar_big(path: Path, mib: int) -> None:
    with tarfile.open(path, "w:gz", compresslevel=1) as tf:
        info = tarfile.TarInfo("train.log")
        info.size = mib << 20

        class Zeros(io.RawIOBase):
            left = info.size

            def readable(self) -> bool:
                return True

            def readinto(self, b: bytearray) -> int:  # type: ignore[override]
                n = min(len(b), self.left)
                b[:n] = b"a" * n
                self.left -= n
                return n

        tf.addfile(info, io.BufferedReader(Zeros()))


def _many_members(path: Path, n: int, kind: str) -> None:
    body = megatron(2).encode()
    if kind == "zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
            for i in range(n):
                zf.writestr(f"logs/rank{i}.log", body)
    else:
        with tarfile.open(path, "w:gz") as tf:
            for i in range(n):
                info = tarfile.TarInfo(f"logs/rank{i}.log")
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))


def _tar_same_name(path: Path) -> None:
    body = megatron(5).encode()
    with tarfile.open(path, "w") as tf:
        info = tarfile.TarInfo("train.log")
        info.size = len(body)
        tf.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("train.log")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)


def _tfevents(path: Path, length: int) -> None:
    head = struct.pack("<Q", length)
    path.write_bytes(head + struct.pack("<I", masked_crc32c(head)) + b"\x00" * 32)


def _nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _golden_nested(path: Path) -> None:
    path.write_text('{"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1, "values": '
                    + _nested_json(100_000) + "}}")


def _golden_digits(path: Path) -> None:
    path.write_text('{"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1, "values": {"1": '
                    + "9" * 5000 + ', "2": 1.0}}}')


def _yaml_bomb(path: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    lines.append("ENV_VARS:\n  X: *a9\nMETRICS: *a9")
    path.write_text("\n".join(lines) + "\n")


_GOLDEN_VALUES = ", ".join(f'"{i}": {5.0 - 0.01 * i}' for i in range(1, 11))
GOLDEN_OK = f'{{"lm loss": {{"start_step": 1, "end_step": 10, "step_interval": 1, "values": {{{_GOLDEN_VALUES}}}}}}}'

# name -> (builder(work) -> argv, allowed exit codes)
Builder = Callable[[Path], list[str]]


def _file(name: str, content: str | bytes) -> Callable[[Path], Path]:
    def make(work: Path) -> Path:
        p = work / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    return make


def _diag(make: Callable[[Path], Path | None]) -> Builder:
    def build(work: Path) -> list[str]:
        p = make(work) or work / "in"
        return ["diagnose", str(p), "-o", "out"]

    return build


def _with(fn: Callable[[Path], None], name: str) -> Callable[[Path], Path]:
    def make(work: Path) -> Path:
        p = work / name
        fn(p)
        return p

    return make


def _golden(make_golden: Callable[[Path], None], *, config: Callable[[Path], None] | None = None) -> Builder:
    def build(work: Path) -> list[str]:
        (work / "actual.json").write_text(GOLDEN_OK)
        make_golden(work / "golden.json")
        args = ["compare", "--golden", str(work / "golden.json"), str(work / "actual.json"), "-o", "out"]
        if config is not None:
            config(work / "model_config.yaml")
            args += ["--model-config", str(work / "model_config.yaml")]
        return args

    return build


def _fifo(work: Path) -> Path:
    p = work / "train.log"
    os.mkfifo(p)
    return p


def _sparse(work: Path) -> Path:
    p = work / "train.log"
    with open(p, "wb") as f:
        f.truncate(50 << 30)
    return p


def _report_nested(work: Path) -> list[str]:
    (work / "answer.json").write_text('{"final_answer": ' + _nested_json(100_000) + "}")
    return ["report", str(work / "answer.json"), "-o", "out/r.html"]


def _report_digits(work: Path) -> list[str]:
    (work / "answer.json").write_text('{"final_answer": {"summary": ' + "7" * 6000 + "}}")
    return ["report", str(work / "answer.json"), "-o", "out/r.html"]


def _watch(make: Callable[[Path], Path]) -> Builder:
    def build(work: Path) -> list[str]:
        return ["watch", str(make(work)), "--idle-timeout", "0.5", "--interval", "0.1"]

    return build


PHRASES = ["CUDA out of memory. ", "RuntimeError: ", "NCCL watchdog ", "Traceback (most recent call last): ",
           "torch.distributed.DistBackendError: ", "RendezvousTimeoutError ", "Epoch 0: ", "lm loss: 1.0 | ",
           "{'loss': 1.0, ", "loss=1.0, ", "[rank0]: ", "Watchdog caught collective operation timeout: ",
           "Tried to allocate 2.00 GiB ", "iteration 1/ 10 | ", "step 1: train loss 1.0 ", "Xid 79 ",
           "a=1 ", "1 ", "  ", "| ", "1%|", "x_copypaste: 1 "]

CASES: dict[str, Builder] = {
    "mmengine_copypaste_backtracking": _diag(_file("train.log", "2024/05/22 11:05:26 - mmengine - INFO - "
                                                   "bbox_mAP_copypaste: " + "1" * 30 + "x\n")),
    "digits_in_head": _diag(_file("train.log", "1" * 3000 + "\n" + megatron(5))),
    "spaces_in_head": _diag(_file("train.log", "a" + " " * 3000 + "b\n" + megatron(5))),
    "digits_64k": _diag(_file("train.log", "7" * 65536)),
    **{f"long_line_of_phrase_{i}": _diag(_file("train.log", megatron(3) + p * (400_000 // len(p)) + "\n"))
       for i, p in enumerate(PHRASES)},
    "gzip_huge_line": _diag(_with(lambda p: _gzip_line(p, 300), "train.log.gz")),
    "gzip_long_line_under_budget": _diag(_with(lambda p: _gzip_line(p, 40), "train.log.gz")),
    "zip_bomb_member": _diag(_with(lambda p: _zip_big(p, 600), "logs.zip")),
    "tar_gz_bomb_member": _diag(_with(lambda p: _tar_big(p, 600), "logs.tar.gz")),
    "zip_10000_members": _diag(_with(lambda p: _many_members(p, 10_000, "zip"), "logs.zip")),
    "tar_gz_10000_members": _diag(_with(lambda p: _many_members(p, 10_000, "tar"), "logs.tar.gz")),
    "zip_too_many_members": _diag(_with(lambda p: _many_members(p, 10_001, "zip"), "logs.zip")),
    "tar_file_and_symlink_same_name": _diag(_with(_tar_same_name, "logs.tar")),
    "tfevents_huge_length": _diag(_with(lambda p: _tfevents(p, 1 << 60), "events.out.tfevents.1.host")),
    "tfevents_length_2g": _diag(_with(lambda p: _tfevents(p, (1 << 31) - 1), "events.out.tfevents.2.host")),
    "golden_nested_100000": _golden(_golden_nested),
    "golden_5000_digits": _golden(_golden_digits),
    "golden_nan_strings": _golden(lambda p: p.write_text(GOLDEN_OK.replace("4.99", '"NaN"'))),
    "model_config_yaml_bomb": _golden(lambda p: p.write_text(GOLDEN_OK), config=_yaml_bomb),
    "model_config_yaml_deep": _golden(lambda p: p.write_text(GOLDEN_OK),
                                      config=lambda p: p.write_text("METRICS: " + "[" * 5000 + "]" * 5000 + "\n")),
    "report_nested_100000": _report_nested,
    "report_5000_digits": _report_digits,
    "jsonl_5000_digit_int": _diag(_file("metrics.jsonl", '{"step": 1, "loss": ' + "9" * 5000 + "}\n"
                                        + '{"step": 2, "loss": 1.0}\n')),
    "jsonl_nested": _diag(_file("metrics.jsonl", '{"step": 1, "loss": ' + _nested_json(50_000) + "}\n")),
    "trainer_state_nested": _diag(_file("trainer_state.json", '{"log_history": ' + _nested_json(100_000) + "}")),
    "csv_huge_field": _diag(_file("metrics.csv", "step,loss\n1," + "9" * 5000 + "\n2,1.0\n")),
    "fifo": _diag(_fifo),
    "sparse_50g": _diag(_sparse),
    "dev_zero": lambda work: ["diagnose", "/dev/zero", "-o", "out"],
    "nul_bytes": _diag(_file("train.log", b"\x00" * 100_000)),
    "utf16": _diag(_file("train.log", megatron(5).encode("utf-16"))),
    "invalid_utf8": _diag(_file("train.log", megatron(5).encode() + b"\xff\xfe\xc3(" * 1000 + b"\n")),
    "crlf_and_cr_storm": _diag(_file("train.log", megatron(5).replace("\n", "\r\n") + "\r" * 200_000 + "\n")),
    "ansi_storm": _diag(_file("train.log", megatron(5) + "\x1b[" * 100_000 + "\n")),
    "osc_unterminated": _diag(_file("train.log", megatron(5) + "\x1b]0;" + "x" * 200_000 + "\n")),
    "watch_fifo": _watch(_fifo),
    "watch_sparse_50g": _watch(_sparse),
    "watch_huge_line": _watch(_file("train.log", megatron(3) + "b" * (30 << 20) + "\n" + megatron(3))),
    "watch_binary": _watch(_file("train.log", bytes(range(256)) * 200)),
    "parse_fifo": lambda work: ["parse", str(_fifo(work))],
    "empty_file": _diag(_file("train.log", "")),
    "truncated_gzip": _diag(_file("train.log.gz", gzip.compress(megatron(50).encode())[:200])),
    "truncated_zip": _diag(_file("logs.zip", b"PK\x03\x04" + b"\x00" * 100)),
    "zlib_garbage_gzip": _diag(_file("train.log.gz", b"\x1f\x8b\x08\x00" + zlib.compress(b"x" * 1000)[::-1])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_is_handled(name: str, case: tuple[Path, Path]) -> None:
    work, out = case
    args = CASES[name](work)
    before = files_under(work)
    o = run(args, cwd=work)
    _check_writes(work, before, out)
    if name in ("fifo", "parse_fifo", "watch_fifo", "zip_bomb_member", "tar_gz_bomb_member", "zip_too_many_members",
                "golden_nested_100000", "model_config_yaml_bomb", "report_nested_100000", "gzip_huge_line"):
        assert o.code == 2, (o.code, o.stderr)


def test_long_lines_are_cut_and_said_so(case: tuple[Path, Path]) -> None:
    work, _ = case
    log = work / "train.log.gz"
    log.write_bytes(gzip.compress((megatron(5) + "c" * (3 << 20) + "\n" + megatron(5)).encode()))
    run(["parse", str(log)], cwd=work)
    _, problems = load_run([str(log)])
    assert any("cut to their first 1 MiB" in str(p) and not p.fatal for p in problems)


def test_the_suite_has_the_promised_size() -> None:
    assert len(CASES) + 2 * len(SECRETS) + len(ESCAPES) + len(MARKUP) >= 80


def test_answer_json_round_trip_is_bounded(tmp_path: Path) -> None:
    from hypothesis import given, settings, strategies as st

    from trainaudit.redact import mask_secrets

    @settings(max_examples=80, deadline=None)
    @given(st.text(max_size=300))
    def masked_is_stable(s: str) -> None:
        once = mask_secrets(s)
        assert mask_secrets(once) == once and "\x1b" not in once

    masked_is_stable()
    json.dumps({})
