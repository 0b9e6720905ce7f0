"""mmext: multigrid and AGVM training for OpenMMLab 2.0 toolboxes.

``mmext.multigrid`` and ``mmext.agvm`` hold one method each; importing
``mmext`` itself only registers the ``mmext::`` config prefix
(:mod:`mmext.compat`).
"""
import warnings

# The stack pins setuptools < 81 because mmengine 0.10.7 and mmcv import
# pkg_resources, whose import then warns that it is deprecated, two or three
# times per process; the pin is deliberate (docs/en/get_started.md).
warnings.filterwarnings('ignore', message='pkg_resources is deprecated',
                        category=UserWarning)

from . import compat  # noqa: F401,E402
from .version import __version__  # noqa: E402

__all__ = ['__version__']
