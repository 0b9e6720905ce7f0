"""Checks of a recognizer against a multigrid plan, before training.

The plan (:class:`~mmext.multigrid.MultigridPlan`) is arithmetic on configs;
whether the model can train it is checked here, by the hook and by
``tools/analysis/multigrid_schedule.py`` alike: every planned grid shape
forwarded through the model (:mod:`.shape_probe`, after the video
transformers got their shape adapters, :mod:`.transformers`), clip lengths
of SlowFast/ResNet3d (a fast path with the fix in the message), BN layers
sub-batch BN can split, BN layers for precise BN to update, and the size of
the backbone's final feature map at each shape.
"""
import warnings
from typing import List, Optional, Sequence

from .bn import (SPLITTABLE_BN_TYPES, bn_layers_in_training,
                 unsplittable_bn_layers)
from .shape_probe import ShapeResult, probe_plan
from .transformers import install_shape_adapters

__all__ = [
    'MIN_FEATURE_MAP_SIDE', 'check_clip_lengths', 'check_model',
    'check_run', 'refused_shapes_message', 'small_feature_map_message',
    'warn_dropped_recipe_values'
]

# Below this side (pixels of the backbone's final feature map) a planned
# shape warns. Measured on the shipped demo (issue 20, 3 seeds): its
# short-cycle S=28 shapes give ResNet3d-18 a 1x1 map and multigrid lost
# ~30 points of top-1; short-cycle factors 0.75/0.875, whose smallest map is
# 2x2, kept 0.96 of the recipe's 1.00.
MIN_FEATURE_MAP_SIDE = 2


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


def check_run(plan, model=None, pipeline: Optional[Sequence[dict]] = None
              ) -> List[str]:
    """Every check of a run before training, as the hook runs them.

    Warns about recipe values the plan cannot honour
    (:func:`warn_dropped_recipe_values`), installs the video transformers'
    shape adapters (:func:`~mmext.multigrid.transformers.
    install_shape_adapters`, idempotent: the hook trains with them),
    checks the model (:func:`check_model`), and warns about final feature
    maps below :data:`MIN_FEATURE_MAP_SIDE` (:func:`small_feature_map_message`)
    and if precise BN would have no BN layer to update. ``MultigridHook``
    and ``tools/analysis/multigrid_schedule.py`` both call this.

    Args:
        plan (MultigridPlan): The run's plan.
        model (nn.Module, optional): The unwrapped recognizer; None skips
            the model checks.
        pipeline (Sequence[dict], optional): The train pipeline (clips per
            sample for the probe's input, see
            :func:`~mmext.multigrid.shape_probe.probe_input_size`).

    Returns:
        list[str]: The warnings given.

    Raises:
        ValueError: See :func:`check_model`.
    """
    messages = warn_dropped_recipe_values(plan)
    if model is None:
        return messages
    install_shape_adapters(model)
    results = check_model(plan, model, pipeline)
    small = small_feature_map_message(plan, results)
    if small:
        messages.append(small)
        warnings.warn(small)
    iters = plan.options.precise_bn_iters
    if iters and not bn_layers_in_training(model):
        messages.append(
            f'precise_bn_iters={iters}, but no BN layer of the model '
            f'trains (all are in eval mode after model.train(), e.g. '
            f'norm_eval=True): precise BN has nothing to update and is '
            f'skipped.')
        warnings.warn(messages[-1])
    return messages


