"""The MCP server on a huge line: a 40 MiB line between two Megatron lines, and a 40 MiB file without a
line break, give bounded tool results or one tool error (through the SDK's client, in memory), and the
server answers the next call (before, the server died on such a line: an internal error)."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp import Client

from trainaudit.mcp.roots import Roots
from trainaudit.mcp.server import build_server

LINE = b"iteration 1/ 10 | lm loss: 1.000000E+00 |\n"


def test_a_huge_line_is_answered_in_bounded_results_and_the_server_lives_on(tmp_path: Path) -> None:
    (tmp_path / "huge.log").write_bytes(LINE + b"x" * (40 << 20) + b"\n" + LINE)
    (tmp_path / "nonl.log").write_bytes(b"y" * (40 << 20))
    results: list[tuple[str, bool, int]] = []

    async def main() -> None:
        async with Client(build_server(Roots.of([str(tmp_path)])), read_timeout_seconds=60) as c:
            for f in ("huge.log", "nonl.log"):
                for tool, args in (("parse_summary", {"paths": [f]}), ("diagnose", {"paths": [f]}),
                                   ("read_source", {"ref": f, "start_line": 1, "end_line": 3})):
                    res = await c.call_tool(tool, args)
                    size = len(res.content[0].text) if res.content else 0
                    results.append((f"{tool} {f}", res.is_error, size))
            alive = await c.call_tool("list_rules", {})
            results.append(("list_rules", alive.is_error, 0))

    anyio.run(main)
    by = {name: (err, size) for name, err, size in results}
    assert not by["list_rules"][0]
    assert not by["diagnose huge.log"][0] and not by["read_source huge.log"][0]
    assert by["diagnose nonl.log"][0]  # nothing to read in it: one tool error, not a dead server
    assert all(size < 1 << 20 for _, _, size in results), results  # no result carries the line whole
