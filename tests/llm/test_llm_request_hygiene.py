"""What leaves the machine for an LLM provider, read off a real HTTP server on 127.0.0.1: a secret in a
log line (an AWS key, a GitHub token, a Slack webhook, ...) arrives masked, terminal escapes (OSC 52
clipboard writes, window titles, CSI and 8-bit C1 controls) arrive stripped, and markup (tags,
character references) arrives only as JSON escapes, for every provider's request shape.

The secret-shaped strings are assembled here at run time from pieces, so no file of the repository
holds one whole (secret scanners would flag it, and none of them is real)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import sample_block, write_lines

import trainaudit
from trainaudit.answer.schema import Answer
from trainaudit.diagnosis import build_answer, diagnose_run
from trainaudit.ingest import load_run
from trainaudit.llm import narrate, parse_spec

SRC = Path(trainaudit.__file__).resolve().parents[1]
ITER_LINES = sample_block("megatron.txt", "Megatron-LM/issues/756")

# kind -> (what the log holds, the part of it that must not arrive)
SECRETS = {
    "aws access key id": ("AKIA" + "Q3EGKR7ZX2" + "MPLN4T",) * 2,
    "aws secret access key": ("k3Jd8" + "Q/pLm2Vb7Rt+Wn4Yc" + "6Hs1Fg0Aq5Ze9Xu2Io",) * 2,
    "github token": ("ghp_" + "a1B2c3D4e5F6g7H8i9J0" + "kLmNoPqRsTuVwXyZ12",) * 2,
    "github fine-grained token": ("github_pat_" + "11ABCDEFG0" + "abcdefghijklmnopqrstuv",) * 2,
    "slack webhook": ("https://hooks.slack.com/services/" + "T0AB1CD2E/B0FG3HI4J/" + "xYz12AbC34dEf56GhI78jKl9",
                      "T0AB1CD2E/B0FG3HI4J/" + "xYz12AbC34dEf56GhI78jKl9"),
    "slack bot token": ("xoxb-" + "1234567890-" + "0987654321-AbCdEfGhIjKlMnOp",) * 2,
    "password in a url": ("https://ci:" + "Pa55w0rdZq9" + "@artifacts.example.com/x", "Pa55w0rdZq9"),
}
# Bytes that must not arrive: ESC and BEL (raw or as JSON escapes), C1 controls, raw markup.
ESCAPES = "\x1b]52;c;Y3VybCBldmlsLnNo\x07" + "\x1b]0;owned\x07" + "\x1b[2J" + "\x9b31m" + "\x1bP1$r\x1b\\"
MARKUP = "<script>alert(1)</script> <img src=x onerror=alert(2)> &#x1b;[31m"
FORBIDDEN = ["\x1b", "\\u001b", "\\u001B", "\x07", "\\u0007", "\x9b", "\\u009b", "<script", "<img", "&#x1b;"]


def _crash_log(path: Path, secret: str) -> None:
    write_lines(path, ITER_LINES[:2] + [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        f"RuntimeError: upload failed with {secret} {ESCAPES}{MARKUP}",
    ])


def _answer(tmp_path: Path, secret: str, monkeypatch: pytest.MonkeyPatch) -> Answer:
    monkeypatch.chdir(tmp_path)
    _crash_log(tmp_path / "crash.log", secret)
    run, _ = load_run(["crash.log"])
    return build_answer(["crash.log"], run, diagnose_run(run))


def _assert_clean(body: bytes, secret: str) -> str:
    sent = body.decode()
    assert secret not in sent
    for piece in (secret[:10], secret[-10:]):  # no recognisable part of it either
        assert piece not in sent, piece
    for bad in FORBIDDEN:
        assert bad not in sent, repr(bad)
    return sent


def _user_text(provider: str, body: dict) -> str:  # type: ignore[type-arg]
    if provider == "openai":
        return str(body["messages"][1]["content"])
    if provider == "anthropic":
        return str(body["messages"][0]["content"])
    return str(body["contents"][0]["parts"][0]["text"])


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_secrets_and_escapes_never_reach_the_provider(tmp_path: Path, fake_llm, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                      kind: str, provider: str) -> None:
    text, secret = SECRETS[kind]
    answer = _answer(tmp_path, text, monkeypatch)
    fake_llm.completion = "{}"
    base = f"{fake_llm.url}/v1" if provider == "openai" else fake_llm.url
    spec = parse_spec(f"{provider}:test-model", base, 10.0,
                      environ={"ANTHROPIC_API_KEY": "sk-ant-" + "test-key-0123456789abcdefghij",
                               "GEMINI_API_KEY": "AIza" + "TestKey"})
    narrate(answer, spec)
    [req] = fake_llm.requests
    _assert_clean(req.body, secret)
    # Not vacuous: the line was sent, masked, and its markup decodes back to the text the log holds.
    user = _user_text(provider, req.json)
    bundle = json.loads(user.split("BEGIN_EVIDENCE\n", 1)[1].rsplit("\nEND_EVIDENCE", 1)[0])
    decoded = json.dumps(bundle, ensure_ascii=False)
    assert "upload failed with " in decoded and "***" in decoded
    assert "<script>alert(1)</script>" in decoded  # as data, once decoded


def test_through_the_cli_with_every_secret_at_once(tmp_path: Path, fake_llm, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # One secret per line of the traceback's message, so none is cut off by the quote length.
    lines = ITER_LINES[:2] + ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>']
    lines += [f"    secret_{i} = '{text}' {ESCAPES}{MARKUP}" for i, (text, _) in enumerate(SECRETS.values())]
    lines.append(f"RuntimeError: upload failed {ESCAPES}{MARKUP} " + " ".join(t for t, _ in SECRETS.values()))
    write_lines(tmp_path / "crash.log", lines)
    fake_llm.completion = "{}"
    env = {**os.environ, "PYTHONPATH": str(SRC)}  # this checkout's package, whatever the working folder
    r = subprocess.run([sys.executable, "-m", "trainaudit", "diagnose", "crash.log", "--llm", "openai:test-model",
                        "--llm-base-url", f"{fake_llm.url}/v1", "-o", "out", "--quiet"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr  # the run crashed
    [req] = fake_llm.requests
    for _, secret in SECRETS.values():
        _assert_clean(req.body, secret)
    assert "upload failed" in req.body.decode()