def check_model(plan, model, pipeline: Optional[Sequence[dict]] = None
                ) -> List[ShapeResult]:
    """Raise if the recognizer cannot train the plan.

    Args:
        plan (MultigridPlan): The run's plan.
        model (nn.Module): The (unwrapped) recognizer, with the shape
            adapters it trains with.
        pipeline (Sequence[dict], optional): As in :func:`check_run`.

    Returns:
        list[ShapeResult]: The probe of every planned shape.

    Raises:
        ValueError: For a clip length the backbone cannot take (see
            :func:`check_clip_lengths`), a planned shape the model's
            forward pass refuses (see :func:`refused_shapes_message`), or,
            when some stage splits its batch for sub-batch BN, a BN layer
            that trains and cannot be split (see
            :func:`mmext.multigrid.bn.unsplittable_bn_layers`).
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
    results = probe_plan(plan, model, pipeline)
    refused = refused_shapes_message(plan, results)
    if refused:
        raise ValueError(refused)
    return results


def _long_cycle_factors_of(plan, shapes) -> List[tuple]:
    """The ``long_cycle_factors`` entries whose cycles contain ``shapes``."""
    options, found = plan.options, []
    if not options.long_cycle:
        return found
    keys = {(s.clip_len, s.crop_size) for s in shapes}
    for stage in plan.stages:
        cycle = {(g.clip_len, g.crop_size) for g in stage.short_cycle}
        if not keys & cycle:
            continue
        for t, s in options.long_cycle_factors:
            if (int(round(plan.base_clip_len * t)),
                    int(round(plan.base_crop_size * s))) == (
                        stage.shape.clip_len, stage.shape.crop_size) and (
                            (t, s) not in found):
                found.append((t, s))
    return found


def _factors_text(factors) -> str:
    return '[' + ', '.join(f'({t:g}, {s:g})' for t, s in factors) + ']'


def refused_shapes_message(plan, results: Sequence[ShapeResult]
                           ) -> Optional[str]:
    """The error for planned shapes the model's forward pass refused.

    Names the first refused shape, the module whose forward raised and its
    error, every refused and every accepted shape, and the fix: the
    ``long_cycle_factors`` entries whose cycles hold refused long-cycle
    shapes (or ``long_cycle=False``), ``short_cycle=False`` where
    short-cycle shapes are refused, which of ``T``/``S`` all refused shapes
    change, or that multigrid cannot train a model that takes only the
    recipe's shape.

    Args:
        plan (MultigridPlan): The run's plan.
        results (Sequence[ShapeResult]): Its probe.

    Returns:
        str, optional: The message; None if every shape passed.
    """
    bad = [r for r in results if r.error]
    if not bad:
        return None
    first = bad[0]
    base_t, base_s = plan.base_clip_len, plan.base_crop_size
    shapes = [r.shape for r in bad]
    accepted = [r.shape for r in results if not r.error]
    fixes = []
    if {(s.clip_len, s.crop_size) for s in accepted} <= {
            (base_t, base_s)} and any(s.clip_len != base_t for s in shapes) \
            and any(s.crop_size != base_s for s in shapes):
        fixes.append(f'the model takes neither another T nor another S '
                     f'than the recipe\'s (T, S) = ({base_t}, {base_s}), so '
                     f'multigrid cannot train it (train the recipe without '
                     f'mmext.MultigridHook)')
    else:
        factors = _long_cycle_factors_of(
            plan, [s for s in shapes if s.long_cycle])
        if factors:
            fixes.append(f'long_cycle_factors without '
                         f'{_factors_text(factors)} (or long_cycle=False)')
        if any(not s.long_cycle for s in shapes):
            fixes.append('short_cycle=False (or short_cycle_factors closer '
                         'to 1)')
        if all(s.clip_len != base_t for s in shapes):
            fixes.append(f'(every refused shape has T != {base_t})')
        elif all(s.crop_size != base_s for s in shapes):
            fixes.append(f'(every refused shape has S != {base_s})')
    return (
        f'The model cannot take {len(bad)} of the {len(results)} grid '
        f'shapes the multigrid plan trains (base T={base_t}, S={base_s}): '
        f'at {first.shape} (from epoch {first.shape.epochs[0]}) the forward '
        f'pass fails in {first.module}: {first.error.rstrip(".")}. Refused: '
        f'{", ".join(str(s) for s in shapes)}. Accepted: '
        f'{", ".join(str(s) for s in accepted)}. Fix: '
        f'{" and ".join(fixes)}. See the model-family table of '
        f'docs/en/multigrid.md.')


def small_feature_map_message(plan, results: Sequence[ShapeResult]
                              ) -> Optional[str]:
    """The warning for shapes whose final feature map is below
    :data:`MIN_FEATURE_MAP_SIDE` (see there for the measured cost).

    Args:
        plan (MultigridPlan): The run's plan.
        results (Sequence[ShapeResult]): Its probe (backbones that return
            tokens have no feature map and never warn).

    Returns:
        str, optional: The message; None if no shape is that small.
    """
    small = [r for r in results if r.feature_map is not None
             and min(r.feature_map) < MIN_FEATURE_MAP_SIDE]
    if not small:
        return None
    base = [r for r in results if r.feature_map is not None and (
        r.shape.clip_len, r.shape.crop_size) == (plan.base_clip_len,
                                                 plan.base_crop_size)]
    at_base = (f'; {base[0].feature_map[0]}x{base[0].feature_map[1]} at the '
               f'base S={plan.base_crop_size}') if base else ''
    shapes = ', '.join(f'{r.shape}: {r.feature_map[0]}x{r.feature_map[1]}'
                       for r in small)
    fixes = []
    if any(not r.shape.long_cycle for r in small):
        fixes.append('milder short_cycle_factors (e.g. [0.75, 0.875]) or '
                     'short_cycle=False')
    factors = _long_cycle_factors_of(
        plan, [r.shape for r in small if r.shape.long_cycle])
    if factors:
        fixes.append(f'long_cycle_factors with larger s than '
                     f'{_factors_text(factors)}')
    fixes.append(f'a larger base crop (the paper trains S=224; smallest '
                 f'short-cycle crop 112)')
    return (
        f'Multigrid shapes with a final feature map below '
        f'{MIN_FEATURE_MAP_SIDE}x{MIN_FEATURE_MAP_SIDE} (backbone output, '
        f'H x W{at_base}): {shapes}. Measured cost on the demo '
        f'(ResNet3d-18, base S=56, short_cycle_factors 0.5/0.707: S=28 '
        f'gives a 1x1 map): top-1 0.88 +- 0.12 against 1.00 without '
        f'multigrid (10 seeds, 24 val clips); the same run at S=33 (2x2) '
        f'0.96, long cycle only 0.98 (docs/en/multigrid_accuracy_study.md). '
        f'Fix: {"; or ".join(fixes)}.')
