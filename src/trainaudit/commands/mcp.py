"""``trainaudit mcp``: serve trainaudit's tools to coding agents over MCP (stdio or streamable HTTP)."""

from __future__ import annotations

import ipaddress
import os

import click

from trainaudit.errors import UsageError
from trainaudit.mcp.roots import Roots


@click.command("mcp")
@click.option("--root", "roots", multiple=True, metavar="DIR",
              help="Folder the tools may read and write (repeatable). Default: the current directory. "
                   "Relative paths from the client are taken relative to the first root.")
@click.option("--allow-hardlinks", is_flag=True,
              help="Read files that have more than one name (a hard link's other name may be outside the roots).")
@click.option("--http", "http", is_flag=True, help="Streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP address (loopback only).")
@click.option("--port", default=8765, show_default=True, type=int, help="HTTP port.")
def mcp(roots: tuple[str, ...], allow_hardlinks: bool, http: bool, host: str, port: int) -> int:
    """Run the MCP server (tools: parse_summary, diagnose, compare, audit, trace_history, list_rules,
    explain_rule, get_evidence, read_source). Needs the `mcp` extra: pip install 'trainaudit[mcp]'.

    \b
    Example:
      trainaudit mcp --root ./ci-artifacts
      claude mcp add trainaudit -- trainaudit mcp --root .
      trainaudit mcp --http --port 8765       # http://127.0.0.1:8765/mcp
    """
    try:
        from trainaudit.mcp.server import build_server
        import mcp as _sdk  # noqa: F401
    except ImportError:
        raise UsageError("the MCP server needs the official SDK: pip install 'trainaudit[mcp]'") from None

    allowed = Roots.of(list(roots), allow_hardlinks=allow_hardlinks)
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if http and not loopback:
        raise UsageError(f"--host {host}: the HTTP transport has no authentication; only loopback addresses are allowed")
    # The server process works from its first root, so reports show root-relative paths as the agent gave them.
    os.chdir(allowed.primary)
    server = build_server(allowed)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run("stdio")
    return 0
