"""``mmext.NaNGuardHook``: stop (or skip the step) at a non-finite loss or
gradient, saying where and why (docs/en/design.md, "NaN guard")."""
import logging
import math
from typing import Dict, List, Optional

import torch
from mmengine.dist import all_reduce, get_world_size
from mmengine.hooks import Hook
from mmengine.logging import print_log

from .compat import unwrap_model
from .log import refuse
from .lr_scaling import optim_wrappers
from .registry import HOOKS

__all__ = ['NaNGuardHook', 'degenerate_boxes']

ACTIONS = ('stop', 'skip')


def _boxes(sample):
    """The ground-truth boxes (N, 4) of an mmdet data sample, or None."""
    boxes = getattr(getattr(sample, 'gt_instances', None), 'bboxes', None)
    boxes = getattr(boxes, 'tensor', boxes)  # mmdet's HorizontalBoxes
    if isinstance(boxes, torch.Tensor) and boxes.ndim == 2:
        return boxes
    return None


def degenerate_boxes(data_batch) -> List[str]:
    """Ground-truth boxes of zero (or negative) width or height of a batch.

    Args:
        data_batch (dict): A train batch with mmdet's ``data_samples``.

    Returns:
        list[str]: One entry per box, e.g. ``'BloodImage_00343.jpg: box [181,
        329, 181, 329] (label 0)'``, in the image's original pixels where the
        sample's ``scale_factor`` tells them; empty for other batches.
    """
    samples = data_batch.get('data_samples') if isinstance(
        data_batch, dict) else None
    found = []
    for sample in samples or []:
        boxes = _boxes(sample)
        if boxes is None or not len(boxes):
            continue
        bad = ((boxes[:, 2] <= boxes[:, 0]) |
               (boxes[:, 3] <= boxes[:, 1])).nonzero().flatten().tolist()
        meta = getattr(sample, 'metainfo', {})
        name = str(meta.get('img_path', meta.get('img_id', '?')))
        scale = meta.get('scale_factor', (1.0, 1.0))
        labels = getattr(sample.gt_instances, 'labels', None)
        for i in bad:
            x1, y1, x2, y2 = boxes[i].tolist()
            box = [round(x1 / scale[0], 1), round(y1 / scale[1], 1),
                   round(x2 / scale[0], 1), round(y2 / scale[1], 1)]
            label = '' if labels is None else f' (label {int(labels[i])})'
            found.append(f'{name}: box {box}{label}')
    return found


def _hint(data_batch) -> str:
    boxes = degenerate_boxes(data_batch)
    if boxes:
        return (f"Boxes of zero size: {'; '.join(boxes)}. Filter them: "
                f"dict(type='FilterAnnotations', min_gt_bbox_wh=(1, 1)).")
    return 'Lower the LR or clip gradients (optim_wrapper.clip_grad).'


