"""Git repositories whose own configuration names commands (built with real git in a temp dir).

Each hostile setting makes git run ``touch <marker>`` if it is honoured; a test passes when no
marker appears. The settings are the ones git documents as running commands on read-only use:
gitattributes(5) ``diff=<driver>`` with ``diff.<driver>.textconv`` / ``.command``, git-config(1)
``core.fsmonitor``, ``core.hooksPath``, ``log.showSignature`` with ``gpg.program``, and a promisor
remote with an ``ext::`` URL (gitremote-helpers(7)) fetched lazily for a missing object.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GOLDEN = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1/golden_values_dev_dgx_h100.json"
HOSTILE_KINDS = ("textconv", "ext_diff", "fsmonitor", "hooks", "signature", "promisor", "environment")


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.org",
           "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.org",
           "GIT_AUTHOR_DATE": "2026-04-01T10:00:00+00:00", "GIT_COMMITTER_DATE": "2026-04-01T10:00:00+00:00",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env, input=stdin).stdout.strip()


def _commit(repo: Path, rel: str, text: str, title: str) -> str:
    p = repo / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "-m", title)
    return git(repo, "rev-parse", "HEAD")


def hostile_repo(root: Path, kind: str, marker: Path) -> dict[str, str]:
    """A small Megatron-like repository (good -> model change -> golden update = bad) whose
    configuration, for ``kind``, runs ``touch marker`` when git honours it."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    touch = f"touch {marker}"
    shas = {"good": _commit(root, "megatron/model.py", "x = 1\n", "Initial import")}
    _commit(root, ".gitattributes", "* diff=evil\n", "Attributes")
    shas["model"] = _commit(root, "megatron/model.py", "x = 2\n", "Change the model")
    shas["bad"] = _commit(root, GOLDEN, '{"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1, '
                                        '"values": {"1": 10.0, "2": 9.0}}}\n', "Refresh golden values")
    cfg = root / ".git" / "config"
    extra = {
        "textconv": f'[diff "evil"]\n\ttextconv = "sh -c \'{touch}\' --"\n\tcachetextconv = false\n',
        "ext_diff": f'[diff "evil"]\n\tcommand = "sh -c \'{touch}\' --"\n[diff]\n\texternal = "sh -c \'{touch}\' --"\n',
        "fsmonitor": f'[core]\n\tfsmonitor = "sh -c \'{touch}\' --"\n',
        "hooks": "[core]\n\thooksPath = hooks\n",
        "signature": f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = {root / 'evil.sh'}\n",
        "promisor": ("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tpartialclone = origin\n"
                     f'[remote "origin"]\n\turl = "ext::sh -c {touch.replace(" ", "% ")}"\n\tpromisor = true\n'
                     '[protocol "ext"]\n\tallow = always\n[protocol]\n\tallow = always\n'),
        "environment": "",
    }[kind]
    cfg.write_text(cfg.read_text() + extra)
    if kind == "hooks":
        hooks = root / "hooks"
        hooks.mkdir()
        for name in ("post-checkout", "post-index-change", "reference-transaction", "post-commit",
                     "pre-auto-gc", "fsmonitor-watchman"):
            (hooks / name).write_text(f"#!/bin/sh\n{touch}\n")
            (hooks / name).chmod(0o755)
    if kind == "signature":
        (root / "evil.sh").write_text(f"#!/bin/sh\n{touch}\n")  # gpg.program is run without a shell
        (root / "evil.sh").chmod(0o755)
        # A commit with a (fake) signature: git log --show-signature hands it to gpg.program.
        body = git(root, "cat-file", "commit", "HEAD")
        header, _, msg = body.partition("\n\n")
        signed = f"{header}\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n -----END PGP SIGNATURE-----\n\n{msg}\n"
        sha = git(root, "hash-object", "-t", "commit", "-w", "--stdin", stdin=signed)
        git(root, "update-ref", "refs/heads/main", sha)
        shas["bad"] = sha
    if kind == "promisor":
        # Drop the blob of the model change: reading its diff needs a lazy fetch from "origin".
        blob = git(root, "rev-parse", f"{shas['model']}:megatron/model.py")
        (root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    return shas
