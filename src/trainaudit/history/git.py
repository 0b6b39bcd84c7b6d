"""Read a git repository (work tree or bare) through ``git`` itself, safely and with bounded output.

Nothing from a log or a user string reaches a shell: git runs with an argument list, revisions are
checked against a strict pattern and resolved with ``rev-parse --verify`` before use, and every
listing is capped (``--max-count``). The repository is never modified.

The repository may be a stranger's, so it is data, never code. Its own ``.git/config`` can name
commands that git runs on read-only commands too: ``diff.<driver>.textconv`` and
``diff.<driver>.command`` (selected by ``.gitattributes``, gitattributes(5)), ``core.fsmonitor``,
``log.showSignature`` with ``gpg.program``, ``core.hooksPath``, and a promisor remote whose URL is a
command (``ext::``, gitremote-helpers(7)) fetched lazily in a partial clone. Every call therefore goes
through :func:`git_command`: system and global config are ignored (``GIT_CONFIG_NOSYSTEM``,
``GIT_CONFIG_GLOBAL``, git-config(1) ENVIRONMENT), the dangerous keys are overridden with ``-c``
(command-line config wins over the repository's, git-config(1) "FILES"), diffs run with
``--no-ext-diff --no-textconv``, blobs are read with ``cat-file blob`` (no filters), and every
transport is refused (``protocol.allow=never``, git-config(1)). The repository's git directory is
found by :func:`find_git_dir` and given as ``--git-dir``, so git never searches the parent folders,
and it is trusted explicitly with ``safe.directory`` (honoured only from protected config such as
``-c``, git-config(1) "safe.directory"): the checks above are what makes reading it safe.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.errors import InputError, PathRefused
from trainaudit.safeio import check_location, confinement

# Branch/tag names, shas, HEAD~3, main^, v1.2 — but nothing starting with "-" and no ".." ranges.
_REV_RE = re.compile(r"^(?!-)(?!.*\.\.)[A-Za-z0-9._/@^~{}+-]{1,200}$")
_SHA_RE = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # SHA-1 or SHA-256 object names
_URL_USER = re.compile(r"(?<=://)[^/@\s]*+@")  # "user:token@" of a remote URL
_FIELD = "\x1f"
_RECORD = "\x1e"
GIT_TIMEOUT_S = 60
GIT_OUTPUT_BYTES = 256 << 20  # of one git call's output (a log of 12k commits with files is ~20 MB)

# Config that must not come from the repository: each one names a command or reaches the network.
_HARDENED = {
    "core.fsmonitor": "false",
    "core.hooksPath": os.devnull,
    "core.pager": "cat",
    "core.sshCommand": "false",
    "core.gitProxy": "",
    "core.askPass": "",
    "credential.helper": "",
    "diff.external": "",
    "log.showSignature": "false",
    "gpg.program": "false",
    "gpg.ssh.program": "false",
    "gpg.x509.program": "false",
    "protocol.allow": "never",
    "fetch.recurseSubmodules": "false",
    "submodule.recurse": "false",
    "color.ui": "false",
    # Keys that name files git would open: a FIFO there blocks every call, a file outside an MCP
    # root would be read (git-config(1): mailmap.file, core.attributesFile, core.excludesFile).
    "mailmap.file": os.devnull,
    "mailmap.blob": "",
    "core.attributesFile": os.devnull,
    "core.excludesFile": os.devnull,
    "init.templateDir": "",
}
# ``[include] path = ...`` and ``[includeIf "..."] path = ...`` (git-config(1) "Includes"): git has no
# switch to skip them, so each file they name is checked before git runs.
_INCLUDE_SECTION = re.compile(r'^\s*\[\s*include(?:if\s+"[^"\n]{0,4096}")?\s*\]', re.IGNORECASE)
_SECTION = re.compile(r"^\s*\[")
_MAX_CONFIG_BYTES = 1 << 20
_MAX_OBJECT_FILES = 500_000


def git_env() -> dict[str, str]:
    """The whole environment of a git call: nothing inherited but PATH (no GIT_DIR, GIT_EXTERNAL_DIFF,
    GIT_SSH or config from the caller's environment)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
            "GIT_PROTOCOL_FROM_USER": "0",
            # Overrides every protocol.<name>.allow of the repository's config (git(1) ENVIRONMENT).
            "GIT_ALLOW_PROTOCOL": "none", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_OPTIONAL_LOCKS": "0",
            "HOME": os.devnull, "XDG_CONFIG_HOME": os.devnull}


