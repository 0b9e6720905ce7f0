"""bfloat16 autocast for mmaction2 recognizers: class scores in float32.

Under ``AmpOptimWrapper(dtype='bfloat16')`` a recognizer head's linear layer
returns bfloat16 scores, and mmaction2 1.2's ``BaseHead.loss_by_feat``
computes the top-k accuracy it logs with numpy, which has no bfloat16:
training stops in the first iteration with ``TypeError: Got unsupported
ScalarType BFloat16`` (with or without multigrid; float16 works). A forward
hook on ``model.cls_head`` returns its floating-point outputs in float32, so
the loss and the accuracy are computed in float32 (the softmax
cross-entropy autocast runs in float32 anyway).
"""
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from mmext.registry import HOOKS

__all__ = ['Float32HeadHook', 'float32_head_outputs', 'autocasts_to_bf16']


def _to_float32(module, args, output):
    if torch.is_tensor(output) and output.is_floating_point():
        return output.float()
    return None


def float32_head_outputs(model: torch.nn.Module) -> bool:
    """Return ``model.cls_head``'s tensor output in float32 (idempotent).

    Returns:
        bool: True if the hook was added now; False if the model has no
        ``cls_head`` or already has it.
    """
    head = getattr(model, 'cls_head', None)
    if head is None or getattr(head, 'mmext_float32_outputs', False):
        return False
    head.register_forward_hook(_to_float32)
    head.mmext_float32_outputs = True
    return True


def autocasts_to_bf16(optim_wrapper) -> bool:
    """Whether the optim wrapper's ``optim_context`` autocasts to bfloat16
    (``AmpOptimWrapper(dtype='bfloat16')``; also inside an
    ``OptimWrapperDict``)."""
    wrappers = list(getattr(optim_wrapper, 'optim_wrappers', {}).values())
    return any(
        getattr(w, 'cast_dtype', None) == torch.bfloat16
        for w in wrappers or [optim_wrapper])


@HOOKS.register_module()
class Float32HeadHook(Hook):
    """Class scores in float32 for bfloat16 AMP (see the module docstring).

    ``MultigridHook`` does the same by itself when the run autocasts to
    bfloat16; add this hook to ``custom_hooks`` for a run without it.
    """

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(
            runner.model) else runner.model
        if float32_head_outputs(model):
            print_log('Float32HeadHook: cls_head outputs in float32',
                      logger='current')
