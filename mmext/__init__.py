"""mmext: multigrid and AGVM training for OpenMMLab 2.0 toolboxes.

``mmext.multigrid`` and ``mmext.agvm`` hold one method each; importing
``mmext`` itself registers the ``mmext::`` config prefix
(:mod:`mmext.compat`) and the ``mmext`` scope, whose hints name the mmext
type or option a config misspells (:mod:`mmext.registry`).
"""
import warnings

# mmengine 0.10.7 and mmcv import pkg_resources (the pin setuptools<81 is
# deliberate, docs/en/get_started.md), which warns that it is deprecated.
warnings.filterwarnings('ignore', message='pkg_resources is deprecated',
                        category=UserWarning)

from . import compat, registry  # noqa: F401,E402
from .version import __version__  # noqa: E402

__all__ = ['__version__']
