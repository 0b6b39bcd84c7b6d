"""trainaudit: find the root cause of failed ML training runs and CI checks from their artifacts."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trainaudit")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "monitor"]


def __getattr__(name: str) -> object:
    # lazy: ``trainaudit.monitor(model, optimizer, log_dir=...)`` imports torch only when called
    if name == "monitor":
        import importlib

        return importlib.import_module("trainaudit.monitor")
    raise AttributeError(f"module 'trainaudit' has no attribute {name!r}")
