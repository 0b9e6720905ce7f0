"""mmext: multigrid and AGVM training for OpenMMLab 2.0 toolboxes."""
from . import compat  # noqa: F401  (applies the import-time fixes once)
from .version import __version__

__all__ = ['__version__']
