"""trainaudit: find the root cause of failed ML training runs and CI checks from their artifacts."""

# The one place the version is written: the build reads it from here (pyproject's [tool.hatch.version]).
# A constant, not importlib.metadata, whose import costs a tenth of a second on every command line.
__version__ = "0.1.0"

__all__ = ["__version__", "monitor"]


def __getattr__(name: str) -> object:
    # lazy: ``trainaudit.monitor(model, optimizer, log_dir=...)`` imports torch only when called
    if name == "monitor":
        import importlib

        return importlib.import_module("trainaudit.monitor")
    raise AttributeError(f"module 'trainaudit' has no attribute {name!r}")
