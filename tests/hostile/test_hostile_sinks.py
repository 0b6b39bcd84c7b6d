"""Every output is a sink with its own active syntax: each one has one encoder in ``trainaudit.redact``
and text from input reaches it only through that encoder, with secrets masked on the decoded value
first. Cases: secret shapes the masker must know, secrets that an encoding (JSON, HTML, a colour
code) would split, and input text that would be active in a terminal (GitHub Actions workflow
commands, bidi controls), Markdown tables, HTML attributes, CSV (formulas), Slack and GitHub bodies.

Fake secrets are built from pieces at run time, so the repository holds no real-looking key.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from harness import run
from trainaudit import redact


def _shapes() -> dict[str, tuple[str, str]]:
    """name -> (text that holds a secret, the part that must not reach any output)."""
    b64 = "Qk9x" * 20 + "ab=="
    sas = "Zx9%2B" * 6 + "Kq%3D"
    sg = "S" + "G." + "Ab3dE" * 4 + "xy" + "." + "Pq7Rs" * 8 + "tuv"
    glsa = "gl" + "sa_" + "Mn4Op" * 7 + "_" + "0a1b2c3d"
    glc = "gl" + "c_" + "eyJvIjoi" * 6
    dckr = "dc" + "kr_pat_" + "Hy6Jk" * 6
    wandb = "a1" + "b2c3d4e5" * 4 + "f6a7b8"[:6]
    der = "MI" + "IEvQIBADANBgkqhkiG9w0BAQEFAASC" + "BKcwggSjAgEAAoIBAQC7" * 3
    return {
        "azure_conn": (f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={b64};EndpointSuffix=core.windows.net",
                       b64[:40]),
        "azure_sas": (f"GET https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sp=r&sig={sas} 403", sas[:20]),
        "url_percent": ("target=https%3A%2F%2Fbob%3Ahunter" + "2Pw%40rd%40example.org%2Fx", "hunter2Pw%40rd"),
        "gcp_der_body": (f'"private_key": "{der}\\nAbCdEf"', der[20:60]),
        "gcp_der_bare": (f"key material {der}", der[20:60]),
        "sendgrid": (f"mail via {sg}", sg[3:30]),
        "grafana_sa": (f"grafana {glsa}", glsa[5:30]),
        "grafana_cloud": (f"grafana {glc}", glc[4:40]),
        "dockerhub": (f"docker login -p {dckr}", dckr[9:]),
        "wandb_login": (f"$ wandb login {wandb}", wandb),
        "token_word": ("--token " + "Vb8Nm2Lk" + "Qw4Er6Ty", "Vb8Nm2LkQw4Er6Ty"),
        "json_escaped_password": ('config {\\"password\\": \\"' + "Tr0ub4dor" + '&3x\\"}', "Tr0ub4dor"),
        "html_escaped_password": ("password=&quot;" + "Tr0ub4dor" + "&quot;", "Tr0ub4dor"),
        # shapes of detect-secrets' plugins (artifactory, discord, mailchimp, square_oauth, telegram_token,
        # twilio, gitlab_token, slack)
        "artifactory": ("jfrog " + "AK" + "C" + "p5Xq" * 18, "p5Xq" * 18),
        "discord_bot": ("bot " + "M" + "Tk4" * 8 + "." + "Gh7-kL" + "." + "Zq9_" * 6 + "abc", "Zq9_" * 6),
        "mailchimp": ("mc " + "f3a9" * 8 + "-us" + "12", "f3a9" * 8),
        "square_oauth": ("sq0" + "csp-" + "Ab3_" * 10 + "xyz", "Ab3_" * 10),
        "telegram_bot": ("bot 12345" + "6789:" + "AAHk3Jd8Qp_Lm2Vb7" + "Rt-Wn4Yc6Hs1Fg0Aq5", "AAHk3Jd8Qp_Lm2Vb7Rt-Wn4Yc6Hs1Fg0Aq5"),
        "twilio_key": ("twilio S" + "K" + "0a1b2c3d" * 4, "0a1b2c3d" * 4),
        "gitlab_runner": ("runner gl" + "rt-" + "Xy7_" * 6, "Xy7_" * 6),
        "gitlab_registration": ("register GR13" + "48941" + "Xy7q" * 6, "Xy7q" * 6),
        "slack_xoxo": ("xo" + "xo-" + "1234567890-abcdef123", "1234567890-abcdef123"),
        "sgr_split_token": ("token gh" + "p_" + "Ab3" * 4 + "\x1b[31m" + "Ab3" * 8 + "\x1b[0m", "Ab3" * 8),
        # the colour code as a JSON log stores it, six characters "\u001b" (a log read as text keeps them)
        "json_sgr_split_token": ('{"msg": "token gh' + "p_" + "Cd4" * 4 + "\\u001b[31m" + "Cd4" * 8 + '\\u001b[0m"}',
                                 "Cd4" * 8),
    }


SHAPES = _shapes()


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_mask_secrets_knows_the_shape(name: str) -> None:
    text, secret = SHAPES[name]
    masked = redact.mask_secrets(text)
    assert secret not in masked and "***" in masked
    assert redact.mask_secrets(masked) == masked  # idempotent


def test_plain_words_after_key_words_stay() -> None:
    # A word after "token" is prose, a git sha is not a W&B key, a certificate is not a private key.
    for text in ("token embeddings are tied", "password policy: rotate every 90 days",
                 "commit 0123456789abcdef0123456789abcdef01234567", "MIIDdzCCAl+gAwIBAgIE",
                 "SKIPPED 3 batches; ACCURACY 0.91", "20240501:step_time_ms=1234 rank 3",
                 "checksum d41d8cd98f00b204e9800998ecf8427e-us-east-1"):
        assert redact.mask_secrets(text) == text


def test_json_outputs_mask_the_decoded_string() -> None:
    # "\x1b" inside a token is "\u001b" once dumped: masked on the string first, the token is whole.
    gh = "gh" + "p_" + "Zq1" * 12
    split = gh[:9] + "\x1b[1m" + gh[9:]
    assert gh[9:] not in redact.json_text({"name": split, split: 1})
    assert gh[9:] not in redact.json_text(["password=\"" + "Zq1Zq1Zq1" + "\""])


# -- terminal -------------------------------------------------------------------------------------
def test_terminal_no_workflow_command_from_input() -> None:
    hostile = "loss\n::error file=x.py::pwned\n  ::add-mask::abc\n##[warning]old form\n\x1b[1m::notice::bold"
    out = redact.terminal_text(hostile)
    assert not [ln for ln in out.split("\n") if re.match(r"\s*(?:\x1b\[[0-9;]*m)*\s*(::|##\[)", ln)]
    own = redact.workflow_line("::error title=TA101::loss is NaN")
    assert redact.terminal_text(f"x\n{own}\n").split("\n")[1] == own
    assert "\n" not in redact.terminal_value("a\n::error::b")


def test_terminal_strips_bidi_controls() -> None:
    text = "access = \u202e\u2066user\u2069\u2066 // check admin"
    for enc in (redact.terminal_text, redact.md_inline, redact.mask_secrets, redact.html_text):
        assert not re.search("[\u202a-\u202e\u2066-\u2069]", enc(text))


def _jsonl(path: Path, names: list[str]) -> None:
    rows = [{"step": i, **dict.fromkeys(names, 1.0 - 0.01 * i)} for i in range(1, 30)]
    rows.append({"step": 30, **{n: float("nan") for n in names}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows).replace("NaN", "NaN"))


WORKFLOW = "lr\n::error file=a.py,line=1::pwned\n::add-mask::x"


def test_parse_and_diagnose_print_no_workflow_command(tmp_path: Path) -> None:
    _jsonl(tmp_path / "t.jsonl", ["loss", WORKFLOW, "\x1b[8mhidden\x1b[0m"])
    for args in (["parse", "t.jsonl"], ["diagnose", "t.jsonl", "-o", "out"]):
        o = run(args, tmp_path)
        assert o.code in (0, 1), o.stderr
        for ln in (o.stdout + "\n" + o.stderr).split("\n"):
            assert not ln.lstrip().startswith(("::", "##[")), ln
        assert "\x1b[8m" not in o.stdout


# -- Markdown --------------------------------------------------------------------------------------
def test_backslash_pipe_forges_no_table_column(tmp_path: Path) -> None:
    _jsonl(tmp_path / "t.jsonl", ["loss \\| forged \\| col"])
    o = run(["diagnose", "t.jsonl", "-o", "out"], tmp_path)
    assert o.code == 1, o.stderr
    md = (tmp_path / "out" / "answer.md").read_text()
    rows = [ln for ln in md.split("\n") if re.match(r'\| (?:<a id="d1"></a>)?D1 ', ln)]
    assert rows
    for row in rows:
        # GFM: a cell ends at a "|" not preceded by an odd number of backslashes
        cells = re.split(r"(?<!\\)(?:\\\\)*\|", row)
        assert len(list(cells)) == 9, row  # 7 columns, plus the empty ends


# -- hostile answer.json into report / post ---------------------------------------------------------
def _hostile_answer(tmp_path: Path) -> Path:
    _jsonl(tmp_path / "t.jsonl", ["loss"])
    assert run(["diagnose", "t.jsonl", "-o", "out"], tmp_path).code == 1
    p = tmp_path / "out" / "answer.json"
    a = json.loads(p.read_text())
    bad_id = '"><img src=x onerror=alert(1)>'
    fa = a["final_answer"]
    fa["summary"] = "<!channel> <!here> <https://evil.example|click> @octocat & <script>alert(1)</script>"
    fa["root_causes"][0]["issue"] = "[x](javascript:alert(1)) @org/team"
    fa["root_causes"][0]["evidence"] = [bad_id]
    a["findings"][0]["id"] = bad_id
    a["findings"][0]["evidence"] = [bad_id, "javascript:alert(1)"]
    a["extracted_facts"][0]["id"] = bad_id
    p.write_text(json.dumps(a))
    return p


def test_report_html_attributes_hold_no_input_markup(tmp_path: Path) -> None:
    p = _hostile_answer(tmp_path)
    o = run(["report", str(p), "-o", str(tmp_path / "out" / "r.html")], tmp_path)
    assert o.code in (0, 1), o.stderr
    page = (tmp_path / "out" / "r.html").read_text()
    assert "<img src=x" not in page and "<script>alert" not in page
    for attr in re.findall(r'(?:id|href)="([^"]*)"', page):
        assert not attr.lower().startswith("javascript:") and "<" not in attr and ">" not in attr, attr


def test_posts_neutralise_slack_and_github_markup(tmp_path: Path) -> None:
    p = _hostile_answer(tmp_path)
    o = run(["post", str(p), "--github-issue", "o/r", "--slack-webhook", "https://example.invalid/x"], tmp_path)
    assert o.code == 0, o.stderr
    bodies = [json.loads(m) for m in re.findall(r"^\{\n.*?^\}$", o.stdout, re.S | re.M)]
    slack = [b["text"] for b in bodies if "blocks" in b]
    gh = [b["body"] for b in bodies if "body" in b]
    assert slack and gh
    for text in slack:
        assert "<!channel>" not in text and "<!here>" not in text and "<https://evil" not in text
    for body in gh:
        assert not re.search(r"(?<![\w`])@octocat", body) and not re.search(r"(?<![\w`])@org/team", body)
        assert "<img" not in body and "<script" not in body
        assert not re.search(r"(?<!\\)\]\(javascript:", body)  # "\](" is text, not a link


# -- CSV / JSONL -----------------------------------------------------------------------------------
def test_parse_csv_cells_run_no_formula(tmp_path: Path) -> None:
    gh = "gh" + "p_" + "Wq2" * 12
    names = ['=HYPERLINK("http://evil.example","x")', "+1+cmd|' /C calc'!A0", "@SUM(1)", f"tok {gh}"]
    rows = [{"step": i, **dict.fromkeys(names, -1.5)} for i in range(1, 4)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    o = run(["parse", "t.jsonl", "-o", "x.csv"], tmp_path)
    assert o.code == 0, o.stderr
    with (tmp_path / "x.csv").open(newline="") as f:
        table = list(csv.reader(f))
    head, body = table[0], table[1:]
    assert body
    for row in body:
        for col, cell in zip(head, row):
            if col == "value":
                assert float(cell) == -1.5 and not cell.startswith("'")
            else:
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
            assert gh[4:] not in cell
    o = run(["parse", "t.jsonl", "-o", "x.jsonl"], tmp_path)
    assert o.code == 0 and gh[4:] not in (tmp_path / "x.jsonl").read_text()


def test_csv_cell_keeps_numbers() -> None:
    assert redact.csv_cell("-1.5") == "-1.5" and redact.csv_cell("-inf") == "-inf"
    assert redact.csv_cell("-x") == "'-x" and redact.csv_cell("\t=1") == "'\t=1"


# -- charts.json, plot file names -------------------------------------------------------------------
def test_charts_json_and_plot_names_hold_no_secret(tmp_path: Path) -> None:
    gh = "gh" + "p_" + "Rt5" * 12
    _jsonl(tmp_path / "t.jsonl", ["loss", f"grad {gh}", 'password="' + "Rt5Rt5Rt5" + '"'])
    o = run(["diagnose", "t.jsonl", "-o", "out", "--html"], tmp_path)
    assert o.code == 1, o.stderr
    names = [p.name for p in (tmp_path / "out").rglob("*")]
    texts = [p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.suffix in (".json", ".md", ".html")]
    for t in [*names, *texts, o.stdout]:
        assert gh[4:] not in t and "Rt5Rt5Rt5" not in t
    for n in names:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", n), n


# -- MCP results -----------------------------------------------------------------------------------
def test_mcp_results_are_masked_on_every_string() -> None:
    from trainaudit.mcp.server import _masked
    from trainaudit.answer.schema import Finding

    gh = "gh" + "p_" + "Mk3" * 12
    brief = Finding(id="D1", rule="TA101", category="nan_inf", severity="critical", metric=f"loss {gh}",
                    message="\u202eok", evidence=[f"F1 {gh}"], confidence=0.9, data={"module": f"net {gh}"})
    out = _masked(brief)
    assert isinstance(out, Finding)
    assert gh[4:] not in out.model_dump_json() and "\u202e" not in out.message


# -- masked once, before encoding --------------------------------------------------------------------
def test_report_and_job_summary_mask_once_before_encoding(tmp_path: Path) -> None:
    # A secret in quotes: masked on the decoded text it is password="***", which each sink then encodes.
    # Masked again after encoding, the HTML form password=&quot;***&quot; loses its closing entity (the
    # "&quot" after *** reads as the value of a key-like name) and the Markdown form is masked twice.
    p = _hostile_answer(tmp_path)
    a = json.loads(p.read_text())
    pw = "Hq7" + "Zr2" + "Lm9x"
    a["final_answer"]["summary"] = f"the job set password=\"{pw}\" and secret='{pw}' in the config"
    p.write_text(json.dumps(a))
    summary = tmp_path / "summary.md"
    o = run(["report", str(p), "-o", str(tmp_path / "r.html"), "--github-summary"], tmp_path,
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert o.code in (0, 1), o.stderr
    page = (tmp_path / "r.html").read_text()
    md = summary.read_text()
    assert pw not in page and pw not in md
    assert "password=&quot;***&quot; and secret=&#x27;***&#x27; in the config" in page
    assert "password=\"***\" and secret='***' in the config" in md
    # the charts' JSON inside the page: masked on the decoded strings, then escaped; nothing after
    assert "***;" not in page and "***&amp;" not in page
