"""Writes never follow links: output folders unpacked from an artifact may hold symbolic links (or
hard links) planted to redirect a write, and a folder can be swapped for a link after it was
checked. Each case checks the victim file outside the output folder is untouched and the command
ends with one line and exit 2 (or succeeds without touching the victim)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import run
from trainaudit.errors import InputError, PathRefused
from trainaudit.mcp.roots import Roots
from trainaudit.mcp.tools import Toolbox
from trainaudit.outdir import OutDir

LOG = "".join(f" iteration {i}/ 40 | lm loss: {v:.6E} | grad norm: 1.0 |\n"
              for i, v in enumerate([5.0 - 0.05 * k for k in range(20)] + [float("nan")] * 20, start=1))
VICTIM = "export PATH=$HOME/bin:$PATH  # the user's own file\n"


@pytest.fixture()
def case(tmp_path: Path) -> tuple[Path, Path]:
    work, victim_dir = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    victim_dir.mkdir()
    (work / "train.log").write_text(LOG)
    (victim_dir / ".bashrc").write_text(VICTIM)
    return work, victim_dir


def _answer(work: Path) -> Path:
    out = run(["diagnose", "train.log", "-o", "rep", "-q"], work)
    assert out.code == 1, out.stderr
    return work / "rep" / "answer.json"


def test_report_html_symlink_is_refused_and_its_target_kept(case: tuple[Path, Path]) -> None:
    work, home = case
    answer = _answer(work)
    os.symlink(home / ".bashrc", answer.with_name("report.html"))
    out = run(["report", str(answer)], work)
    assert out.code == 2 and "link" in out.stderr
    assert (home / ".bashrc").read_text() == VICTIM


def test_plots_folder_symlink_is_refused_and_its_pngs_kept(case: tuple[Path, Path]) -> None:
    work, home = case
    (home / "pics").mkdir()
    (home / "pics" / "holiday.png").write_bytes(b"\x89PNG mine")
    (work / "rep").mkdir()
    os.symlink(home / "pics", work / "rep" / "plots")
    out = run(["diagnose", "train.log", "-o", "rep", "-q"], work)
    assert out.code == 2 and "rep/plots" in out.stderr and "link" in out.stderr
    assert [p.name for p in (home / "pics").iterdir()] == ["holiday.png"]
    assert (home / "pics" / "holiday.png").read_bytes() == b"\x89PNG mine"


def test_output_folder_that_is_a_symlink_is_refused(case: tuple[Path, Path]) -> None:
    work, home = case
    os.symlink(home, work / "rep")
    out = run(["diagnose", "train.log", "-o", "rep", "-q"], work)
    assert out.code == 2 and "symbolic link" in out.stderr
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]


def test_hard_link_in_the_output_folder_keeps_the_other_name_intact(case: tuple[Path, Path]) -> None:
    work, home = case
    answer = _answer(work)
    answer.unlink()
    os.link(home / ".bashrc", answer)  # an old answer.json that is the user's file under another name
    out = run(["diagnose", "train.log", "-o", "rep", "-q"], work)
    assert out.code == 1
    assert (home / ".bashrc").read_text() == VICTIM
    assert answer.read_text().startswith("{")
    assert os.stat(answer).st_nlink == 1


def test_parse_output_file_that_is_a_symlink_is_refused(case: tuple[Path, Path]) -> None:
    work, home = case
    os.symlink(home / ".bashrc", work / "series.csv")
    out = run(["parse", "train.log", "-o", "series.csv"], work)
    assert out.code == 2 and "link" in out.stderr
    assert (home / ".bashrc").read_text() == VICTIM


def test_parse_writes_through_the_folder_as_before(case: tuple[Path, Path]) -> None:
    work, _ = case
    out = run(["parse", "train.log", "-o", "series.csv"], work)
    assert out.code == 0, out.stderr
    rows = (work / "series.csv").read_text().splitlines()
    assert rows[0].startswith("source,") and len(rows) > 20
    assert not [p for p in work.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_gitlab_report_symlink_is_refused(case: tuple[Path, Path]) -> None:
    work, home = case
    answer = _answer(work)
    os.symlink(home / ".bashrc", work / "gl.json")
    out = run(["report", str(answer), "--no-html", "--gitlab", "gl.json"], work)
    assert out.code == 2
    assert (home / ".bashrc").read_text() == VICTIM


def test_mcp_out_swapped_for_a_link_after_the_check_writes_nothing_outside(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "train.log").write_text(LOG)
    real_open = OutDir.open

    def swap_then_open(path: Path, *, create: bool = True) -> OutDir:
        # The attacker's move between the check and the open: the checked folder's parent
        # becomes a link that leads outside the root.
        parent = path.parent
        if parent.is_dir() and not parent.is_symlink():
            parent.rmdir()
        parent.symlink_to(outside, target_is_directory=True)
        return real_open(path, create=create)

    monkeypatch.setattr(OutDir, "open", staticmethod(swap_then_open))
    box = Toolbox(Roots.of([str(root)]))
    with pytest.raises(PathRefused):
        box.diagnose(["train.log"], out="reports/r1")
    assert list(outside.rglob("*")) == [outside / "r1"] or list(outside.rglob("*")) == []
    assert not any(p.is_file() for p in outside.rglob("*"))


def test_outdir_never_writes_through_a_link_swapped_in_after_open(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with OutDir.open(out) as folder:
        out.rename(tmp_path / "moved")  # the folder moves away and a link takes its name
        os.symlink(elsewhere, out)
        folder.write_text("answer.json", "{}\n")
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "moved" / "answer.json").read_text() == "{}\n"


def test_outdir_remove_refuses_a_folder_and_keeps_links_targets(tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("keep")
    with OutDir.open(tmp_path / "out") as folder:
        os.symlink(target, tmp_path / "out" / "answer.md")
        with pytest.raises(InputError):
            folder.remove("answer.md")
        with pytest.raises(InputError):
            folder.write_text("answer.md", "x")
        (tmp_path / "out" / "answer.json").mkdir()
        with pytest.raises(InputError):
            folder.remove("answer.json")
        with pytest.raises(ValueError):
            folder.write_text("../escape", "x")
    assert target.read_text() == "keep"


# -- reads that must stay inside an MCP server's roots ----------------------------------------------
@pytest.fixture()
def mcp_world(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "srv" / "root", tmp_path / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    (root / "train.log").write_text(LOG)
    return root, outside


def test_pyproject_above_the_root_is_not_read_as_rule_config(mcp_world: tuple[Path, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = mcp_world
    # A config above the root that would silence every rule.
    (root.parent / "pyproject.toml").write_text('[tool.trainaudit]\nignore = ["TA"]\n')
    monkeypatch.chdir(root)
    got = Toolbox(Roots.of([str(root)])).diagnose(["train.log"])
    assert got.verdict == "unhealthy" and got.category == "nan_inf"
    # Without the server's confinement the same file is the project's config, as for ruff.
    from trainaudit.rules.config import load_config
    assert load_config(start=root).ignore == ["TA"]


def test_hard_linked_config_is_refused_inside_the_mcp_root(mcp_world: tuple[Path, Path]) -> None:
    root, outside = mcp_world
    (outside / "private.toml").write_text('[tool.trainaudit]\nignore = ["TA1"]\n')
    os.link(outside / "private.toml", root / "cfg.toml")
    with pytest.raises(InputError, match="hard link"):
        Toolbox(Roots.of([str(root)])).diagnose(["train.log"], config="cfg.toml")


def test_batch_set_file_naming_a_golden_outside_its_folder_is_refused(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    (sets / "one").mkdir(parents=True)
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "golden.json").write_text('{"lm loss": {"values": {"1": 1.0}}}')
    (sets / "one" / "train.log").write_text(LOG)
    (sets / "one" / "trainaudit-set.json").write_text('{"golden": "../../private/golden.json"}')
    out = run(["batch", str(sets), "-o", str(tmp_path / "out")], tmp_path)
    assert out.code == 2 and "outside the set's folder" in out.stderr


def _repo(path: Path) -> None:
    from hostile_git import hostile_repo
    hostile_repo(path, "environment", path.parent / "PWNED")


def test_git_config_include_outside_the_root_is_refused(mcp_world: tuple[Path, Path]) -> None:
    root, outside = mcp_world
    _repo(root / "repo")
    (outside / "extra.cfg").write_text("[user]\n\tname = someone\n")
    with (root / "repo" / ".git" / "config").open("a") as f:
        f.write(f"[include]\n\tpath = {outside / 'extra.cfg'}\n")
    with pytest.raises(PathRefused, match="includes"):
        Toolbox(Roots.of([str(root)])).trace_history("repo")


def test_git_config_include_of_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    _repo(tmp_path / "repo")
    os.mkfifo(tmp_path / "pipe")
    with (tmp_path / "repo" / ".git" / "config").open("a") as f:
        f.write(f'[includeIf "gitdir:/"]\n\tpath = {tmp_path / "pipe"}\n[mailmap]\n\tfile = {tmp_path / "pipe"}\n')
    out = run(["audit", "--repo", "repo", "--good", "HEAD~2", "--bad", "HEAD", "-o", "out"], tmp_path)
    assert out.code == 2 and "not a regular file" in out.stderr


def test_git_mailmap_and_attributes_files_are_not_opened(tmp_path: Path) -> None:
    from trainaudit.history.git import git_command
    cmd = git_command(tmp_path, ["log"])
    for key in ("mailmap.file", "core.attributesFile", "core.excludesFile"):
        assert f"{key}={os.devnull}" in cmd


def test_git_objects_hard_linked_from_outside_are_refused_in_the_mcp_root(mcp_world: tuple[Path, Path]) -> None:
    root, outside = mcp_world
    _repo(outside / "other")
    _repo(root / "repo")
    obj = next(p for p in (root / "repo" / ".git" / "objects").rglob("*") if p.is_file())
    twin = outside / "twin"
    os.link(obj, twin)  # the object file now has a second name outside the root
    with pytest.raises(PathRefused, match="object file"):
        Toolbox(Roots.of([str(root)])).trace_history("repo")
    assert Toolbox(Roots.of([str(root)], allow_hardlinks=True)).trace_history("repo") is not None
