"""``ChannelsLastHook``: train an mmaction2 3D recognizer in channels_last_3d.

mmengine has no memory-format option, and mmaction2's data preprocessor
stacks clips as contiguous ``(N, num_clips, C, T, H, W)``. The hook does
the two things channels_last_3d training needs: every 5-D parameter (the
``Conv3d`` weights) is stored in ``torch.channels_last_3d`` once before
training, and every 5-D input of the backbone is converted (one copy per
forward pass; the recognizer reshapes the preprocessor's 6-D batch to
``(N * num_clips, C, T, H, W)`` first). Convolutions then keep the format
layer to layer; sub-batch BN (:mod:`mmext.multigrid.bn`) keeps it too.
Training, validation, precise BN and testing all go through the backbone,
so all of them run in the format. Checkpoints hold the same values (a
memory format is not saved by ``state_dict``) and load into the plain
recipe.

Works with and without :class:`~mmext.multigrid.MultigridHook`::

    custom_hooks = [dict(type='mmext.ChannelsLastHook'),
                    dict(type='mmext.MultigridHook')]
"""
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from mmext.registry import HOOKS

__all__ = ['ChannelsLastHook', 'to_channels_last_3d']

_FORMAT = torch.channels_last_3d


def to_channels_last_3d(model: torch.nn.Module) -> int:
    """Store every 5-D parameter and buffer of ``model`` in channels_last_3d.

    In place: the Parameter objects stay (the optimizer and DDP keep theirs);
    only their storage changes, as ``Module.to(memory_format=...)`` does,
    which cannot be used here because it also converts 4-D tensors (e.g.
    the 2-D convolutions of TSM), and channels_last_3d needs 5 dimensions.

    Returns:
        int: Number of tensors converted.
    """
    count = 0
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.dim() == 5 and not tensor.is_contiguous(
                    memory_format=_FORMAT):
                tensor.data = tensor.data.contiguous(memory_format=_FORMAT)
                count += 1
    return count


def _inputs_to_channels_last(module, args):
    """Forward pre-hook: the first 5-D positional input in channels_last."""
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 5:
        return (args[0].contiguous(memory_format=_FORMAT), ) + tuple(
            args[1:])
    return None


@HOOKS.register_module()
class ChannelsLastHook(Hook):
    """Train and evaluate a recognizer's backbone in channels_last_3d.

    A forward pre-hook on ``model.backbone`` converts its 5-D input from
    ``before_run`` on. The model's 5-D parameters and buffers (and the
    optimizer's 5-D state, e.g. SGD momentum after a resume) are converted
    in ``before_train`` (after mmengine initialised or loaded the weights,
    whose random initialisation fills tensors in memory order, and before
    the first step, which ``compile=True`` traces) and in
    ``before_val``/``before_test`` for evaluation-only runs. Add it to
    ``custom_hooks``, with or without ``mmext.MultigridHook``.

    Raises:
        ValueError: In ``before_run`` if the model has no ``backbone``.
    """

    priority = 'VERY_HIGH'

    def __init__(self):
        self._handle = None

    def before_run(self, runner) -> None:
        backbone = getattr(_unwrap(runner.model), 'backbone', None)
        if backbone is None:
            raise ValueError(
                f'ChannelsLastHook converts the inputs of model.backbone, '
                f'but {type(_unwrap(runner.model)).__name__} has no '
                f'backbone. Use it with an mmaction2 recognizer '
                f'(Recognizer3D, ...).')
        if self._handle is None:
            self._handle = backbone.register_forward_pre_hook(
                _inputs_to_channels_last)

    def before_train(self, runner) -> None:
        count = to_channels_last_3d(_unwrap(runner.model))
        optimizer = getattr(runner.optim_wrapper, 'optimizer', None)
        for state in getattr(optimizer, 'state', {}).values():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() == 5:
                    state[key] = value.contiguous(memory_format=_FORMAT)
        print_log(f'ChannelsLastHook: {count} 5-D parameters/buffers and '
                  f'the backbone inputs in channels_last_3d',
                  logger='current')

    def before_val(self, runner) -> None:
        to_channels_last_3d(_unwrap(runner.model))

    before_test = before_val

    def after_run(self, runner) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def _unwrap(model):
    return model.module if is_model_wrapper(model) else model
