"""trainaudit: find the root cause of failed ML training runs and CI checks from their artifacts."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trainaudit")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
