"""Checks of a recognizer against a multigrid plan, before training.

The plan (:class:`~mmext.multigrid.MultigridPlan`) is arithmetic on configs;
whether the model can train it (clip lengths its backbone takes, BN layers
sub-batch BN can split, BN layers for precise BN to update) is checked
here, by the hook and by ``tools/analysis/multigrid_schedule.py`` alike.
"""
import warnings
from typing import List, Sequence

from .bn import (SPLITTABLE_BN_TYPES, bn_layers_in_training,
                 unsplittable_bn_layers)

__all__ = [
    'check_clip_lengths', 'check_model', 'check_run',
    'warn_dropped_recipe_values'
]


def check_clip_lengths(backbone, clip_lens: Sequence[int]) -> None:
    """Raise if the backbone cannot take one of the clip lengths.

    SlowFast (``resample_rate`` = tau): ``T`` must be a multiple of tau.
    ResNet3d-family (I3D ...): the temporal strides of ``conv1``, ``pool1``
    and ``pool2`` (kernel 2) need ``T >= conv1_stride_t * pool1_stride_t *
    2`` (8 for mmaction2's I3D R50).

    Args:
        backbone (nn.Module): The recognizer's backbone.
        clip_lens (Sequence[int]): Clip lengths ``T`` in frames.

    Raises:
        ValueError: Naming the clip length and what to change.
    """
    tau = getattr(backbone, 'resample_rate', None)
    if tau:
        bad = [t for t in clip_lens if t % tau]
        if bad:
            raise ValueError(
                f'SlowFast needs clip lengths that are multiples of its '
                f'resample_rate (tau={tau}); the multigrid schedule uses '
                f'T={bad}. Change long_cycle_factors or the recipe\'s '
                f'SampleFrames.clip_len.')
        return
    if hasattr(backbone, 'conv1_stride_t') and hasattr(
            backbone, 'pool1_stride_t'):
        min_t = backbone.conv1_stride_t * backbone.pool1_stride_t * (
            2 if getattr(backbone, 'with_pool2', False) else 1)
        bad = [t for t in clip_lens if t < min_t]
        if bad:
            raise ValueError(
                f'{type(backbone).__name__} needs clip lengths T >= {min_t} '
                f'(temporal strides of conv1, pool1 and pool2); the '
                f'multigrid schedule uses T={bad}. Use larger t factors in '
                f'long_cycle_factors or a longer SampleFrames.clip_len.')


def warn_dropped_recipe_values(plan) -> List[str]:
    """Warn about what of the recipe the plan drops (its scheduler values
    and long-cycle shapes rounded to 0 epochs); return the messages."""
    messages = plan.dropped_recipe_values() + plan.dropped_shapes()
    for message in messages:
        warnings.warn(message)
    return messages


def check_run(plan, model=None) -> List[str]:
    """Every check of a run before training, as the hook runs them.

    Warns about recipe values the plan cannot honour
    (:func:`warn_dropped_recipe_values`), then checks the model
    (:func:`check_model`) and warns if precise BN would have no BN layer
    to update. ``MultigridHook`` and
    ``tools/analysis/multigrid_schedule.py`` both call this.

    Args:
        plan (MultigridPlan): The run's plan.
        model (nn.Module, optional): The unwrapped recognizer; None skips
            the model checks.

    Returns:
        list[str]: The warnings given.

    Raises:
        ValueError: See :func:`check_model`.
    """
    messages = warn_dropped_recipe_values(plan)
    if model is None:
        return messages
    check_model(plan, model)
    iters = plan.options.precise_bn_iters
    if iters and not bn_layers_in_training(model):
        messages.append(
            f'precise_bn_iters={iters}, but no BN layer of the model '
            f'trains (all are in eval mode after model.train(), e.g. '
            f'norm_eval=True): precise BN has nothing to update and is '
            f'skipped.')
        warnings.warn(messages[-1])
    return messages


def check_model(plan, model) -> None:
    """Raise if the recognizer cannot train the plan.

    Args:
        plan (MultigridPlan): The run's plan.
        model (nn.Module): The (unwrapped) recognizer.

    Raises:
        ValueError: For a clip length the backbone cannot take (see
            :func:`check_clip_lengths`), or, when some stage splits its
            batch for sub-batch BN, a BN layer that trains and cannot be
            split (see :func:`mmext.multigrid.bn.unsplittable_bn_layers`).
    """
    if hasattr(model, 'backbone'):
        check_clip_lengths(
            model.backbone,
            sorted({s.shape.clip_len for s in plan.stages}))
    splits = max(plan.sub_bn_splits(s) for s in plan.stages)
    bad = unsplittable_bn_layers(model) if splits > 1 else []
    if bad:
        base = plan.options.bn_base_size
        raise ValueError(
            f'Sub-batch BN (bn_base_size={base}) splits per-device '
            f'batches of up to {base * splits} clips into groups of '
            f'{base}, but cannot split these BN layers, which would '
            f'normalise over the whole per-device batch: '
            f'{", ".join(bad)}. Only layers of the kinds '
            f'{[t.__name__ for t in SPLITTABLE_BN_TYPES]} (BN3d, SyncBN '
            f'and SyncBN reverted without DDP) are split. Use one of those '
            f'kinds for them, keep them in eval mode (norm_eval), or set '
            f'bn_base_size=None to train every BN layer on the whole '
            f'per-device batch.')
