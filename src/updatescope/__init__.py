"""updatescope: the geometry of parameter updates."""
from updatescope._version import __version__

__all__ = ["__version__"]
