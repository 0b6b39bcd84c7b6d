"""Batch audits: several failures at once (several CI runs, or a folder of artifact sets), one answer
per failure plus a comparison: which failures share a root cause, and which commits or environment
changes they have in common.

    sets = discover_sets([Path("failures/")])
    result = run_batch(sets, Path("batch-out"), BatchOptions(repo="megatron"), write)
    write_batch(result, Path("batch-out"))   # trainaudit.render.batch: batch.json, batch.md

An artifact set is a subfolder (or an archive) of a given folder. Inside a set:
- ``answer.json``: already audited (e.g. collected from CI jobs); used as is;
- ``failing/`` (and optionally ``passing/``): the failing and passing run's artifacts;
- otherwise every file of the set is the failing run;
- ``trainaudit-set.json`` (optional): ``{"good": REV, "bad": REV, "golden": FILE, "model_config": FILE}``
  for this set (files relative to the set); ``--repo``, ``--good``, ``--bad`` apply to all sets.

Grouping uses :func:`trainaudit.answer.fingerprint.cause_key` (category + the rules the root cause
cites), the same notion of "same failure" that deduplicates GitHub issues.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainaudit.answer.charts import PlotSpec
from trainaudit.answer.fingerprint import cause_key, fingerprint
from trainaudit.answer.load import load_answer
from trainaudit.answer.locate import culprit, nothing_failed
from trainaudit.answer.schema import SEVERITY_ORDER, Answer, Commit
from trainaudit.audit import AuditOptions, run_audit
from trainaudit.errors import InputError
from trainaudit.redact import file_name
from trainaudit.safeio import load_json, read_text

SET_FILE = "trainaudit-set.json"
_ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz")


@dataclass
class ArtifactSet:
    name: str
    inputs: list[str] = field(default_factory=list)
    passing: list[str] = field(default_factory=list)
    answer_file: Path | None = None
    options: dict[str, str] = field(default_factory=dict)  # good, bad, golden, model_config
    folder: str = ""  # the set's report folder under the batch's output: its name as a safe file name


@dataclass
class BatchOptions:
    repo: str | None = None
    good: str | None = None
    bad: str | None = None
    fmt: str | None = None


@dataclass
class Member:
    name: str
    answer: Answer | None
    error: str | None = None
    out_dir: Path | None = None


@dataclass
class BatchResult:
    members: list[Member]


def _is_archive(p: Path) -> bool:
    return p.is_file() and p.name.lower().endswith(_ARCHIVES)


def _inside_set(folder: Path, given: str, meta: Path) -> Path:
    """A file a set's description names: it must be inside the set's folder (a set is what was
    unpacked from one failure; a name such as ``../../private/golden.json`` is refused)."""
    p = folder / given
    if Path(given).is_absolute() or not p.resolve().is_relative_to(folder.resolve()):
        raise InputError(f"{meta}: {given!r} is outside the set's folder; name a file inside it")
    return p


def _set_of(path: Path) -> ArtifactSet:
    name = path.name
    for ext in _ARCHIVES:
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
            break
    s = ArtifactSet(name=name)
    if path.is_file():
        s.inputs = [str(path)]
        return s
    if (path / "answer.json").is_file():
        s.answer_file = path / "answer.json"
        return s
    meta = path / SET_FILE
    if meta.is_file():
        data = load_json(read_text(meta), str(meta))
        if not isinstance(data, dict):
            raise InputError(f"{meta}: not a JSON object with good/bad/golden/model_config")
        for k in ("good", "bad", "golden", "model_config"):
            if isinstance(data.get(k), str):
                v = data[k]
                if k in ("golden", "model_config"):
                    v = str(_inside_set(path, v, meta))
                s.options[k] = v
    if (path / "failing").is_dir():
        s.inputs = [str(path / "failing")]
        if (path / "passing").is_dir():
            s.passing = [str(path / "passing")]
    else:
        s.inputs = [str(p) for p in sorted(path.iterdir()) if p.name != SET_FILE and not p.name.startswith(".")]
    return s


def discover_sets(roots: Sequence[Path]) -> list[ArtifactSet]:
    """Every subfolder or archive of each root is one artifact set."""
    sets: list[ArtifactSet] = []
    for root in roots:
        if not root.exists():
            raise InputError(f"{root}: no such file or directory")
        if not root.is_dir():
            raise InputError(f"{root}: expected a folder of artifact sets (one subfolder or archive per failure)")
        kids = [p for p in sorted(root.iterdir()) if not p.name.startswith(".") and (p.is_dir() or _is_archive(p))]
        sets += [_set_of(p) for p in kids]
    if not sets:
        raise InputError(f"{', '.join(map(str, roots))}: no artifact sets (subfolders or archives) found")
    names: dict[str, int] = {}
    for s in sets:  # two roots may hold sets of the same name: keep output folders apart
        n = names.get(s.name, 0)
        names[s.name] = n + 1
        if n:
            s.name = f"{s.name}-{n + 1}"
    # A set's name is a stranger's folder or archive name: its report folder is named through the
    # file-name encoder, and two names that encode alike still get folders of their own.
    taken: set[str] = set()
    for s in sets:
        base = folder = file_name(s.name)
        k = 1
        while folder in taken:
            k += 1
            folder = f"{base}-{k}"
        taken.add(folder)
        s.folder = folder
    return sets


# Writes one member's report folder (answer, plots) and returns it; the rendering layer provides it.
ReportWriter = Callable[[Answer, Path, list[PlotSpec]], Path]


def run_batch(sets: Sequence[ArtifactSet], out: Path, opts: BatchOptions, write: ReportWriter) -> BatchResult:
    """Audit each set (a set that cannot be read is reported, the others still run); ``write``
    puts each audited set's report under ``out / set name``."""
    members = []
    for s in sets:
        try:
            if s.answer_file is not None:
                members.append(Member(s.name, load_answer(s.answer_file), out_dir=s.answer_file.parent))
                continue
            ao = AuditOptions(inputs=s.inputs, passing=s.passing, repo=opts.repo,
                              good=s.options.get("good", opts.good), bad=s.options.get("bad", opts.bad),
                              golden=s.options.get("golden"), model_config=s.options.get("model_config"), fmt=opts.fmt)
            answer, plots, _info = run_audit(ao)
            members.append(Member(s.name, answer, out_dir=write(answer, out / (s.folder or file_name(s.name)), plots)))
        except InputError as exc:
            members.append(Member(s.name, None, error=str(exc)))
    return BatchResult(members)


