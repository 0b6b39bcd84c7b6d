"""CLI commands, one module each, loaded lazily by :mod:`trainaudit.cli` (register a new one in
``trainaudit.cli.COMMANDS``)."""
