"""``mmext.AGVMAmpOptimWrapper``: AGVM with mmengine's CUDA mixed precision."""
from mmengine.optim import AmpOptimWrapper

from mmext.registry import OPTIM_WRAPPERS
from .optim_wrapper import AGVMOptimWrapper

__all__ = ['AGVMAmpOptimWrapper']


@OPTIM_WRAPPERS.register_module()
class AGVMAmpOptimWrapper(AGVMOptimWrapper, AmpOptimWrapper):
    """:class:`AGVMOptimWrapper` with mmengine's CUDA mixed precision.

    The MRO puts AGVM's steps around ``AmpOptimWrapper``'s: the forward runs
    under autocast, the backward scales the loss, and the halves are measured
    on the scaled gradients (the cosine does not depend on the loss scale);
    the loss scaler unscales, skips non-finite steps and updates as usual.
    ``tools/train.py --amp`` switches ``mmext.AGVMOptimWrapper`` to it.

    Args:
        loss_scale (str | float | dict): As in ``AmpOptimWrapper``.
        dtype (str | torch.dtype, optional): As in ``AmpOptimWrapper``.
        **kwargs: The options of :class:`AGVMOptimWrapper`.

    Raises:
        AssertionError: Without CUDA (raised by ``AmpOptimWrapper``).
    """
