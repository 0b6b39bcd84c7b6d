"""The one layer every output goes through: secrets masked, terminal escapes stripped, and markup from
input neutralised.

Logs and repositories are written by strangers and reports are posted to issues, job summaries and
Slack, shown in terminals and sent to LLMs. :func:`mask_secrets` (every output: JSON, Markdown,
HTML, terminal, ``watch``, job summaries, posts, LLM requests) first removes every terminal control
sequence (ECMA-48 CSI and OSC, other escapes, C0/C1 controls but tab and newline; an OSC can set the
window title or write the clipboard, https://invisible-island.net/xterm/ctlseqs/ctlseqs.html), so a
token split by a colour code is whole again, then masks secrets: the common providers' key shapes,
PEM private keys, webhook URLs, credentials in URLs (any characters), ``Authorization:`` headers and
values of key-like names. :func:`md_inline` also neutralises raw HTML and Markdown images and links
for text placed into Markdown.

Every pattern here is linear in the length of its input: runs of a class start only where the class
starts (a negative lookbehind), and quantifiers that must not give back are possessive.
"""

from __future__ import annotations

import re

# ECMA-48: CSI ESC [ params intermediates final; OSC ESC ] ... (BEL | ESC \); DCS/SOS/PM/APC ESC P/X/^/_
# ... ST; other two-byte escapes; the 8-bit C1 forms; then any remaining control character.
_CONTROLS = re.compile(
    r"\x1b\[[0-?]*+[ -/]*+[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*+(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*+[0-~]?"
    r"|\x9b[0-?]*+[ -/]*+[@-~]?"
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*+(?:\x07|\x1b\\|\x9c)?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")

_KEY_NAME = re.compile(r"(?i)api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|\bpwd|auth|credential|"
                       r"private[_-]?key|webhook|session[_-]?id|cookie")

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # PEM private keys: the whole block when it is there, else the header and what follows on its line.
    (re.compile(r"-----BEGIN (?:[A-Z0-9]{1,16} ){0,4}PRIVATE KEY-----(?:[\s\S]{0,8000}?-----END (?:[A-Z0-9]{1,16} ){0,4}"
                r"PRIVATE KEY-----|[^\n]*+)"), "***PRIVATE KEY***"),
    # Webhook URLs carry their secret in the path (Slack, Discord, Microsoft Teams / Office 365).
    (re.compile(r"https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)|(?:[\w-]++\.)*+discord(?:app)?\.com/api/"
                r"webhooks|[\w.-]*+webhook\.office\.com|[\w.-]*+\.logic\.azure\.com)/[^\s'\"<>)\]]*+"), "***webhook***"),
    # scheme://user:password@host, the password with any characters (up to the last @ of the URL).
    (re.compile(r"(?<![A-Za-z0-9+.\-])(?P<pre>[A-Za-z][A-Za-z0-9+.\-]*+://[^\s/:@]*+:)[^\s]{0,256}(?=@[^\s@/]++)"),
     r"\g<pre>***"),
    # Well-known token shapes.
    (re.compile(r"(?<![A-Za-z0-9_])(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])glpat-[A-Za-z0-9_\-]{20,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}+"), "***"),  # Stripe
    (re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])xox[abprse]-[A-Za-z0-9\-]{10,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])(?:npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_\-]{50,}+)"), "***"),
    (re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]{10,}+"), "***"),  # JWT
    # A bare AWS secret access key: 40 characters of base64 with upper, lower and a digit or / or +
    # (a git sha is 40 lowercase hex, so it never matches).
    (re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
                r"(?=[A-Za-z0-9/+]{0,39}[0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), "***"),
    # Authorization / Proxy-Authorization headers: whatever scheme, the credentials.
    (re.compile(r"(?i)(?P<pre>(?<![\w-])(?:proxy-)?authorization\s*+[:=]\s*+['\"]?(?:[A-Za-z]++\s++)?)[^\s'\",;]++"),
     r"\g<pre>***"),
]

# NAME=value / "name": "value" / name: value where the name looks like a secret's. The name is a
# whole run (lookbehind + possessive), so each character is looked at a bounded number of times.
_NAMED = re.compile(r"(?<![\w\-])(?P<name>[\w\-]{1,100}+)(?P<sep>['\"]?\s*+[:=]\s*+['\"]?)(?P<val>[^\s'\",;]{6,}+)")


def _named(m: re.Match[str]) -> str:
    if _KEY_NAME.search(m.group("name")) and m.group("val") != "***":
        return f"{m.group('name')}{m.group('sep')}***"
    return m.group(0)


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (tab and newline kept)."""
    return text if text.isprintable() else _CONTROLS.sub("", text)


_SGR = re.compile(r"\x1b\[[0-9;:]{0,64}+m")


def terminal_text(text: str) -> str:
    """Text for a terminal: colours (SGR) kept, every other control stripped, secrets masked."""
    if "\x1b[" not in text:
        return mask_secrets(text)
    pieces = _SGR.split(text)
    colours = _SGR.findall(text)
    out = [mask_secrets(pieces[0])]
    for colour, piece in zip(colours, pieces[1:]):
        out += [colour, mask_secrets(piece)]
    return "".join(out)


def mask_secrets(text: str) -> str:
    """Strip terminal controls, then mask secrets. Idempotent."""
    text = strip_controls(text)
    for pat, repl in _PATTERNS:
        text = pat.sub(repl, text)
    return _NAMED.sub(_named, text)


# Markdown: raw HTML (a tag, a comment, an autolink) needs "<"; images and links need "[" (and
# reference definitions "[x]: url"). Escaped, they show as the characters they are (CommonMark
# 0.31, "Backslash escapes" and "Entity and numeric character references").
BACKTICKS = re.compile(r"`++")  # a run of backticks (the fences around text must be longer)
# ">" starts nothing inline (only a block quote at the start of a line, escaped there), so
# "0.05 -> 50" stays readable in the raw file instead of showing "-&gt;".
_MD_SPECIAL = str.maketrans({"<": "&lt;", "[": "\\[", "]": "\\]", "\n": " ", "\r": " "})


def md_inline(text: str) -> str:
    """Text from input placed into Markdown: masked, on one line, without HTML or images/links."""
    out = mask_secrets(text).translate(_MD_SPECIAL)
    return "\\" + out if out.lstrip().startswith(">") else out


def md_code_block(text: str) -> str:
    """A fenced code block holding ``text`` (masked) literally: the fence is longer than any run of
    backticks inside, so nothing in the text can close it."""
    body = mask_secrets(text)
    longest = max((len(r) for r in BACKTICKS.findall(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{body}\n{fence}"
