"""The installed version, in a module of its own so that any layer can import it."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("onnxgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
