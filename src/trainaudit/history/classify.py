"""Score every commit of a range by how well it explains one failing check.

Each commit is described by what it touched relative to the failing test (:class:`Evidence`):

- the test's own folder: the failing golden, the test's other goldens, its ``model_config.yaml``
  (with the arguments its diff changes), a recipe line naming the test;
- the code the test runs (:mod:`trainaudit.history.features`): the test's own features (MoE, MLA,
  hybrid, FSDP, multimodal, RL...), the generic training code every test runs, or code the test
  does not run;
- the environment, graded by what moved: the base image, Transformer Engine, PyTorch, NCCL/CUDA,
  kernel libraries, other pins, a routine lock refresh, CI plumbing (:func:`env_grade`);
- the comparator and extractor (tests/functional_tests/python_test_utils), the launch scripts;
- how many other goldens it regenerated: a commit that rewrites many goldens admits that numerics
  moved with it.

Those components, with the commit's place in the range (how far from the bad revision, an
environment change made in the bad commit itself, an image change for another track than the
test's golden, a change reverted inside the range) and whether it is a kind of change that can
produce the failure's explanation (:data:`CAN_CAUSE`), are the features of a model fitted on
labelled failures (:mod:`trainaudit.history.ranking`): its score orders the commits, the softmax of
the scores is each commit's relevance (the probability that it is the culprit), the role is the
part of the evidence that adds most to the score (a change to the gate itself, then a version move
of the image or a numerics library, take precedence), and the reason lists the evidence in the
order of its weight. Equal scores are ordered by the number of kinds of evidence, then by the
number of relevant files; only then by date.

Roles (answer.json's ``commits[].role``, docs/answer.md): ``golden_update``, ``environment_change``
(image, pins, launcher environment, CI plumbing), ``policy_change`` (comparator, tolerances,
METRICS, the test's scope), ``suspect`` (model and training code, the test's own config), ``fix``
(after the bad revision: a commit that reverts a suspect, rewrites the same golden or disables the
test).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from trainaudit.answer.verdicts import VERDICT_INFO
from trainaudit.history.features import (ARGUMENTS, DEFINING_ARGS, GENERIC_TRAINING, is_code, message_features,
                                         path_features)
from trainaudit.history.git import CommitInfo, Repo
from trainaudit.history.ranking import GROUP_OF, Model, group_of, packaged, softmax

# Linear on any path: "golden_values" anywhere in the last path segment, tried once per segment (where the
# segment starts, after checking that it ends the path in ".json") instead of from every "golden" of it.
GOLDEN_RE = re.compile(r"(?:^|/)(?=[^/]*\.json$)[^/]*?golden[_-]?values?|(^|/)golden[^/]*\.(json|ya?ml)$", re.I)
ENV_FILE_RE = re.compile(r"(^|/)(Dockerfile[^/]*|[^/]*\.dockerfile|requirements[^/]*\.(txt|in)|constraints[^/]*\.txt|"
                         r"[^/]*\.lock|environment\.ya?ml|conda[^/]*\.ya?ml|setup\.py|pyproject\.toml|"
                         r"docker/.+|\.ngc_version[^/]*|manifest\.json)$", re.I)
# Paths come from the repository under audit (anyone's). Where a folder may be followed by any path
# (".+" to the end), only its first occurrence is tried (an atomic group): a later one has a shorter
# rest with the same ending, so it cannot match where the first did not.
CI_FILE_RE = re.compile(r"(?:^|/)(?:\.gitlab-ci\.ya?ml|\.github/workflows/[^/]++|jet[^/]*\.ya?ml)$|"
                        r"^(?>(?:.*?/)??\.gitlab/).+$|^(?>(?:.*?/)??ci/).+\.(?:ya?ml|sh)$|^(?>(?:.*?/)??\.ci/).+$", re.I)
RECIPE_RE = re.compile(r"^(?>(?:.*?/)??tests/test_utils/recipes/).+\.ya?ml$", re.I)
COMPARATOR_RE = re.compile(r"^(?>(?:.*?/)??tests/functional_tests/python_test_utils/)(?!test_(?:inference|grpo)).+\.py$|"
                           r"(?:^|/)(?:compare|check)_golden[^/]*+\.py$", re.I)
LAUNCHER_RE = re.compile(r"(^|/)tests/functional_tests/shell_test_utils/.+|(^|/)tests/test_utils/python_scripts/"
                         r"(launch|generate)[^/]*\.py$|(^|/)(run_ci_test|_run_training)[^/]*\.sh$", re.I)
_CONFIG_KEY = re.compile(r"^[+-][ \t]*+([\w\-.]++)[ \t]*+:")  # a changed line's key
ENV_KEY_RE = re.compile(r"^(NCCL|NVTE|CUBLAS|CUDNN|CUDA|TORCH|PYTORCH|NVIDIA|UB_|TE_)", re.I)
TEST_CONFIG_RE = re.compile(r"model_config\.ya?ml$", re.I)
REVERT_RE = re.compile(r'^Revert\b|This reverts commit ([0-9a-f]{7,40})', re.I | re.M)
SCOPE_DIFF_RE = re.compile(r"^\+.*(-broken|broken|flaky|scope\s*:|skip|disabled?)", re.I | re.M)
THRESHOLD_WORDS = re.compile(r"rtol|atol|threshold|toleran|step[-_ ]size|METRICS|CHECK_THRESHOLDS|is_close|"
                             r"allclose|median|window|budget|failing_steps|golden", re.I)

# git pathspecs covering the files whose patches are read (environment, CI, recipes, comparator,
# launch scripts), so their diffs come from one git call that runs while the commit list is read.
CONFIG_PATHSPECS = [
    ":(glob,icase)**/Dockerfile*", ":(glob)**/*.dockerfile", ":(glob)**/requirements*.txt", ":(glob)**/requirements*.in",
    ":(glob)**/constraints*.txt", ":(glob)**/*.lock", ":(glob)**/environment.y*ml", ":(glob)**/conda*.y*ml",
    ":(glob)**/setup.py", ":(glob)**/pyproject.toml", ":(glob)**/docker/**", ":(glob)**/.ngc_version*",
    ":(glob)**/.gitlab-ci.y*ml", ":(glob)**/.github/workflows/*", ":(glob)**/.gitlab/**", ":(glob)**/jet*.y*ml",
    ":(glob)**/tests/test_utils/recipes/**", ":(glob)**/tests/functional_tests/python_test_utils/*.py",
    ":(glob)**/tests/functional_tests/shell_test_utils/**", ":(glob)**/ci/**", ":(glob)**/.ci/**",
]

# -- the environment, graded ------------------------------------------------------------------------
# (what moved, weight): the base image decides every kernel; TE and PyTorch most of them; NCCL/CUDA
# the reductions; kernel libraries some; any other pin little; a lock refresh or CI plumbing almost
# nothing.
ENV_KINDS: tuple[tuple[str, str, float], ...] = (
    ("base image", r"nvcr\.io/nvidia/pytorch|pytorch:\d\d\.\d\d|base[_-]?image|from_image|ngc[-_]pytorch|"
                   r"\.ngc_version|^FROM\s+\S+:\S+", 1.0),
    ("Transformer Engine", r"transformer[-_]?engine|\bTE_(COMMIT|VERSION|REF)\b|\bte==|TransformerEngine", 0.9),
    ("PyTorch", r"\btorch\s*(==|>=|~=|<=|@)|\bpytorch[_-]?version\b|\btorch_version\b", 0.9),
    ("NCCL/CUDA/cuDNN", r"\bnccl\b|nvidia-nccl|\bcuda[-_ ]?(version|\d)|cudnn|cublas|NCCL_[A-Z_]+", 0.8),
    ("kernel library", r"triton|flash[-_]?attn|apex|mamba|causal[-_]conv1d|grouped[-_]gemm|deep_?ep|cutlass|"
                       r"nvidia-(?:[a-z]{1,32}-){0,8}+cu\d+", 0.6),
)
_ENV_RX = [(name, re.compile(rx, re.I | re.M), w) for name, rx, w in ENV_KINDS]
# "+ARG TORCH_VERSION=2.5", "-  image: nvcr.io/...": the name is words joined by single spaces, each
# part taken whole (possessive), so no split of a long line is tried twice.
_ASSIGN = re.compile(r"^([+-])[ \t]*+(?:(?:ARG|ENV|export)\s++)?+([\w.\-\"']++(?:[ ]++[\w.\-\"']++)*+)[ \t]*+"
                     r"(==|>=|<=|~=|=|:)[ \t]*+(.*\S)\s*$")
# an image reference starts where a run of path characters starts (the look-behind)
_IMAGE = re.compile(r"(?<![\w./-])((?>[\w./-]*?(?:pytorch|cuda|ubuntu))[\w./-]*+):([\w.\-]++)", re.I)
CI_GRADE = 0.05  # env_grade of a change to CI configuration alone
ENV_TITLE_RE = re.compile(r"\b(bump|upgrade|update|move to)\b.{0,40}\b(pyt|pytorch|container|image|te\b|"
                          r"transformer[- ]engine|nccl|cuda|base)", re.I)


@dataclass(slots=True)
class EnvChange:
    grade: float = 0.0
    what: str = ""


def env_grade(diff: str, files: list[str], title: str = "") -> EnvChange:
    """How much a commit moved the environment, from its patch of environment/CI files: a value
    that changed between a removed and an added line (a version bump) counts fully, a new or
    dropped pin half, an environment file changed without any version 0.15 (a Dockerfile
    restructure, a lock refresh of other packages), CI plumbing 0.05."""
    removed: dict[str, str] = {}
    added: dict[str, str] = {}
    for line in diff.splitlines():
        if line[:1] not in ("+", "-") or line.startswith(("+++", "---")):
            continue
        for m in _IMAGE.finditer(line[1:]):  # after the diff marker, which would join the image name
            (removed if line[0] == "-" else added)[m.group(1).lower()] = m.group(2)
        a = _ASSIGN.match(line)
        if a:
            (removed if a.group(1) == "-" else added)[a.group(2).strip(" \"'").lower()] = a.group(4)
    best = EnvChange()
    for key in set(removed) | set(added):
        old, new = removed.get(key), added.get(key)
        if old == new:
            continue  # moved, not changed
        for name, rx, w in _ENV_RX:
            text = f"{key} {old or ''} {new or ''}"
            if rx.search(text):
                g = w if old is not None and new is not None else w / 2
                if g > best.grade:
                    how = f"{old} → {new}" if old and new else (f"added {new}" if new else f"dropped {old}")
                    best = EnvChange(g, f"{name} {key.strip()}: {how}"[:160])
                break
        else:
            if old is not None and new is not None and best.grade < 0.3 and any(ch.isdigit() for ch in f"{old}{new}"):
                best = EnvChange(0.3, f"pin {key.strip()}: {old} → {new}"[:160])
    if best.grade:
        return best
    env_files = [f for f in files if ENV_FILE_RE.search(f)]
    if ENV_TITLE_RE.search(title) and env_files:
        return EnvChange(0.7, f"the message announces an environment change: {title[:80]}")
    if env_files:
        lock_only = all(f.endswith(".lock") for f in env_files)
        return EnvChange(0.1 if lock_only else 0.15,
                         ("a lock-file refresh" if lock_only else "environment files changed without a version move")
                         + f" ({', '.join(env_files[:2])})")
    if any(CI_FILE_RE.search(f) for f in files):
        return EnvChange(CI_GRADE, "CI configuration")
    return best


# -- what explains what ------------------------------------------------------------------------
ROLE_OF = {"env": "environment_change", "ci": "environment_change", "code": "suspect", "comparator": "policy_change",
           "launcher": "policy_change", "recipe": "policy_change", "own_config": "suspect", "golden": "golden_update",
           "own_golden": "golden_update", "regen": "golden_update"}
# the features of trainaudit.history.ranking that speak for a part of the evidence
PART_OF = {"env_in_bad": "env", "env_other_track": "env", "regen_with_change": "regen"}
ENV_MOVE = 0.6  # env_grade of a version move of the image, Transformer Engine, PyTorch, NCCL/CUDA or a kernel library
GATE_CHANGE = 0.8  # comparator evidence of a change to its tolerances, sampling or the failing metric's check
ADMISSION = ("regen", "own_golden")  # goldens rewritten with the commit: how sure its change moved numbers
# explanation -> the kinds of change that can produce it (a training change beyond the tolerances
# comes from code or the test's config, not from a container; a malformed golden from its writer or
# the comparator...): the "fits" feature, whose weight is fitted like the others
CAN_CAUSE: dict[str | None, tuple[str, ...]] = {
    "drift": ("env", "code", "own_config"), "training": ("code", "own_config"),
    "memory": ("code", "env", "own_config"), "wall_clock": ("env", "launcher", "code", "own_config", "comparator"),
    "golden": ("golden", "comparator"), "stale_golden": ("comparator", "recipe", "own_config", "launcher"),
    "reported_metric": ("code", "comparator"), "test_redefined": ("own_config", "recipe"),
    "crash": ("code", "env", "own_config", "launcher"), "infra": ("env", "launcher", "own_config"),
    None: ("code", "env", "own_config", "comparator", "launcher", "recipe", "golden"),
}
# A verdict and category whose explanation is not the verdict's own (VerdictInfo.change), when the
# audit does not name one.
EXPLANATION_BY_CATEGORY: dict[tuple[str, str], str] = {("real_regression", "memory_growth"): "memory",
                                                       ("gating_policy_issue", "throughput_regression"): "wall_clock"}


@dataclass
class FailureShape:
    """What the failure looks like. ``kind``: a verdict of docs/answer.md (or None); ``explanation``: one
    key of :data:`WEIGHTS` when the audit knows more than the verdict (a redefined metric...)."""

    kind: str | None = None
    metrics: list[str] = field(default_factory=list)
    test_case: str | None = None  # the test's folder, repository-relative
    golden_paths: list[str] = field(default_factory=list)
    category: str | None = None
    explanation: str | None = None
    features: set[str] = field(default_factory=set)
    config_path: str | None = None

    @property
    def explanation_key(self) -> str | None:
        key = self.explanation or EXPLANATION_BY_CATEGORY.get((self.kind or "", self.category or "")) or \
            (VERDICT_INFO[self.kind].change if self.kind in VERDICT_INFO else None)  # type: ignore[index]
        return key if key in GROUP_OF else None

    @property
    def group(self) -> str:
        return group_of(self.explanation_key)

    @property
    def track(self) -> str | None:
        """The image track the failing golden belongs to (Megatron-LM names goldens
        golden_values_{dev|lts}_<platform>.json): "dev", "lts", or None when unknown."""
        words = {w for g in self.golden_paths for w in _GOLDEN_WORDS.split(PurePosixPath(g).name.lower())}
        tracks = {t for t in ("dev", "lts") if t in words}
        return tracks.pop() if len(tracks) == 1 else None


@dataclass
class Evidence:
    """What one commit touched, relative to the failing test; each component in [0, 1]."""

    parts: dict[str, float] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    n_relevant: int = 0
    env_tracks: set[str] = field(default_factory=set)  # image tracks its environment change applies to

    def add(self, part: str, value: float, why: str) -> None:
        if value > self.parts.get(part, 0.0):
            self.parts[part] = value
            self.why[part] = why


@dataclass
class Classified:
    commit: CommitInfo
    roles: list[str]
    role: str
    relevance: float  # the model's probability that this commit is the culprit (fixes: 0.7)
    reason: str
    after_bad: bool = False
    evidence: Evidence | None = None
    features: dict[str, float] = field(default_factory=dict)
    score: float = 0.0  # the model's score (log-odds against the other commits of the range)
    notes: list[str] = field(default_factory=list)  # what the reason adds beside the evidence


def _case_name(test_case: str | None) -> str:
    return PurePosixPath(test_case).name if test_case else ""


# Features that single a test out (its code runs in few tests) weigh more than those most tests share.
DISTINCTIVE = frozenset({"moe", "mla", "mtp", "hybrid", "fsdp", "fp8", "cudagraph", "multimodal", "t5", "bert", "rl",
                         "inference", "muon", "offload", "recompute", "context_parallel", "post_training"})
COMMON = frozenset({"te", "tensor_parallel", "pipeline_parallel", "data", "gpt"})


def code_relevance(files: list[str], features: set[str]) -> tuple[float, str, int]:
    """(relevance of the code a commit touched to a test with ``features``, the best file and why,
    the number of relevant files)."""
    best, why, n = 0.0, "", 0
    for f in files:
        if not is_code(f) or COMPARATOR_RE.search(f) or LAUNCHER_RE.search(f):
            continue
        feats = path_features(f)
        own, other = feats & DISTINCTIVE & features, feats & DISTINCTIVE - features
        if own:
            r, w = 1.0, f"{f} ({', '.join(sorted(own))}: what this test exercises)"
        elif other:
            r, w = 0.05, f"{f} ({', '.join(sorted(other))}: a feature this test does not use)"
        elif feats & COMMON & features:
            r, w = 0.7, f"{f} ({', '.join(sorted(feats & COMMON & features))}: on the test's path)"
        elif "checkpointing" in feats:
            # saving runs in the first run too, but the golden check compares values logged before
            # any resume
            r, w = 0.3, f"{f} (checkpointing)"
        elif ARGUMENTS.search(f):
            r, w = 0.25, f"{f} (arguments/config)"
        elif GENERIC_TRAINING.search(f):
            r, w = 0.6, f"{f} (training code every test runs)"
        elif f.startswith("megatron/core/"):
            r, w = 0.5, f"{f} (core library code)"
        elif f.startswith("megatron/"):
            r, w = 0.3, f
        else:
            r, w = 0.4, f"{f} (code outside Megatron-LM's layout: on the path as far as can be told)"
        n += r >= 0.5
        if r > best:
            best, why = r, w
    if best >= 0.5:
        best = min(1.0, best * (0.85 + 0.15 * min(1.0, n / 8)))
    return best, why, n


def evidence_of(c: CommitInfo, ctx: FailureShape, diff: str) -> Evidence:
    ev = Evidence()
    case_dir = (ctx.test_case or "").rstrip("/")
    case = _case_name(ctx.test_case)
    failing = set(ctx.golden_paths)
    files = [f for f in c.files if f not in c.moved]  # a file moved unchanged changes nothing
    # regenerated goldens: existing files rewritten (a golden added for a new platform or deleted
    # records no change of numerics)
    goldens = [f for f in files if GOLDEN_RE.search(f) and c.status.get(f, "M") == "M"]
    own_goldens = [f for f in goldens if case_dir and f.startswith(case_dir + "/") and f not in failing]
    rewritten = failing & {f for f in files if c.status.get(f, "M") in ("M", "A")}
    if rewritten:
        ev.add("golden", 1.0, f"writes the failing golden ({next(iter(rewritten))})")
    elif own_goldens and not failing:
        ev.add("golden", 0.8, f"rewrites this test's golden ({PurePosixPath(own_goldens[0]).name})")
    others = len(goldens) - len(own_goldens) - len(failing & set(goldens))
    content_files = [f for f in files if not GOLDEN_RE.search(f)]
    # the test's own config
    own_cfg = [f for f in files if TEST_CONFIG_RE.search(f) and case_dir and f.startswith(case_dir + "/")]
    changed = _config_keys(diff, own_cfg[0]) if own_cfg else []
    env_keys = [k for k in changed if ENV_KEY_RE.match(k)]
    # a config change of launcher environment variables alone (NCCL_ALGO...) is an environment change
    if own_cfg and (not changed or len(env_keys) < len(changed)):
        defining = [k for k in changed if DEFINING_ARGS.match(k)]
        weight = 1.0 if defining else (0.6 if changed else 0.5)
        ev.add("own_config", weight, "changes this test's model_config.yaml"
               + (f" ({', '.join(changed[:5])})" if changed else ""))
    # recipes naming the test
    recipes = [f for f in files if RECIPE_RE.search(f)]
    if recipes and case:
        text = _diff_of(diff, recipes)
        if case in text:
            scope = bool(SCOPE_DIFF_RE.search(text))
            ev.add("recipe", 1.0, "changes the test scope of this test (recipe" + (", moved to broken/flaky or re-scoped)" if scope else ")"))
        else:
            ev.add("recipe", 0.1, f"changes test recipes ({PurePosixPath(recipes[0]).name}), not this test's lines")
    # comparator / extractor and launchers
    comparator = [f for f in files if COMPARATOR_RE.search(f)]
    if comparator:
        text = _diff_of(diff, comparator)
        names_metric = any(m in text for m in ctx.metrics)
        thresholds = bool(THRESHOLD_WORDS.search(text))
        ev.add("comparator", 1.0 if names_metric else (0.8 if thresholds else 0.5),
               f"changes the golden-value comparator/extractor ({PurePosixPath(comparator[0]).name}"
               + (", the failing metric's check" if names_metric else ", its tolerances or sampling" if thresholds else "")
               + ")")
    launcher = [f for f in files if LAUNCHER_RE.search(f)]
    if launcher:
        ev.add("launcher", 0.7, f"changes how the tests are launched ({PurePosixPath(launcher[0]).name})")
    # environment
    env = env_grade(_diff_of(diff, [f for f in files if ENV_FILE_RE.search(f) or CI_FILE_RE.search(f)]),
                    files, f"{c.title}\n{c.body.splitlines()[0] if c.body else ''}")
    if env.grade > CI_GRADE:
        ev.add("env", env.grade, f"changes the environment: {env.what}")
        ev.env_tracks = {_track(f) for f in files if ENV_FILE_RE.search(f)}
    elif env.grade:
        ev.add("ci", 1.0, f"changes CI plumbing only ({env.what})")
    if env_keys:
        ev.add("env", 0.5, f"changes this test's numerics environment ({', '.join(env_keys[:3])})")
    # code
    rel, why, n = code_relevance(content_files, ctx.features or {"gpt", "data"})
    if rel:
        ev.add("code", rel, f"changes code: {why}")
        ev.n_relevant = n
    # Regenerated goldens admit that numerics moved with the commit's own change; a commit that
    # only refreshes goldens follows a change made before it.
    if ev.parts.keys() - {"golden", "recipe"}:
        if own_goldens:
            # a commit that rewrote this test's golden for another platform but left the failing one
            # as it was: on the failing platform the test apparently still passed after it
            ev.add("own_golden", 0.5 if failing and not rewritten else 1.0,
                   f"regenerates this test's other golden(s) ({PurePosixPath(own_goldens[0]).name})")
        if others:
            ev.add("regen", 1 - math.exp(-others / 6),
                   f"regenerates {others} other golden file(s): numerics moved with it")
    # the message: naming the test, or a feature the test exercises, when the commit has content
    text = f"{c.title}\n{c.body}"
    if case and case in text:
        ev.add("named", 1.0, "its message names this test")
    elif ev.parts.keys() - {"golden", "recipe"} and (said := message_features(text) & ctx.features):
        ev.add("named", 0.4, f"its message names what the test exercises ({', '.join(sorted(said))})")
    return ev


_GOLDEN_WORDS = re.compile(r"[_.]")  # golden_values_dev_dgx_h100.json -> golden, values, dev, ...
_FILE_WORDS = re.compile(r"[._-]")  # Dockerfile.ci.lts -> dockerfile, ci, lts


def _track(path: str) -> str:
    """The image track an environment file builds: Megatron-LM keeps Dockerfile.ci.lts /
    .ngc_version.lts beside their dev twins; any other file serves both."""
    words = set(_FILE_WORDS.split(PurePosixPath(path).name.lower()))
    return next((t for t in ("lts", "dev") if t in words), "both")


def _diff_of(diff: str, paths: list[str]) -> str:
    """The parts of a ``git log -p`` patch that belong to ``paths``: one set lookup per patch
    header, so a commit adding 200 000 files costs time linear in its patch, not in files x paths."""
    if not diff or not paths:
        return ""
    out: list[str] = []
    keep = False
    wanted = set(paths)
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            keep = any(name in wanted for name in _new_names(line))
            continue
        if keep:
            out.append(line)
    return "\n".join(out)


def _new_names(header: str) -> list[str]:
    """The names a ``diff --git a/OLD b/NEW`` header may end with: the rest after each " b/" (a
    name holding " b/" itself makes the split ambiguous, so every candidate is offered)."""
    names: list[str] = []
    i = header.find(" b/")
    while i >= 0:
        names.append(header[i + 3:])
        i = header.find(" b/", i + 1)
    return names


def _config_keys(diff: str, path: str) -> list[str]:
    """Argument names on the changed lines of a model_config.yaml patch."""
    keys: list[str] = []
    for line in _diff_of(diff, [path]).splitlines():
        if line[:1] in "+-" and not line.startswith(("+++", "---")):
            m = _CONFIG_KEY.match(line)
            if m and m.group(1) not in keys:
                keys.append(m.group(1))
    return keys


def _reverted(commits: list[CommitInfo]) -> dict[str, str]:
    """sha -> why, for a change reverted inside the range (not live at bad) and its revert."""
    out: dict[str, str] = {}
    by_date = {c.sha: c.date for c in commits}
    for c in commits:
        for sha in REVERT_RE.findall(c.body):
            target = next((s for s in by_date if sha and s.startswith(sha)), None)
            if target is not None and target != c.sha and by_date[target] <= c.date:
                out[target] = "reverted within the range"
                out[c.sha] = "reverts a change of the range"
    return out


def features_of(ev: Evidence, c: CommitInfo, ctx: FailureShape, *, from_bad: int, reverted: bool) -> dict[str, float]:
    """The ranking model's inputs (trainaudit.history.ranking.FEATURES) for one commit;
    ``from_bad``: how many commits of the range are newer (0: the bad commit itself)."""
    x = dict(ev.parts)
    env = ev.parts.get("env", 0.0)
    x["fits"] = max((ev.parts.get(k, 0.0) for k in CAN_CAUSE.get(ctx.explanation_key, CAN_CAUSE[None])), default=0.0)
    x["recency"] = math.exp(-from_bad / 10)
    x["env_in_bad"] = env if from_bad == 0 else 0.0
    track = ctx.track
    other = bool(track and ev.env_tracks and "both" not in ev.env_tracks and track not in ev.env_tracks)
    x["env_other_track"] = env if other else 0.0
    x["reverted"] = 1.0 if reverted else 0.0
    change = max((ev.parts.get(k, 0.0) for k in ("env", "code", "own_config", "comparator")), default=0.0)
    x["regen_with_change"] = ev.parts.get("regen", 0.0) * change
    return x


def explain(ev: Evidence, contrib: dict[str, float], notes: list[str]) -> tuple[str, list[str]]:
    """(role, reasons in the order of their contribution to the score): the role is the part of the
    evidence that adds most to the score (the goldens it rewrote vouch for a change, they are not one)."""
    by_part: dict[str, float] = {}
    for f, v in contrib.items():
        part = PART_OF.get(f, f)
        if part in ev.parts:
            by_part[part] = by_part.get(part, 0.0) + v
    content = {k: v for k, v in by_part.items() if k in ROLE_OF and k not in ADMISSION}
    pool = content or {k: v for k, v in by_part.items() if k in ROLE_OF}
    top = max(pool, key=lambda k: (pool[k], ev.parts.get(k, 0.0))) if pool else None
    # Where the change came from, whatever else the commit adapted with it: the gate itself, else a
    # version move of the image or a numerics library (config and code edits made with a container
    # bump follow the bump).
    if ev.parts.get("comparator", 0.0) >= GATE_CHANGE:
        top = "comparator"
    elif ev.parts.get("env", 0.0) >= ENV_MOVE:
        top = "env"
    role = ROLE_OF[top] if top else "suspect"
    order = sorted(ev.why, key=lambda k: -by_part.get(k, 0.0))
    return role, [ev.why[k] for k in order] + notes


def classify(repo: Repo, commits: list[CommitInfo], ctx: FailureShape, *, after_bad: list[CommitInfo] | None = None,
             suspects_for_fix: list[str] | None = None, diffs: dict[str, str] | None = None,
             extra: list[tuple[CommitInfo, str]] | None = None, model: Model | None = None) -> list[Classified]:
    """Every commit of the range that touched anything relevant, best first (``commits`` newest
    first, as git lists them); ``extra``: commits outside the range offered as candidates (the
    commit that wrote the golden at --good), each with the reason it is offered. The order and the
    relevance (the probability of being the culprit) come from the fitted model
    (:mod:`trainaudit.history.ranking`)."""
    model = model or packaged()
    diffs = diffs or {}
    group = ctx.group
    reverts = _reverted(commits)
    found: list[tuple[CommitInfo, Evidence, dict[str, float], list[str]]] = []
    for i, c in enumerate(commits):
        ev = evidence_of(c, ctx, diffs.get(c.sha, ""))
        if not ev.parts:
            continue
        notes = [reverts[c.sha]] if c.sha in reverts else []
        if ev.parts.get("env") and ctx.track and ev.env_tracks and "both" not in ev.env_tracks \
                and ctx.track not in ev.env_tracks:
            notes.append(f"its environment change is for the {'/'.join(sorted(ev.env_tracks))} image; this test's "
                         f"golden is for {ctx.track}")
        found.append((c, ev, features_of(ev, c, ctx, from_bad=i, reverted=c.sha in reverts), notes))
    if ctx.explanation_key == "golden":
        for c, why in extra or []:
            ev = Evidence()
            ev.add("golden", 1.0, why)
            found.append((c, ev, features_of(ev, c, ctx, from_bad=len(commits), reverted=False), []))
    out = rerank([Classified(c, list(dict.fromkeys(ROLE_OF[k] for k in ev.parts if k in ROLE_OF)), "suspect", 0.0, "",
                             evidence=ev, features=x, notes=notes) for c, ev, x, notes in found], group, model)
    golden_set = set(ctx.golden_paths) | {f for cl in out if "golden_update" in cl.roles for f in cl.commit.files
                                          if GOLDEN_RE.search(f)}
    case = _case_name(ctx.test_case)
    fixes: list[Classified] = []
    for c in after_bad or []:
        reason = _fix_reason(repo, c, golden_set, suspects_for_fix or [], [case] if case else [])
        if reason:
            fixes.append(Classified(c, ["fix"], "fix", 0.7, reason, after_bad=True))
    return out + fixes  # fixes in the order they landed


def rerank(found: list[Classified], group: str, model: Model) -> list[Classified]:
    """The candidates scored by ``model`` for a failure of ``group``, best first: score, the
    probability of each (relevance), the role and the reasons in the order of their weight."""
    scores = model.scores([c.features for c in found], group)
    probs = softmax(scores)
    out: list[Classified] = []
    for c, sc, p in zip(found, scores, probs):
        ev = c.evidence or Evidence()
        role, reasons = explain(ev, model.contributions(c.features, group), c.notes)
        out.append(Classified(c.commit, c.roles, role, round(float(p), 4), "; ".join(reasons), evidence=ev,
                              features=c.features, score=float(sc), notes=c.notes))
    return sorted(out, key=lambda x: (-x.score, -len(x.evidence.parts) if x.evidence else 0,
                                      -(x.evidence.n_relevant if x.evidence else 0), _neg_date(x.commit.date)))


def _neg_date(date: str) -> str:
    """Newest first among equals (closest to the failure): invert the ISO date's characters."""
    return "".join(chr(0x10FFFF - ord(ch)) for ch in date)


def _fix_reason(repo: Repo, c: CommitInfo, goldens: set[str], suspects: list[str], case_parts: list[str]) -> str:
    reverted = REVERT_RE.findall(c.body + "\n" + c.title)
    for sha in reverted:
        if sha and any(s.startswith(sha) or sha.startswith(s[:len(sha)]) for s in suspects):
            return f"reverts suspect {sha[:10]}"
    if c.title.lower().startswith("revert") and suspects:
        return "reverts an earlier commit: " + c.title
    same = [f for f in c.files if f in goldens]
    if same:
        return f"changes the same golden values ({same[0]})"
    ci = [f for f in c.files if CI_FILE_RE.search(f) or RECIPE_RE.search(f)]
    if ci and case_parts:
        diff = repo.diff_text(c.sha, ci, context=5)  # context lines name the test case
        if SCOPE_DIFF_RE.search(diff) and any(p in diff for p in case_parts):
            return "disables or re-scopes the failing test"
    return ""
