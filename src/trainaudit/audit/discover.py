"""Find the failing test case in the repository at ``--bad``, and its golden values and model config.

The test case is the golden-values folder whose name appears in the CI logs or the artifact paths
(Megatron-LM: ``tests/functional_tests/test_cases/<model>/<case>/golden_values_<env>_<platform>.json``
beside ``model_config.yaml``). A golden path the job log prints (``run_ci_test.sh`` echoes its
``GOLDEN_VALUES_PATH=...`` argument) decides outright. Otherwise names are matched as whole tokens
(split at ``.`` and ``-`` too: GitHub artifacts are named ``logs-<test case>-<run id>-<uuid>``), so
``..._dp8`` does not claim a log about ``..._dp8_seq_packing``; the longest matching name wins. The
golden file is the one named in the logs or the artifacts (the failing job writes its actual
values under the golden's own name, ``$OUTPUT_PATH/$(basename $GOLDEN_VALUES_PATH)``), else the one
whose environment/platform words appear.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from trainaudit.history.git import Repo

GOLDEN_FILE_RE = re.compile(r"(^|/)golden_values[^/]*\.json$")
_TOKEN = re.compile(r"[A-Za-z0-9_.\-]+")
# A path only starts where a run of path characters starts (the look-behind), and its parts are bounded,
# so a long run of path characters is scanned once, not once per character.
_GOLDEN_PATH = re.compile(r"(?<![A-Za-z0-9_./\-])[A-Za-z0-9_./\-]{0,512}?golden_values[A-Za-z0-9_.\-]{0,128}?\.json")
_TOKEN_PARTS = re.compile(r"[.\-]")
MAX_TEXT = 64 * 1024 * 1024


@dataclass
class Discovered:
    test_case: str | None = None  # repo-relative folder
    golden: str | None = None  # repo-relative path
    golden_local: Path | None = None
    model_config: str | None = None
    model_config_local: Path | None = None
    how: str = ""
    notes: list[str] = field(default_factory=list)


def tokens_of(texts: list[str]) -> set[str]:
    out: set[str] = set()
    for t in texts:
        for tok in _TOKEN.findall(t[:MAX_TEXT]):
            out.add(tok)
            out.update(p for p in _TOKEN_PARTS.split(tok) if p)  # "case.log", "logs-case-123" name "case"
    return out


def discover(repo: Repo, bad_sha: str, texts: list[str], dest: Path, *, want_golden: bool = True,
             want_config: bool = True) -> Discovered:
    out = Discovered()
    goldens = repo.ls_files(bad_sha, GOLDEN_FILE_RE)
    if not goldens:
        out.notes.append("the repository has no golden_values*.json at --bad")
        return out
    by_dir: dict[str, list[str]] = {}
    for g in goldens:
        by_dir.setdefault(str(PurePosixPath(g).parent), []).append(g)
    named = _named_goldens(texts, goldens)
    toks = tokens_of(texts)
    matches = sorted({str(PurePosixPath(g).parent) for g in named}) or \
        [d for d in by_dir if PurePosixPath(d).name in toks]
    if not matches:
        out.notes.append(f"none of the {len(by_dir)} test cases with golden values at --bad is named in the CI "
                         "logs or artifact paths (give --golden)")
        return out
    matches.sort(key=lambda d: (-len(PurePosixPath(d).name), d))
    case = matches[0]
    out.test_case = case
    out.how = f"test case {PurePosixPath(case).name} named in the CI logs / artifact paths"
    if len(matches) > 1 and len(PurePosixPath(matches[1]).name) == len(PurePosixPath(case).name):
        out.notes.append(f"several test cases are named in the logs ({', '.join(matches[:3])}); took {case}")
    lower = {t.lower() for t in toks}
    cands = sorted(by_dir[case])

    def score(path: str) -> tuple[int, int, int, int]:
        name = PurePosixPath(path).name
        parts = PurePosixPath(name).stem.split("_")[2:]  # golden_values_<env>_<platform...>
        return (int(path in named), int(name in toks), sum(p.lower() in lower for p in parts), len(name))

    cands.sort(key=score, reverse=True)
    if want_golden:
        out.golden = cands[0]
        if len(cands) > 1 and score(cands[0])[:3] == score(cands[1])[:3]:
            out.notes.append(f"{len(cands)} golden files in {case}; took {PurePosixPath(cands[0]).name} "
                             "(name the environment/platform in --golden to choose)")
        data = repo.show_file(bad_sha, out.golden)
        if data is not None:
            dest.mkdir(parents=True, exist_ok=True)
            out.golden_local = dest / PurePosixPath(out.golden).name
            out.golden_local.write_bytes(data)
    if want_config:
        mc = f"{case}/model_config.yaml"
        data = repo.show_file(bad_sha, mc)
        if data is not None:
            out.model_config = mc
            out.model_config_local = dest / "model_config.yaml"
            dest.mkdir(parents=True, exist_ok=True)
            out.model_config_local.write_bytes(data)
    return out


def _named_goldens(texts: list[str], goldens: list[str]) -> list[str]:
    """Golden files of the repository whose path the texts print (``./tests/...`` or absolute)."""
    wanted = set(goldens)
    found: list[str] = []
    for t in texts:
        for m in _GOLDEN_PATH.finditer(t[:MAX_TEXT]):
            path = m.group(0)
            hit = next((g for g in wanted if path == g or path.endswith("/" + g)), None)
            if hit and hit not in found:
                found.append(hit)
    return found
