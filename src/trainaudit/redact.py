"""Mask secrets (tokens, API keys, passwords in URLs) before anything reaches a report."""

from __future__ import annotations

import re

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # scheme://user:password@host -> scheme://user:***@host
    (re.compile(r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^/\s@]+(?=@)"), r"\g<pre>***"),
    # Well-known token shapes.
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"), "***"),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), "***"),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}"), "***"),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "***"),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), "***"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "***"),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), "***"),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"), "***"),  # JWT
    # KEY=value / "token": "value" for secret-looking names.
    (re.compile(r"(?i)(?P<pre>\b[\w\-]*(?:api[_-]?key|token|secret|password|passwd|pwd|auth)[\w\-]*\b['\"]?\s*[:=]\s*['\"]?)"
                r"(?P<val>[^\s'\",;]{6,})"), r"\g<pre>***"),
    (re.compile(r"(?i)(?P<pre>\bauthorization:\s*(?:bearer|token|basic)\s+)\S+"), r"\g<pre>***"),
]


# Every pattern above needs one of these literals (compared lower-cased, a superset of the
# case-sensitive ones): text without any of them, such as a report full of numbers, is returned
# as is without running the expressions.
_NEEDLES: tuple[str, ...] = ("://", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "sk-", "hf_",
                             "xox", "akia", "aiza", "eyj", "api", "token", "secret", "passw", "pwd", "auth")


def mask_secrets(text: str) -> str:
    low = text.lower()
    if not any(n in low for n in _NEEDLES):
        return text
    for pat, repl in _PATTERNS:
        text = pat.sub(repl, text)
    return text