# -- comparison ------------------------------------------------------------------------------
def _rules(a: Answer) -> list[str]:
    by = {d.id: d for d in a.findings}
    cited = {by[i].rule for rc in a.final_answer.root_causes for i in rc.evidence if i in by}
    if not cited:
        cited = {d.rule for d in a.findings if SEVERITY_ORDER[d.severity] >= SEVERITY_ORDER["medium"]}
    return sorted(cited)


def _cause_label(a: Answer) -> str:
    fa = a.final_answer
    rules = _rules(a)
    return fa.category + (f" ({', '.join(rules)})" if rules else "")


def _shared_commits(answers: list[tuple[str, Answer]]) -> list[dict[str, Any]]:
    """Commits that appear in at least two answers, most shared first; a commit's role is the
    strongest it has in any of them (suspect > environment change > others)."""
    rank = {"suspect": 0, "environment_change": 1, "golden_update": 2, "policy_change": 3, "fix": 4}
    seen: dict[str, dict[str, Any]] = {}
    for name, a in answers:
        for c in a.commits:
            e = seen.setdefault(c.sha, {"sha": c.sha, "title": c.title, "role": c.role, "members": []})
            if name not in e["members"]:
                e["members"].append(name)
            if rank[c.role] < rank[e["role"]]:
                e["role"] = c.role
    shared = [e for e in seen.values() if len(e["members"]) >= 2]
    return sorted(shared, key=lambda e: (-len(e["members"]), rank[e["role"]], e["sha"]))


def compare_members(result: BatchResult) -> dict[str, Any]:
    ok = [(m.name, m.answer) for m in result.members if m.answer is not None]
    groups: dict[str, dict[str, Any]] = {}
    for name, a in ok:
        key = cause_key(a)
        g = groups.setdefault(key, {"cause": key, "label": _cause_label(a), "category": a.final_answer.category,
                                    "rules": _rules(a), "members": [], "_answers": []})
        g["members"].append(name)
        g["_answers"].append((name, a))
    out_groups = []
    for g in sorted(groups.values(), key=lambda g: (-len(g["members"]), g["label"])):
        answers = g.pop("_answers")
        g["shared_commits"] = _shared_commits(answers)
        steps = [a.final_answer.first_bad_step for _, a in answers if a.final_answer.first_bad_step is not None]
        g["first_bad_steps"] = steps
        out_groups.append(g)
    rows: list[dict[str, object]] = []
    for m in result.members:
        if m.answer is None:
            rows.append({"name": m.name, "error": m.error})
            continue
        fa = m.answer.final_answer
        top = culprit(m.answer)  # the commit its answer.md names, never another one
        rows.append({"name": m.name, "verdict": fa.verdict, "category": fa.category,
                     "failed": not nothing_failed(m.answer),
                     "first_bad_step": fa.first_bad_step, "cause": cause_key(m.answer),
                     "fingerprint": fingerprint(m.answer), "summary": fa.summary,
                     "top_commit": None if top is None else {"sha": top.sha, "role": top.role, "title": top.title},
                     "answer": None if m.out_dir is None else str(m.out_dir / "answer.json")})
    env = [c for c in _shared_commits(ok) if c["role"] == "environment_change"]
    return {"headline": headline(ok, env), "sets": rows, "groups": out_groups, "shared_commits": _shared_commits(ok),
            "shared_environment_changes": env}


def headline(answers: list[tuple[str, Answer]], env: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What several failures of one pipeline have in common, said first: the commit most of them
    name (a shared environment change when its role says so), else an environment change every
    range holds; ``exceptions`` are the failures that name another commit or none."""
    if len(answers) < 2:
        return None
    named: dict[str, list[str]] = {}
    commit: dict[str, Commit] = {}
    for name, a in answers:
        c = culprit(a)  # the commit its answer names, as the batch table shows it
        if c is not None:
            named.setdefault(c.sha, []).append(name)
            commit.setdefault(c.sha, c)
    if named:
        sha, members = max(named.items(), key=lambda kv: (len(kv[1]), kv[0]))
        if len(members) >= 2:
            c = commit[sha]
            kind = "shared_environment_change" if c.role == "environment_change" else "shared_culprit"
            return {"kind": kind, "sha": sha, "role": c.role, "title": c.title, "members": members,
                    "exceptions": [n for n, _ in answers if n not in members]}
    everywhere = [e for e in env if len(e["members"]) == len(answers)]
    if everywhere:
        e = everywhere[0]
        return {"kind": "environment_change_in_every_range", "sha": e["sha"], "role": e["role"], "title": e["title"],
                "members": list(e["members"]), "exceptions": []}
    return None


__all__ = ["ArtifactSet", "BatchOptions", "BatchResult", "Member", "ReportWriter", "compare_members",
           "discover_sets", "headline", "run_batch"]
