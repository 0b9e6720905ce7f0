"""Import-time compatibility fixes for the mmext stack, applied once.

Importing :mod:`mmext` applies every fix below; each is idempotent. They
exist because mmengine 0.10.7 predates the torch and packaging versions the
stack runs on (pinned in ``requirements/stack.txt``).

1. **Checkpoint loading on torch >= 2.6.** torch 2.6 made ``torch.load``
   default to ``weights_only=True``. mmengine's checkpoints hold the message
   hub (``HistoryBuffer`` objects, numpy arrays, and objects rebuilt through
   ``getattr``), so ``--resume`` fails with ``UnpicklingError``
   (open-mmlab/mmengine#1655, unfixed in 0.10.7; open-mmlab/mmengine#1650). Allow-listing
   them with ``torch.serialization.add_safe_globals`` would have to allow
   ``builtins.getattr``, which voids the protection anyway, so the torch < 2.6
   default is restored through torch's own switch
   ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` (read at each load; explicit
   ``weights_only=True`` calls keep their meaning). As before torch 2.6: only
   load checkpoints you trust. A value the user set is left untouched.
2. **``mmext::`` config paths.** mmengine resolves ``_base_ = 'pkg::path'``
   only for packages in its hard-coded ``MODULE2PACKAGE`` table; mmext adds
   itself so configs anywhere can inherit ``'mmext::agvm/...'`` once mmext is
   imported (``tools/train.py`` imports it before reading the config).
"""
import os

from mmengine.config import utils as _config_utils

__all__ = ['apply_compat_fixes']


def apply_compat_fixes() -> None:
    """Apply the import-time fixes described in this module's docstring."""
    os.environ.setdefault('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    _config_utils.MODULE2PACKAGE.setdefault('mmext', 'mmext')


apply_compat_fixes()