def git_command(git_dir: Path, args: list[str]) -> list[str]:
    """``git`` with the repository given explicitly and the hardened config before ``args``."""
    cmd = ["git", f"--git-dir={git_dir}", "--no-pager", "-c", f"safe.directory={git_dir}"]
    for key, value in _HARDENED.items():
        cmd += ["-c", f"{key}={value}"]
    return [*cmd, *args]


def find_git_dir(path: Path, shown: str) -> Path:
    """The git directory of a work tree (``.git``, or the folder a ``.git`` file points to) or of a
    bare repository, resolved; every location it uses must pass :func:`check_location` (the MCP
    root). Git itself is not asked, because asking runs it with the repository's config."""
    dot = path / ".git"
    if dot.is_file():
        try:
            first = dot.read_text(encoding="utf-8", errors="replace")[:4096].splitlines()[0]
        except (OSError, IndexError):
            raise InputError(f"--repo {shown}: unreadable .git file") from None
        if not first.startswith("gitdir: "):
            raise InputError(f"--repo {shown}: .git file without a gitdir line")
        target = Path(first[len("gitdir: "):].strip())
        git_dir = (target if target.is_absolute() else path / target).resolve()
    elif dot.is_dir():
        git_dir = dot.resolve()
    elif (path / "HEAD").is_file() and (path / "objects").is_dir():
        git_dir = path.resolve()
    else:
        raise InputError(f"--repo {shown}: not a git repository")
    check_location(git_dir, f"--repo {shown}: its git directory")
    for name in ("config", "config.worktree"):
        _check_includes(git_dir / name, shown)
    # A linked work tree shares the main repository's objects (``commondir``) and a repository may
    # borrow objects from others (``objects/info/alternates``, gitrepository-layout(5)).
    for rel in ("commondir", "objects/info/alternates"):
        f = git_dir / rel
        if f.is_file():
            for line in f.read_text(encoding="utf-8", errors="replace")[:65536].splitlines():
                if line.strip() and not line.startswith("#"):
                    other = Path(line.strip())
                    check_location((other if other.is_absolute() else git_dir / other).resolve(),
                                   f"--repo {shown}: {rel}")
    conf = confinement()
    if conf is not None and not conf.allow_hardlinks:
        _check_no_hard_links(git_dir / "objects", shown)
    return git_dir


def _included_paths(text: str) -> list[str]:
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if _SECTION.match(line):
            inside = bool(_INCLUDE_SECTION.match(line))
            continue
        key, eq, value = line.partition("=")
        if inside and eq and key.strip().lower() == "path":
            out.append(value.strip().strip('"'))
    return out


def _check_includes(config: Path, shown: str) -> None:
    """Every file the repository's config includes must be a regular file (a FIFO would block git)
    and, when confined, inside the roots."""
    if not config.is_file():
        return
    with config.open("rb") as f:
        text = f.read(_MAX_CONFIG_BYTES).decode("utf-8", errors="replace")
    for given in _included_paths(text):
        target = Path(given)
        if not target.is_absolute():
            if given.startswith("~"):
                raise InputError(f"--repo {shown}: its config includes {given!r} from the home folder; "
                                 "trainaudit does not read it")
            target = config.parent / target
        try:
            st = os.stat(target)
        except OSError:
            continue  # git skips a missing include
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"--repo {shown}: its config includes {given!r}, which is not a regular file")
        check_location(target.resolve(), f"--repo {shown}: its config includes {given!r}")


def _check_no_hard_links(objects: Path, shown: str) -> None:
    """A loose object or pack that is a hard link may be another repository's file outside the roots."""
    seen = 0
    for dirpath, _dirs, files in os.walk(objects, followlinks=False):
        for name in files:
            seen += 1
            if seen > _MAX_OBJECT_FILES:
                raise InputError(f"--repo {shown}: more than {_MAX_OBJECT_FILES} object files")
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISLNK(st.st_mode) or st.st_nlink > 1:
                raise PathRefused(f"--repo {shown}: an object file is a link (its other names may be "
                                  "outside the allowed roots; start the server with --allow-hardlinks)")


@dataclass(slots=True)
class CommitInfo:
    sha: str
    date: str  # ISO 8601, committer date
    author: str
    title: str
    body: str = ""
    files: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)  # new path -> old path, for files moved unchanged
    status: dict[str, str] = field(default_factory=dict)  # path -> A (added), M, D (deleted), R (moved)


