"""MCP server for agents: ``trainaudit mcp`` (stdio) or ``trainaudit mcp --http`` (streamable HTTP on
127.0.0.1). Tools mirror the CLI; inputs are confined to ``--root`` folders (``roots.py``)."""

from trainaudit.mcp.roots import PathRefused, Roots

__all__ = ["PathRefused", "Roots"]
