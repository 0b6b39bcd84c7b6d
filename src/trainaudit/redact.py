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

import html
import json
import math
import re
from typing import Any

# ECMA-48: CSI ESC [ params intermediates final; OSC ESC ] ... (BEL | ESC \); DCS/SOS/PM/APC ESC P/X/^/_
# ... ST; other two-byte escapes; the 8-bit C1 forms; then any remaining control character.
_CONTROLS = re.compile(
    r"\x1b\[[0-?]*+[ -/]*+[@-~]?"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*+(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*+[0-~]?"
    r"|\x9b[0-?]*+[ -/]*+[@-~]?"
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*+(?:\x07|\x1b\\|\x9c)?"
    # A CSI written as an escape in JSON or source text ("\u001b[31m", "\x1b[", "\033["): a token a
    # JSON log stores split by a colour code is whole again once it goes.
    r"|\\(?:u001[bB]|x1[bB]|033)\[[0-?]{0,32}+[ -/]{0,8}+[@-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    # Bidirectional controls (embeddings, overrides, isolates, marks): they reorder what a reader sees
    # against what the bytes say, https://trojansource.codes/ (CVE-2021-42574).
    r"|[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")

_KEY_NAME = re.compile(r"(?i)api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|\bpwd|auth|credential|"
                       r"private[_-]?key|webhook|session[_-]?id|cookie|account[_-]?key|(?:^|[_-])sig$")

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
    # GitLab: personal, deploy, feed, OAuth-app, runner, CI-build, incoming-mail, pipeline-trigger,
    # agent and OAuth-secret tokens and runner registration tokens (the prefixes of detect-secrets'
    # gitlab_token.py, https://github.com/Yelp/detect-secrets/blob/master/detect_secrets/plugins/gitlab_token.py).
    (re.compile(r"(?<![A-Za-z0-9_])(?:(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent|gloas)-|GR1348941)"
                r"[A-Za-z0-9_\-]{20,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}+"), "***"),  # Stripe
    (re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])xox[aboprse]-[A-Za-z0-9\-]{10,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])(?:npm_[A-Za-z0-9]{36}|pypi-AgE[A-Za-z0-9_\-]{50,}+)"), "***"),
    (re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]{10,}+"), "***"),  # JWT
    # A bare AWS secret access key: 40 characters of base64 with upper, lower and a digit or / or +
    # (a git sha is 40 lowercase hex, so it never matches).
    (re.compile(r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
                r"(?=[A-Za-z0-9/+]{0,39}[0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), "***"),
    # Shapes from maintained rule sets: gitleaks (https://github.com/gitleaks/gitleaks/blob/master/config/gitleaks.toml,
    # rules sendgrid-api-token, grafana-cloud-api-token, grafana-service-account-token) and detect-secrets
    # (https://github.com/Yelp/detect-secrets/tree/master/detect_secrets/plugins, azure_storage_key.py).
    (re.compile(r"(?<![A-Za-z0-9_])SG\.[A-Za-z0-9_\-]{16,}+\.[A-Za-z0-9_\-]{16,}+"), "***"),  # SendGrid
    (re.compile(r"(?<![A-Za-z0-9_])(?:glsa_[A-Za-z0-9]{20,}+_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}+={0,2})"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_])dckr_pat_[A-Za-z0-9_\-]{20,}+"), "***"),  # Docker Hub personal access token
    # More shapes of detect-secrets' plugins (https://github.com/Yelp/detect-secrets/tree/master/detect_secrets/plugins):
    # artifactory.py (API token; its "AP..." password shape also matches ordinary upper-case words, so
    # it is left to the key=value rule), discord.py (bot token), mailchimp.py, square_oauth.py (and the
    # access token sq0atp-), telegram_token.py, twilio.py (account SID and API key).
    (re.compile(r"(?<![A-Za-z0-9])AKC[A-Za-z0-9]{10,}+"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27}(?![A-Za-z0-9_\-])"),
     "***"),
    (re.compile(r"(?<![0-9a-z])[0-9a-z]{32}-us[0-9]{1,2}(?![0-9])"), "***"),
    (re.compile(r"(?<![A-Za-z0-9_\-])sq0(?:csp|atp)-[0-9A-Za-z_\-]{22,}+"), "***"),
    (re.compile(r"(?<![0-9:])[0-9]{8,10}:[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), "***"),
    (re.compile(r"(?<![A-Za-z0-9])(?:AC|SK)[0-9a-z]{32}(?![A-Za-z0-9])"), "***"),
    # Azure storage connection strings and shared access signatures: AccountKey=, SharedAccessKey=, sig=.
    (re.compile(r"(?i)(?P<pre>(?<![A-Za-z0-9_])(?:AccountKey|SharedAccessKey|sig)=)[A-Za-z0-9+/%=]{8,}+"), r"\g<pre>***"),
    # A DER private key in base64 without its PEM lines (a GCP service-account "private_key" pasted
    # bare): PKCS#1 and PKCS#8 both start SEQUENCE, INTEGER 0 ("MII...IBA"), certificates do not.
    (re.compile(r"(?<![A-Za-z0-9+/])MII[A-Za-z0-9+/]{3}IBA[A-Za-z0-9+/]{16,}+(?:(?:\\n|\n)[A-Za-z0-9+/]++)*+=*+"),
     "***PRIVATE KEY***"),
    # `wandb login KEY`: a W&B API key is 40 hex characters (https://docs.wandb.ai/ref/cli/wandb-login/).
    (re.compile(r"(?i)(?P<pre>\bwandb\s++login\s++(?:--?[\w-]++\s++)*+)[0-9a-f]{40}(?![0-9a-f])"), r"\g<pre>***"),
    # Credentials in a percent-encoded URL (a URL inside a query string): scheme%3A%2F%2Fuser%3Apassword%40host.
    # The password is bounded (256), so a line of "%3A%2F%2Fa%3A" repeated costs linear time.
    (re.compile(r"(?i)(?P<pre>%3A%2F%2F[A-Za-z0-9._~\-]{0,256}+%3A)(?:[^\s&@/%]|%(?!40)){1,256}+(?=%40)"),
     r"\g<pre>***"),
    # Authorization / Proxy-Authorization headers: whatever scheme, the credentials.
    (re.compile(r"(?i)(?P<pre>(?<![\w-])(?:proxy-)?authorization\s*+[:=]\s*+['\"]?(?:[A-Za-z]++\s++)?)[^\s'\",;]++"),
     r"\g<pre>***"),
]

# NAME=value / "name": "value" / name: value where the name looks like a secret's. The name is a
# whole run (lookbehind + possessive), so each character is looked at a bounded number of times.
# The quotes may come escaped, once or more (JSON ``\"`` or ``\\\"``, HTML ``&quot;`` / ``&#39;``): a value
# encoded once already.
_NAMED = re.compile(r"(?<![\w\-])(?P<name>[\w\-]{1,100}+)"
                    r"(?P<sep>(?:\\{0,8}+['\"]|&quot;|&#0?39;|&#x27;)?\s*+[:=]\s*+(?:\\{0,8}+['\"]|&quot;|&#0?39;|&#x27;)?)"
                    r"(?P<val>[^\s'\",;\\]{6,}+)")
# ``--token VALUE`` / ``password VALUE``: a key-like word, blanks, then a value that looks random.
_WORD_VALUE = re.compile(r"(?<![\w\-])(?P<name>--?[\w\-]{1,60}+|[\w\-]{1,60}+)(?P<sep>[ \t]++)"
                         r"(?P<val>[^\s'\",;\\]{16,}+)")


def entropic(value: str) -> bool:
    """Whether ``value`` looks random (a key, not a word or a path): 16 characters or more with
    digits and letters, and at least 3 bits of Shannon entropy per character."""
    if len(value) < 16 or not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in counts.values()) >= 3.0


def _named(m: re.Match[str]) -> str:
    if _KEY_NAME.search(m.group("name")) and m.group("val") != "***":
        return f"{m.group('name')}{m.group('sep')}***"
    return m.group(0)


def _word_value(m: re.Match[str]) -> str:
    if _KEY_NAME.search(m.group("name")) and entropic(m.group("val")):
        return f"{m.group('name')}{m.group('sep')}***"
    return m.group(0)


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (tab and newline kept)."""
    return text if text.isprintable() and "\\" not in text else _CONTROLS.sub("", text)


_SGR = re.compile(r"\x1b\[[0-9;:]{0,64}+m")
# A line that GitHub Actions reads as a workflow command: "::name ...::" (after leading white space,
# which the runner trims) or the older "##[name]" form,
# https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions.
_COMMAND_START = re.compile(r"(?m)^(?P<pre>[^\S\n]*+(?:\x1b\[[0-9;:]{0,64}+m[^\S\n]*+)*+)(?=::|##\[)")
_OWN_COMMANDS: set[str] = set()  # workflow command lines this program built itself (``workflow_line``)


def workflow_line(command: str) -> str:
    """A workflow command built by this program (its parts already escaped for the runner): the one
    kind of line :func:`terminal_text` lets start with ``::``."""
    line = mask_secrets(command).replace("\n", "%0A")
    _OWN_COMMANDS.add(line)
    return line


def _no_command(m: re.Match[str]) -> str:
    end = m.string.find("\n", m.end())
    if m.string[m.end():None if end < 0 else end] in _OWN_COMMANDS:
        return m.group(0)
    return m.group("pre") + "\\"


def terminal_text(text: str, line_start: bool = True) -> str:
    """Text for a terminal (the one encoder of stdout and stderr): colours (SGR) kept, every other
    control and bidirectional control stripped, secrets masked, and no line starts a GitHub Actions
    workflow command unless this program built it (``workflow_line``). ``line_start``: whether
    ``text`` begins a line (a writer that got part of a line before says False)."""
    if "\x1b[" not in text:
        out = mask_secrets(text)
    else:
        pieces = _SGR.split(text)
        colours = _SGR.findall(text)
        parts = [mask_secrets(pieces[0])]
        for colour, piece in zip(colours, pieces[1:]):
            parts += [colour, mask_secrets(piece)]
        out = "".join(parts)
    if "::" not in out and "##[" not in out:
        return out
    if line_start:
        return _COMMAND_START.sub(_no_command, out)
    first, sep, rest = out.partition("\n")
    return first + sep + _COMMAND_START.sub(_no_command, rest) if sep else out


def terminal_value(text: str) -> str:
    """A value from input placed into a terminal line: :func:`terminal_text` rules, on one line
    (line breaks shown as ``\\n``), so it can never begin a line of its own."""
    return mask_secrets(text).replace("\r", "\\r").replace("\n", "\\n")


def mask_secrets(text: str) -> str:
    """Strip terminal controls, then mask secrets. Idempotent."""
    text = strip_controls(text)
    for pat, repl in _PATTERNS:
        text = pat.sub(repl, text)
    return _WORD_VALUE.sub(_word_value, _NAMED.sub(_named, text))


# Markdown: raw HTML (a tag, a comment, an autolink) needs "<"; images and links need "[" (and
# reference definitions "[x]: url"). Escaped, they show as the characters they are (CommonMark
# 0.31, "Backslash escapes" and "Entity and numeric character references").
BACKTICKS = re.compile(r"`++")  # a run of backticks (the fences around text must be longer)
# A backslash is escaped too, so "\\|" from input cannot turn the escape of "|" into a literal backslash
# and a live column separator (GFM tables, https://github.github.com/gfm/#tables-extension-). ">"
# starts nothing inline (only a block quote at the start of a line, escaped there), so "0.05 -> 50"
# stays readable in the raw file instead of showing "-&gt;".
_MD_SPECIAL = str.maketrans({"\\": "\\\\", "|": "\\|", "<": "&lt;", "[": "\\[", "]": "\\]",
                             "\n": " ", "\r": " "})


def md_inline(text: str) -> str:
    """Text from input placed into Markdown (answer.md, job summaries, post bodies, table cells):
    masked, on one line, without HTML, images/links or table separators."""
    out = mask_secrets(text).translate(_MD_SPECIAL)
    return "\\" + out if out.lstrip().startswith(">") else out


_ID_UNSAFE = re.compile(r"[^a-z0-9_.\-]++")


def anchor_id(text: str) -> str:
    """An id from input used as an HTML id or a link fragment (Markdown and HTML): only
    ``[a-z0-9_.-]``, so it can end no attribute and start no URL scheme."""
    return _ID_UNSAFE.sub("_", mask_secrets(text).lower())[:80] or "_"


def md_code_block(text: str) -> str:
    """A fenced code block holding ``text`` (masked) literally: the fence is longer than any run of
    backticks inside, so nothing in the text can close it."""
    body = mask_secrets(text)
    longest = max((len(r) for r in BACKTICKS.findall(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{body}\n{fence}"


# -- GitHub issue bodies ----------------------------------------------------------------------------
# "@name" notifies that user or team when the issue is created; a zero-width space after "@" keeps the
# text and drops the mention (an e-mail address, "a@b", is not a mention and is left alone).
_MENTION = re.compile(r"(?<![\w`/.\-])@(?=[A-Za-z0-9])")


def github_body(markdown: str) -> str:
    """Markdown for a GitHub issue or comment: masked, and no ``@mention`` from input notifies anyone."""
    return _MENTION.sub("@\u200b", mask_secrets(markdown))


# -- Slack mrkdwn ---------------------------------------------------------------------------------
def slack_text(text: str) -> str:
    """Text from input in a Slack mrkdwn message: masked, with ``&``, ``<`` and ``>`` escaped as Slack
    documents (https://api.slack.com/reference/surfaces/formatting#escaping), so ``<!channel>``,
    ``<!here>``, ``<@U123>`` and ``<url|text>`` from input show as text."""
    return mask_secrets(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_link(url: str, label: str) -> str:
    """A Slack link ``<url|label>`` with a URL that is http(s) and holds none of ``<>|`` or blanks."""
    url = mask_secrets(url)
    if not _HTTP_URL.fullmatch(url):
        return slack_text(url)
    return f"<{url}|{slack_text(label)}>"


_HTTP_URL = re.compile(r"https?://[^\s<>|\"'`\\]++")


# -- HTML (report.html links only to its own anchors, see anchor_id) -------------------------------------
def html_text(value: object) -> str:
    """A value from input in HTML text or a quoted attribute: masked, then ``& < > " '`` escaped."""
    return html.escape(mask_secrets("" if value is None else str(value)), quote=True)


# -- CSV -------------------------------------------------------------------------------------------
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A text cell of a CSV file: masked, and a cell a spreadsheet would run as a formula (starting
    with = + - @ tab or CR) prefixed with a single quote, https://owasp.org/www-community/attacks/CSV_Injection.
    A plain number (``-1.5``) stays as it is."""
    text = mask_secrets(text)
    if text.startswith(_FORMULA_START):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


# -- JSON ------------------------------------------------------------------------------------------
# The spellings of non-finite numbers in JSON outputs (a chart of a NaN run holds thousands): no
# secret and no control in them, so masking them again and again is skipped.
NONFINITE_TEXTS = frozenset({"nan", "inf", "-inf"})
_PLAIN = frozenset({int, float, str})  # the types of a list that may hold nothing to mask


def json_clean(value: Any) -> Any:
    """``value`` (dicts, lists, strings, numbers) with every string, keys included, masked: done on
    the decoded strings, before ``json.dumps`` escapes them."""
    if isinstance(value, str):
        return value if value in NONFINITE_TEXTS else mask_secrets(value)
    if isinstance(value, dict):
        return {json_clean(k): json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # a curve's values: numbers and non-finite spellings, told apart in C (no call a point)
        if _PLAIN.issuperset(map(type, value)) and NONFINITE_TEXTS.issuperset(
                x for x in set(value) if type(x) is str):
            return list(value)
        return [json_clean(v) for v in value]
    return value


def json_model(model: Any, indent: int | None = 2) -> str:
    """A pydantic model (an answer, an MCP result) as JSON through :func:`json_text`."""
    return json_text(json.loads(model.model_dump_json()), indent=indent, ensure_ascii=False)


def json_text(value: Any, **dumps: Any) -> str:
    """The JSON encoder of every JSON output (answer.json, charts.json, batch.json, parse -o .jsonl,
    MCP results, LLM requests): strings masked first, then serialised."""
    return json.dumps(json_clean(value), **dumps)


JSON_HEADERS = {"content-type": "application/json"}


def json_body(value: Any) -> bytes:
    """The body of an HTTP request (LLM providers, GitHub, Slack): :func:`json_text` as UTF-8 bytes,
    sent with :data:`JSON_HEADERS` (an HTTP client's own ``json=`` would serialise without masking)."""
    return json_text(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- file names ------------------------------------------------------------------------------------
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]++")


def file_name(text: str, limit: int = 80) -> str:
    """A file name part derived from input (plot names): masked, only ``[A-Za-z0-9._-]``, not starting
    with a dot or a dash, at most ``limit`` characters."""
    return _NAME_UNSAFE.sub("_", mask_secrets(text)).strip("_").lstrip(".-")[:limit] or "_"
