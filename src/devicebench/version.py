"""devicebench's version, as installed: the bottom of the package, so that any module can name it without
importing anything heavy."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("devicebench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
