"""The MCP root holds at open time: a file swapped for a symlink while tools read it never leaks what
is outside, hard links are refused unless allowed, non-regular files are refused; and one real
server keeps answering while a tool call works on a hostile file."""

from __future__ import annotations

import gzip
import os
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from trainaudit.errors import InputError, PathRefused
from trainaudit.mcp.roots import Roots
from trainaudit.mcp.tools import Toolbox

INSIDE = "iteration 1/ 10 | lm loss: 1.000000E+00 |\n"
OUTSIDE = "TOP-SECRET-OUTSIDE-THE-ROOT\n"


@pytest.fixture()
def world(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.log").write_text(OUTSIDE * 10)
    (root / "train.log").write_text(INSIDE * 10)
    return root, outside


def test_swapping_a_file_for_a_symlink_while_reading_leaks_nothing(world: tuple[Path, Path]) -> None:
    root, outside = world
    box = Toolbox(Roots.of([str(root)]))
    target = root / "train.log"
    stop = threading.Event()

    def swapper() -> None:
        link, real = root / "swap.tmp", root / "real.tmp"
        real.write_text(INSIDE * 10)
        os.symlink(outside / "secret.log", link)
        while not stop.is_set():
            os.replace(link, target)  # now a symlink to outside
            os.symlink(outside / "secret.log", link)
            real.write_text(INSIDE * 10)
            os.replace(real, target)  # a regular file again

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    leaks = refused = ok = 0
    try:
        for _ in range(400):
            try:
                got = box.read_source("train.log")
            except (InputError, OSError):  # the server turns both into a one-line tool error
                refused += 1
                continue
            ok += 1
            leaks += any("TOP-SECRET" in ln for ln in got.lines)
    finally:
        stop.set()
        t.join()
    assert leaks == 0
    assert ok + refused == 400


def test_hard_link_to_a_file_outside_is_refused_unless_allowed(world: tuple[Path, Path]) -> None:
    root, outside = world
    os.link(outside / "secret.log", root / "hard.log")
    with pytest.raises(PathRefused, match="hard link"):
        Toolbox(Roots.of([str(root)])).read_source("hard.log")
    got = Toolbox(Roots.of([str(root)], allow_hardlinks=True)).read_source("hard.log")
    assert got.lines


def test_fifo_under_the_root_is_refused_without_waiting(world: tuple[Path, Path]) -> None:
    root, _ = world
    os.mkfifo(root / "pipe.log")
    t0 = time.monotonic()
    with pytest.raises(InputError, match="not a regular file"):
        Toolbox(Roots.of([str(root)])).diagnose(["pipe.log"])
    assert time.monotonic() - t0 < 5


def test_server_keeps_answering_during_a_hostile_call(world: tuple[Path, Path]) -> None:
    root, _ = world
    # 30 MiB of lines with no number in them, compressed 30x: read whole (a few seconds) before the
    # answer that nothing was found (a bomb past the ratio limit is now refused at once)
    with gzip.open(root / "bomb.log.gz", "wb", compresslevel=1) as f:
        chunk = (b"a" * 99 + b"\n") * ((1 << 20) // 100)
        for _ in range(30):
            f.write(chunk)
    params = StdioServerParameters(command=sys.executable, args=["-m", "trainaudit", "mcp", "--root", str(root)],
                                   cwd=str(root))
    times: dict[str, float] = {}

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            await client.list_tools()
            t0 = time.monotonic()

            async def hostile() -> None:
                res = await client.call_tool("diagnose", {"paths": ["bomb.log.gz"]})
                assert res.is_error
                times["hostile"] = time.monotonic() - t0

            async def quick() -> None:
                await anyio.sleep(0.2)
                res = await client.call_tool("list_rules", {})
                assert not res.is_error
                times["quick"] = time.monotonic() - t0

            async with anyio.create_task_group() as tg:
                tg.start_soon(hostile)
                tg.start_soon(quick)

    anyio.run(main)
    assert times["quick"] < times["hostile"]
    assert times["hostile"] < 10
