"""mmext: multigrid and AGVM training for OpenMMLab 2.0 toolboxes.

``mmext.multigrid`` and ``mmext.agvm`` hold one method each; importing
``mmext`` itself only registers the ``mmext::`` config prefix
(:mod:`mmext.compat`).
"""
from . import compat  # noqa: F401
from .version import __version__

__all__ = ['__version__']