@HOOKS.register_module()
class NaNGuardHook(Hook):
    """Stop (or skip the step) at a non-finite loss or gradient, checked
    before the optimizer step.

    Config: ``custom_hooks = [dict(type='mmext.NaNGuardHook')]``.

    Args:
        action (str): ``'stop'`` (raise ``FloatingPointError`` at the
            iteration) or ``'skip'`` (drop that optimizer step, warn, go on).
            Defaults to ``'stop'``.
        check_grads (bool): Also check the gradients before each optimizer
            step. Defaults to True.

    Raises:
        ValueError: For an unknown ``action``.
    """

    priority = 'VERY_HIGH'

    def __init__(self, action: str = 'stop', check_grads: bool = True):
        if action not in ACTIONS:
            raise refuse(ValueError(f'NaNGuardHook action={action!r}: '
                                    f'expected one of {list(ACTIONS)}'))
        self.action = action
        self.check_grads = check_grads
        self.skipped = 0
        self._handles = []
        self._param_names: Dict[int, str] = {}
        self._wrappers = []
        self._bad_grads: Optional[List[str]] = None
        # Why the last step was dropped: a local loss, an overflowed norm.
        self._local_loss = self._norm_overflow = False
        self._bad_loss = False  # a non-finite loss in the current window

    def before_train(self, runner) -> None:
        """Watch every optimizer wrapper's losses and optimizer's steps.

        Args:
            runner (Runner): The runner.
        """
        model = unwrap_model(runner.model)
        self._param_names = {id(p): n for n, p in model.named_parameters()}
        self._wrappers = list(optim_wrappers(runner.optim_wrapper).values())
        for wrapper in self._wrappers:
            wrapper.update_params = self._watch_loss(wrapper.update_params)
            self._handles.append(
                wrapper.optimizer.register_step_pre_hook(self._pre_step))

    def after_train(self, runner) -> None:
        """Remove the watches of :meth:`before_train`.

        Args:
            runner (Runner): The runner.
        """
        for handle in self._handles:
            handle.remove()
        for wrapper in self._wrappers:
            del wrapper.update_params  # the class's method again
        self._handles, self._wrappers = [], []

    def _watch_loss(self, update_params):
        """``update_params`` that first notes a non-finite loss."""

        def watched(loss, *args, **kwargs):
            if not bool(torch.isfinite(loss.detach()).all()):
                self._bad_loss = True
            return update_params(loss, *args, **kwargs)

        return watched

    def _pre_step(self, optimizer, args, kwargs) -> None:
        """Drop every gradient of a step with a non-finite loss in its
        window or a non-finite gradient; the same verdict on every rank."""
        params = [p for group in optimizer.param_groups
                  for p in group['params'] if p.grad is not None]
        bad_loss, self._bad_loss = self._bad_loss, False
        bad_grads = False
        if params and self.check_grads:
            total = torch.nn.utils.get_total_norm([p.grad for p in params])
            bad_grads = not bool(torch.isfinite(total))
        self._local_loss, self._norm_overflow = bad_loss, bad_grads
        if get_world_size() > 1:
            # Every rank's optimizer holds parameters, with or without
            # gradients: NCCL needs the same (CUDA) device on all ranks.
            device = optimizer.param_groups[0]['params'][0].device
            shared = torch.tensor([bad_loss], dtype=torch.float32,
                                  device=device)
            all_reduce(shared, op='sum')
            bad_loss = bool(shared.item() > 0)
        if not (bad_loss or bad_grads):
            return
        self._bad_grads = [
            self._param_names.get(id(p), f'<{tuple(p.shape)} tensor>')
            for p in params if not bool(torch.isfinite(p.grad).all())
        ]
        for param in params:
            param.grad = None

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        """Check the loss terms and the step's gradients of the iteration.

        The verdict is the same on every rank.

        Args:
            runner (Runner): The runner.
            batch_idx (int): Index of the iteration in the epoch.
            data_batch (dict, optional): The batch, for the degenerate boxes
                the message names. Defaults to None.
            outputs (dict, optional): The loss terms of ``train_step``.
                Defaults to None.

        Raises:
            FloatingPointError: With ``action='stop'``, at a non-finite one.
        """
        terms = {k: float(v) if not isinstance(v, torch.Tensor) else
                 float(v.detach().float().mean())
                 for k, v in (outputs or {}).items()
                 if isinstance(v, (torch.Tensor, float, int))}
        bad_terms = [k for k, v in terms.items() if not math.isfinite(v)]
        bad_grads, self._bad_grads = self._bad_grads, None
        flags = [bool(bad_terms), bad_grads is not None]
        if get_world_size() > 1:
            device = next(runner.model.parameters()).device
            shared = torch.tensor(flags, dtype=torch.float32, device=device)
            all_reduce(shared, op='sum')
            flags = [bool(v > 0) for v in shared.tolist()]
        if not any(flags):
            return
        message = self._message(runner.iter + 1, terms, bad_terms, bad_grads,
                                flags[1], data_batch)
        if self.action == 'stop':
            raise refuse(FloatingPointError(message))
        self.skipped += 1
        print_log(message, logger='current', level=logging.WARNING)

    def _message(self, iteration: int, terms: Dict[str, float],
                 bad_terms: List[str], bad_grads: Optional[List[str]],
                 step_dropped: bool, data_batch) -> str:
        what = []
        if bad_terms:
            what.append(f'loss terms {bad_terms}')
        if bad_grads:
            names = bad_grads[:5] + (['...'] if len(bad_grads) > 5 else [])
            what.append(f'gradients of {len(bad_grads)} parameters '
                        f'({", ".join(names)})')
        elif bad_grads is not None and self._norm_overflow:
            what.append('gradient norm (each gradient finite)')
        elif step_dropped and not bad_terms:
            what.append('loss of an earlier micro-batch of the window'
                        if self._local_loss else 'loss (on another rank)')
        values = ', '.join(f'{k}={v:.4g}' for k, v in terms.items())
        done = ('its step was not taken' if step_dropped else
                "its window's step will not be taken")
        skipped = (f' Skipped ({self.skipped} so far).'
                   if self.action == 'skip' else '')
        return (f"Non-finite {' and '.join(what)} at iteration {iteration} "
                f'({done}). Loss terms: {values or "none logged"}. '
                f'{_hint(data_batch)}{skipped}')