class Repo:
    def __init__(self, path: str) -> None:
        self.display = path
        p = Path(path)
        if not p.exists():
            raise InputError(f"--repo {path}: no such directory")
        self.path = p
        check_location(p.resolve(), f"--repo {path}")
        self.git_dir = find_git_dir(p, path)
        out = self._run(["rev-parse", "--git-dir"], what=f"--repo {path}: not a git repository")
        if not out.strip():
            raise InputError(f"--repo {path}: not a git repository")

    def _proc(self, args: list[str], what: str) -> subprocess.CompletedProcess[bytes]:
        """Run git; its output is read up to ``GIT_OUTPUT_BYTES`` (the rest is left unread and git
        stopped: twelve commit messages of 150 MB are not history anyone reads) and its stderr up
        to 64 KB, within ``GIT_TIMEOUT_S``."""
        try:
            proc = subprocess.Popen(git_command(self.git_dir, args), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=git_env(), cwd=self.git_dir,
                                    stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise InputError("git is not installed (needed for --repo)") from None
        assert proc.stdout is not None and proc.stderr is not None
        err = bytearray()
        err_stream = proc.stderr

        def drain_stderr() -> None:  # a full stderr pipe would block git while stdout is read
            while chunk := err_stream.read(65536):
                if len(err) < 65536:
                    err.extend(chunk[: 65536 - len(err)])

        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(GIT_TIMEOUT_S, stop)
        reader = threading.Thread(target=drain_stderr, daemon=True)
        timer.start()
        reader.start()
        out = bytearray()
        try:
            while len(out) < GIT_OUTPUT_BYTES and (chunk := proc.stdout.read(1 << 20)):
                out.extend(chunk)
            if len(out) >= GIT_OUTPUT_BYTES:
                del out[GIT_OUTPUT_BYTES:]
                proc.kill()
            code = proc.wait()
            reader.join()
        finally:
            timer.cancel()
            proc.stdout.close()
            proc.stderr.close()
        if timed_out.is_set():
            raise InputError(f"{what}: git took longer than {GIT_TIMEOUT_S} s")
        return subprocess.CompletedProcess(args, 0 if len(out) >= GIT_OUTPUT_BYTES else code, bytes(out), bytes(err))

    def _run(self, args: list[str], *, what: str, check: bool = True) -> str:
        proc = self._proc(args, what)
        err = proc.stderr.decode("utf-8", "replace").strip()
        if check and proc.returncode != 0:
            detail = err.splitlines()[-1] if err else f"exit {proc.returncode}"
            raise InputError(f"{what} ({detail})")
        return proc.stdout.decode("utf-8", "replace")

    @property
    def name(self) -> str:
        """How a report names the repository: its origin remote (without credentials), else its
        folder's name; never a path of this machine."""
        url = self._run(["config", "--get", "remote.origin.url"], what="git config", check=False).strip()
        if url:
            return _URL_USER.sub("", url)[:200]
        folder = self.path.resolve()
        if folder.name == ".git":
            folder = folder.parent
        return folder.name[:-4] if folder.name.endswith(".git") and len(folder.name) > 4 else folder.name

    def resolve(self, rev: str, option: str = "revision") -> str:
        """Full sha of a commit-ish, or InputError naming the option and the revision."""
        if not _REV_RE.match(rev):
            raise InputError(f"{option} {rev!r}: not a valid revision name")
        out = self._run(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
                        what=f"{option} {rev}: unknown revision in {self.display}", check=False).strip()
        if not _SHA_RE.fullmatch(out):
            raise InputError(f"{option} {rev}: unknown revision in {self.display}")
        return out

    def is_ancestor(self, a: str, b: str) -> bool:
        return self._proc(["merge-base", "--is-ancestor", a, b], "git merge-base").returncode == 0

    def commits(self, rev_range: list[str], *, max_count: int = 2000, with_files: bool = True,
                paths: list[str] | None = None) -> tuple[list[CommitInfo], bool]:
        """Commits of ``rev_range`` (e.g. [good_sha + '..' + bad_sha] built from resolved shas),
        newest first, at most ``max_count``; returns (commits, truncated)."""
        # Record separator first, so the --name-status file list that follows a header stays with it.
        fmt = _RECORD + _FIELD.join(["%H", "%cI", "%an", "%s", "%b", "%P"]) + _FIELD
        # A merge lists what it brought to its first parent (what landed on the branch), as a
        # plain commit does (by default git log lists no files for merges). Exact renames are
        # detected so that a moved file is not read as rewritten.
        args = ["log", f"--max-count={max_count + 1}", f"--format={fmt}", "--no-color", "--no-ext-diff",
                "--no-textconv", "--diff-merges=first-parent"]
        if with_files:
            args += ["--name-status", "-M100%"]
        else:
            args.append("--no-renames")
        args += rev_range
        if paths:
            args += ["--", *paths]
        out = self._run(args, what=f"git log {' '.join(rev_range)}")
        commits: list[CommitInfo] = []
        for rec in out.split(_RECORD)[1:]:
            parts = rec.split(_FIELD)
            if len(parts) < 7:
                continue
            files: list[str] = []
            moved: dict[str, str] = {}
            status: dict[str, str] = {}
            for line in parts[6].splitlines():
                cols = line.split("\t")
                if len(cols) == 3 and cols[0].startswith("R"):
                    files.append(cols[2])
                    moved[cols[2]] = cols[1]
                    status[cols[2]] = "R"
                elif len(cols) == 2 and cols[1].strip():
                    files.append(cols[1])
                    status[cols[1]] = cols[0][:1]
            commits.append(CommitInfo(sha=parts[0], date=parts[1], author=parts[2], title=parts[3],
                                      body=parts[4].strip(), parents=parts[5].split(), files=files, moved=moved,
                                      status=status))
        truncated = len(commits) > max_count
        return commits[:max_count], truncated

    def show_file(self, rev: str, path: str, max_bytes: int = 20_000_000) -> bytes | None:
        # cat-file, not show: it never applies textconv or other filters (git-cat-file(1)).
        proc = self._proc(["cat-file", "blob", f"{rev}:{path}"], f"git cat-file {rev}:{path}")
        if proc.returncode != 0:
            return None
        return proc.stdout[:max_bytes]

    def renamed_from(self, good: str, bad: str, path: str) -> str | None:
        """The path ``path`` (at ``bad``) had at ``good``, when a commit of ``good..bad`` moved it."""
        out = self._run(["log", "--follow", "-M", "--name-status", "--format=", "--no-color", "--no-ext-diff",
                         "--no-textconv", f"{good}..{bad}", "--", path], what=f"git log --follow {path}", check=False)
        old = None
        for line in out.splitlines():  # newest first: the last rename listed is the oldest
            parts = line.split("\t")
            if len(parts) == 3 and parts[0].startswith("R"):
                old = parts[1]
        return old

    def ls_files(self, rev: str, pattern: re.Pattern[str] | None = None, max_files: int = 200_000) -> list[str]:
        out = self._run(["ls-tree", "-r", "--name-only", rev], what=f"git ls-tree {rev}")
        files = out.splitlines()[:max_files]
        if pattern is not None:
            files = [f for f in files if pattern.search(f)]
        return files

    def diffs(self, rev_range: list[str], paths: list[str], *, max_count: int, max_bytes: int = 64_000_000,
              context: int = 0) -> dict[str, str]:
        """Per-commit patches of ``rev_range`` restricted to ``paths``, in ONE git call (reading
        commit by commit costs a process per commit: 37 s for 12k commits here)."""
        if not paths:
            return {}
        out = self._run(["log", f"--max-count={max_count}", f"--format={_RECORD}%H", "-p", "--no-color",
                         f"--unified={context}", "--no-ext-diff", "--no-textconv", "--no-renames",
                         "--diff-merges=first-parent", *rev_range, "--", *paths],
                        what=f"git log -p {' '.join(rev_range)}")[:max_bytes]
        result: dict[str, str] = {}
        for rec in out.split(_RECORD)[1:]:
            sha, _, patch = rec.partition("\n")
            result[sha.strip()] = patch
        return result

    def diff_text(self, sha: str, paths: list[str], max_bytes: int = 200_000, context: int = 0) -> str:
        """The patch of one commit restricted to ``paths`` (first parent), truncated."""
        out = self._run(["show", "--format=", "--no-color", f"--unified={context}", "--no-ext-diff", "--no-textconv", sha, "--",
                         *paths],
                        what=f"git show {sha}", check=False)
        return out[:max_bytes]
