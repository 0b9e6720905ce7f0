"""A multigrid run checked before training: what the plan cannot honour,
and the recognizer against the plan.

The shape probe forwards every distinct per-process ``(B, T, S)`` through a
copy of the model on PyTorch's ``meta`` device; a forward that needs data is
tried again on the model itself with :data:`FALLBACK_BATCH` clips, in eval
mode without gradients. Nothing of the model changes."""
import copy
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from mmext.log import warn
from mmext.options import type_name
from .bn import unsplittable_bn_layers
from .plan import recipe_scheduler_warnings
from .schedule import long_cycle_shapes, long_cycle_sizes

__all__ = [
    'PlannedShape', 'RunChecks', 'check_clip_lengths', 'check_model',
    'check_run',
    'planned_shapes', 'probe_input_size', 'meta_copy', 'probe_shapes'
]

# Smallest side of a backbone output that does not warn (measured: a 1x1
# map cost the demo 0.12 top-1, see the multigrid docs).
MIN_FEATURE_MAP_SIDE = 2
# Clips of the fallback forward on the model's own device.
FALLBACK_BATCH = 2
# Share of the clips per process that incomplete batches may leave unused
# in an epoch before a warning (the short cycle's 3 batches can drop most
# of a cycle).
UNUSED_CLIPS_SHARE = 0.2
# Largest batch of a run (short cycle included), as a share of the clips
# per process, that does not warn. MSR Action3D, 5 seeds: the paper's
# batches with both cycles (88 of 283 clips, 31 %) lost 0.26 top-1, the long
# cycle alone (64, 23 %) 0.02; published runs stayed below 1 %
# (docs/en/multigrid.md, Batch policy).
MAX_BATCH_SHARE = 0.25


class PlannedShape(NamedTuple):
    """One distinct per-process mini-batch shape of a plan.

    Attributes:
        batch (int): ``B``, the per-process batch size.
        clip_len (int): ``T``, frames.
        crop_size (int): ``S``, pixels (square crops).
        long_cycle (bool): Whether some stage trains it as its long-cycle
            shape.
    """
    batch: int
    clip_len: int
    crop_size: int
    long_cycle: bool

    def __str__(self) -> str:
        return f'(B, T, S) = ({self.batch}, {self.clip_len}, {self.crop_size})'


class ShapeResult(NamedTuple):
    """What one planned shape did on the model.

    Attributes:
        shape (PlannedShape): The shape probed.
        error (str, optional): ``'<ExceptionType>: <message>'`` of a failed
            forward; None if it passed.
        module (str, optional): The innermost module whose forward raised
            (``'backbone.pool5 (MaxPool3d)'``); None if it passed.
        feature_map (tuple[int, int], optional): ``(H, W)`` of the
            backbone's output (smallest over pathways); None for tokens.
        device (str): ``'meta'``, or the model's device after a fallback.
        flops (float, optional): FLOPs of one clip's forward (PyTorch's
            ``FlopCounterMode``); None if it failed.
    """
    shape: PlannedShape
    error: Optional[str]
    module: Optional[str]
    feature_map: Optional[Tuple[int, int]]
    device: str
    flops: Optional[float] = None


def planned_shapes(plan) -> List[PlannedShape]:
    """The distinct per-process shapes of a plan's short cycles.

    Args:
        plan (MultigridPlan): The plan.

    Returns:
        list[PlannedShape]: Distinct ``(B, T, S)`` in training order, ``B``
        the per-process batch size.
    """
    found = {}
    for stage in plan.stages:
        for grid in stage.short_cycle:
            key = (plan.base_batch * grid.batch_factor, grid.clip_len,
                   grid.crop_size)
            first = found.get(key)
            found[key] = PlannedShape(*key, grid == stage.shape or bool(
                first and first.long_cycle))
    return list(found.values())


def _num_clips(pipeline: Optional[Sequence[dict]]) -> int:
    for transform in pipeline or []:
        if type_name(transform['type']) in ('SampleFrames', 'UniformSample'):
            return int(transform.get('num_clips', 1))
    return 1


def _in_channels(model: nn.Module) -> int:
    for module in getattr(model, 'backbone', model).modules():
        if isinstance(module, (nn.Conv2d, nn.Conv3d)):
            return module.in_channels
    return 3


def probe_input_size(model: nn.Module, batch: int, clip_len: int,
                     crop_size: int,
                     pipeline: Optional[Sequence[dict]] = None
                     ) -> Tuple[int, ...]:
    """Size of the recognizer's ``inputs`` for a batch of one shape.

    As mmaction2's ``FormatShape`` gives it: ``(B, num_clips, C, T, S, S)``
    for ``'NCTHW'``, ``(B, num_clips * T, C, S, S)`` for ``'NCHW'`` (2D).

    Args:
        model (nn.Module): The unwrapped recognizer.
        batch (int): ``B``, clips.
        clip_len (int): ``T``, frames.
        crop_size (int): ``S``, pixels.
        pipeline (Sequence[dict], optional): The train pipeline, for
            ``num_clips`` (default 1) and the input format. Defaults to None.

    Returns:
        tuple[int, ...]: The input size; ``C`` from the first convolution
        (default 3).
    """
    fmt = getattr(getattr(model, 'data_preprocessor', None), 'format_shape',
                  'NCTHW')
    clips, channels = _num_clips(pipeline), _in_channels(model)
    if fmt == 'NCHW':
        return (batch, clips * clip_len, channels, crop_size, crop_size)
    return (batch, clips, channels, clip_len, crop_size, crop_size)


def meta_copy(model: nn.Module) -> nn.Module:
    """A copy of a model on the ``meta`` device.

    Args:
        model (nn.Module): The model.

    Returns:
        nn.Module: A deep copy (hooks included) with its parameters and
        buffers on ``meta``, copying no tensor data.
    """
    memo = {}
    for param in model.parameters():
        memo[id(param)] = nn.Parameter(
            torch.empty_like(param, device='meta'),
            requires_grad=param.requires_grad)
    for buf in model.buffers():
        memo[id(buf)] = torch.empty_like(buf, device='meta')
    return copy.deepcopy(model, memo)


def _spatial_size(output) -> Optional[Tuple[int, int]]:
    """Smallest ``(H, W)`` over the ``>= 4``-d tensors in ``output``."""
    if isinstance(output, torch.Tensor):
        return tuple(output.shape[-2:]) if output.dim() >= 4 else None
    if isinstance(output, (list, tuple)):
        sizes = [s for s in map(_spatial_size, output) if s is not None]
        return min(sizes, key=lambda s: s[0] * s[1]) if sizes else None
    return None


class _Tracer:
    """Which module's forward raised; what the backbone returned."""

    def __init__(self, model: nn.Module):
        self.names = {m: n or 'model' for n, m in model.named_modules()}
        self.stack: List[nn.Module] = []
        self.feature_map = self.error = None
        self.handles = [h for module in self.names for h in (
            module.register_forward_pre_hook(self._enter),
            module.register_forward_hook(self._leave))]
        backbone = getattr(model, 'backbone', None)
        if isinstance(backbone, nn.Module):
            self.handles.append(
                backbone.register_forward_hook(self._backbone_output))

    def _enter(self, module, args):
        self.stack.append(module)

    def _leave(self, module, args, output):
        self.stack.pop()

    def _backbone_output(self, module, args, output):
        self.feature_map = _spatial_size(output)

    def run(self, model, inputs: torch.Tensor,
            shape: PlannedShape) -> ShapeResult:
        """The forward of ``inputs`` of ``shape`` (its exception in
        :attr:`error`)."""
        self.stack, self.feature_map = [], None
        counter = FlopCounterMode(display=False)
        device = str(inputs.device)
        try:
            with counter:
                model(inputs, mode='tensor', stage='head')
        except Exception as error:  # noqa: B902 any failure is the finding
            self.error, module = error, self.stack[-1] if self.stack else None
            first = (str(error).strip().splitlines() or [''])[0]
            return ShapeResult(
                shape, f'{type(error).__name__}: {first}',
                f'{self.names[module]} ({type(module).__name__})'
                if module is not None else 'model', self.feature_map, device)
        self.error = None
        return ShapeResult(shape, None, None, self.feature_map, device,
                           counter.get_total_flops() / len(inputs))

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _fallback(model: nn.Module, shape: PlannedShape, pipeline
              ) -> ShapeResult:
    """The shape on the model itself: a tiny batch, eval mode, no grad."""
    param = next(iter(model.parameters()), None)
    device = param.device if param is not None else torch.device('cpu')
    dtype = param.dtype if param is not None else torch.float32
    size = probe_input_size(model, min(shape.batch, FALLBACK_BATCH),
                            shape.clip_len, shape.crop_size, pipeline)
    modes = [(m, m.training) for m in model.modules()]
    tracer = _Tracer(model)
    try:
        model.eval()
        with torch.no_grad():
            return tracer.run(
                model, torch.zeros(size, device=device, dtype=dtype), shape)
    finally:
        tracer.remove()
        for m, mode in modes:
            m.training = mode


def probe_shapes(model: nn.Module, shapes: Sequence[PlannedShape],
                 pipeline: Optional[Sequence[dict]] = None
                 ) -> List[ShapeResult]:
    """Probe each shape with a forward through a meta copy of the model.

    The unwrapped recognizer runs in training mode on ``meta`` tensors (no
    memory, no compute); a shape the meta device cannot run falls back to the
    model's device.

    Args:
        model (nn.Module): The unwrapped recognizer.
        shapes (Sequence[PlannedShape]): The shapes to probe.
        pipeline (Sequence[dict], optional): The train pipeline, for
            ``num_clips``. Defaults to None.

    Returns:
        list[ShapeResult]: One per shape, in order.
    """
    try:
        ghost = meta_copy(model).train()
    except Exception:  # noqa: B902 an uncopyable model: use the fallback
        return [_fallback(model, s, pipeline) for s in shapes]
    tracer = _Tracer(ghost)
    results = []
    try:
        for shape in shapes:
            size = probe_input_size(ghost, shape.batch, shape.clip_len,
                                    shape.crop_size, pipeline)
            dtype = next(iter(ghost.parameters()), torch.empty(0)).dtype
            result = tracer.run(
                ghost, torch.empty(size, device='meta', dtype=dtype), shape)
            # A meta forward that failed for want of data, not of a shape.
            if tracer.error is not None and 'meta' in str(
                    tracer.error).lower():
                result = _fallback(model, shape, pipeline)
            results.append(result)
    finally:
        tracer.remove()
    return results


def check_clip_lengths(backbone, clip_lens: Sequence[int]) -> None:
    """Refuse the clip lengths a backbone cannot take.

    SlowFast: ``T`` a multiple of ``resample_rate``. ResNet3d family:
    ``T >= conv1_stride_t * pool1_stride_t * 2`` (with ``pool2``).

    Args:
        backbone (nn.Module): The recognizer's backbone.
        clip_lens (Sequence[int]): The planned clip lengths ``T`` (frames).

    Raises:
        ValueError: Naming the clip lengths refused and the fix.
    """
    tau = getattr(backbone, 'resample_rate', None)
    if tau:
        bad = [t for t in clip_lens if t % tau]
        if bad:
            raise ValueError(f'SlowFast needs T divisible by resample_rate='
                             f'{tau}, got T={bad}; change long_cycle_factors.')
        return
    if hasattr(backbone, 'conv1_stride_t') and hasattr(
            backbone, 'pool1_stride_t'):
        min_t = backbone.conv1_stride_t * backbone.pool1_stride_t * (
            2 if getattr(backbone, 'with_pool2', False) else 1)
        bad = [t for t in clip_lens if t < min_t]
        if bad:
            raise ValueError(f'{type(backbone).__name__} needs T >= {min_t}, '
                             f'got T={bad}; change long_cycle_factors.')


class RunChecks(NamedTuple):
    """What :func:`check_run` found.

    Attributes:
        warnings (list[str]): The warnings given.
        clip_flops (dict[tuple[int, int], float], optional): ``(T, S)`` ->
            FLOPs of one clip's forward at every planned shape (for
            ``MultigridPlan.clip_flops``); None without a model.
    """
    warnings: List[str]
    clip_flops: Optional[Dict[Tuple[int, int], float]]


def check_run(plan, model=None, pipeline: Optional[Sequence[dict]] = None
              ) -> RunChecks:
    """Every check of a run before training, as the hook runs them.

    Nothing of the model or the plan changes. Warns about what the plan
    cannot honour; with a model runs :func:`check_model`, counts its FLOPs
    and warns about small feature maps.

    Args:
        plan (MultigridPlan): The plan.
        model (nn.Module, optional): The unwrapped model as it trains, with
            its shape adapters; None skips the model checks. Defaults to None.
        pipeline (Sequence[dict], optional): The train pipeline. Defaults to
            None.

    Returns:
        RunChecks: The warnings given and the FLOPs per clip of each shape.

    Raises:
        ValueError: As :func:`check_model`.
    """
    messages = recipe_scheduler_warnings(plan) + _dropped_shapes(plan) + [
        m for m in [_short_cycle_warning(plan), _few_steps(plan),
                    _unused_clips(plan)] if m]
    flops = None
    if model is not None:
        results = check_model(plan, model, pipeline)
        flops = {(r.shape.clip_len, r.shape.crop_size): r.flops
                 for r in results}
        found = _small_feature_maps(plan, results)
        messages += [found] if found else []
    for message in messages:
        warn(message)
    return RunChecks(messages, flops)


def check_model(plan, model, pipeline: Optional[Sequence[dict]] = None
                ) -> List[ShapeResult]:
    """Probe every planned shape on the model (:func:`probe_shapes`).

    Args:
        plan (MultigridPlan): The plan.
        model (nn.Module): The unwrapped model, with its shape adapters.
        pipeline (Sequence[dict], optional): The train pipeline. Defaults to
            None.

    Returns:
        list[ShapeResult]: One per planned shape.

    Raises:
        ValueError: If the model cannot train the plan: a clip length the
            backbone cannot take, a BN layer that sub-batch BN must but cannot
            split, or planned shapes it refuses (naming the first and the fix).
    """
    if hasattr(model, 'backbone'):
        check_clip_lengths(
            model.backbone,
            sorted({s.shape.clip_len for s in plan.stages}))
    base = plan.sub_bn_base_size
    bad = unsplittable_bn_layers(model) if base else []
    if bad:
        raise ValueError(
            f'bn_base_size={base} cannot split {", ".join(bad)} (only '
            f'BatchNorm3d and SyncBN); set bn_base_size=None.')
    results = probe_shapes(model, planned_shapes(plan), pipeline)
    refused = [r for r in results if r.error]
    if refused:
        first = refused[0]
        raise ValueError(
            f'The model refuses {len(refused)} of {len(results)} shapes, '
            f'e.g. {first.shape} in {first.module}: {first.error}. Fix: '
            f'{_refused_shapes_fix(plan, results)}.')
    return results


def _long_cycle_factors_of(plan, shapes) -> str:
    """The ``long_cycle_factors`` entries whose cycles contain ``shapes``,
    as text ('' for none)."""
    factors, found = plan.options.long_cycle_factors, []
    keys = {(s.clip_len, s.crop_size) for s in shapes}
    sizes = long_cycle_sizes(plan.base_clip_len, plan.base_crop_size, factors)
    for stage in plan.stages if plan.options.long_cycle else []:
        if keys & {(g.clip_len, g.crop_size) for g in stage.short_cycle}:
            shape = (stage.shape.clip_len, stage.shape.crop_size)
            found += [f for f, size in zip(factors, sizes)
                      if size == shape and f not in found]
    text = ', '.join(f'({t:g}, {s:g})' for t, s in found)
    return f'[{text}]' if found else ''


def _refused_shapes_fix(plan, results: Sequence[ShapeResult]) -> str:
    """What makes the plan fit a model that refused some of its shapes."""
    base_t, base_s = plan.base_clip_len, plan.base_crop_size
    shapes = [r.shape for r in results if r.error]
    accepted = {(r.shape.clip_len, r.shape.crop_size)
                for r in results if not r.error}
    if accepted <= {(base_t, base_s)} and any(
            s.clip_len != base_t for s in shapes) and any(
                s.crop_size != base_s for s in shapes):
        return 'train without MultigridHook'
    fixes = []
    factors = _long_cycle_factors_of(
        plan, [s for s in shapes if s.long_cycle])
    if factors:
        fixes.append(f'long_cycle_factors without {factors}')
    if any(not s.long_cycle for s in shapes):
        fixes.append('short_cycle=False')
    if all(s.clip_len != base_t for s in shapes):
        fixes.append(f'(all refused have T != {base_t})')
    elif all(s.crop_size != base_s for s in shapes):
        fixes.append(f'(all refused have S != {base_s})')
    return ' and '.join(fixes)


def _small_feature_maps(plan, results: Sequence[ShapeResult]
                        ) -> Optional[str]:
    """The warning for feature maps below :data:`MIN_FEATURE_MAP_SIDE`;
    None if there are none."""
    small = [r for r in results if r.feature_map is not None
             and min(r.feature_map) < MIN_FEATURE_MAP_SIDE]
    if not small:
        return None
    side = MIN_FEATURE_MAP_SIDE
    shapes = ', '.join(f'{r.shape}: {r.feature_map[0]}x{r.feature_map[1]}'
                       for r in small)
    fixes = []
    if any(not r.shape.long_cycle for r in small):
        fixes.append('short_cycle_factors closer to 1')
    factors = _long_cycle_factors_of(
        plan, [r.shape for r in small if r.shape.long_cycle])
    if factors:
        fixes.append(f'larger s than {factors} in long_cycle_factors')
    return (f'Final feature maps below {side}x{side} lose accuracy: '
            f'{shapes}. Use {" and ".join(fixes)}, or a larger crop.')


def _dropped_shapes(plan) -> List[str]:
    """The warning naming every LR stage that trains one of its long-cycle
    shapes (the base shape in the fine-tune or without the long cycle) for
    0 epochs; [] if none does."""
    options, steps = plan.options, plan.lr_steps
    base = plan.stages[-1].shape
    # The fine-tune's first half shares the last long cycle's LR stage
    # and base shape: it must not hide that stage's own base shape.
    present = {(s.lr_stage, s.shape) for s in plan.stages if not s.fine_tune}
    planned = long_cycle_shapes(plan.base_clip_len, plan.base_crop_size,
                                options.long_cycle_factors,
                                options.batch_policy)
    cycles = len(steps) - 1 if options.long_cycle else 0
    lost = []
    for lr_stage in range(len(steps) - (steps[-1] == plan.recipe_epochs)):
        if lr_stage < cycles:
            shapes = [x for x in planned if (lr_stage, x) not in present]
        else:
            shapes = [base] * all(s.lr_stage != lr_stage for s in plan.stages)
        if shapes:
            lost.append(f'LR stage {lr_stage} ' + str([
                (plan.base_batch * x.batch_factor, x.clip_len, x.crop_size)
                for x in shapes]))
    if not lost:
        return []
    return [f'Shapes (B, T, S) trained for 0 epochs: {", ".join(lost)}; '
            f'raise max_epochs or epoch_factor.']


def _unused_clips(plan) -> Optional[str]:
    """The warning for stages whose incomplete batches leave
    :data:`UNUSED_CLIPS_SHARE` or more of the clips per process unused in
    each epoch; None for none or without exact counts."""
    if not plan.exact:
        return None
    samples, found = plan.samples_per_rank, []
    for stage in plan.stages:
        sizes = plan.batch_sizes(stage)
        used = sum(sizes[i % len(sizes)]
                   for i in range(plan.iters_per_epoch(stage)))
        if samples - used >= UNUSED_CLIPS_SHARE * samples:
            found.append((samples - used, stage, sizes))
    if not found:
        return None
    unused, stage, sizes = max(found, key=lambda f: f[0])
    fix = 'fewer processes' if plan.world_size > 1 else 'another batch_size'
    return (f'Batches {sizes} leave {unused} of {samples} clips per process '
            f'unused per epoch in epochs {stage.start_epoch}-'
            f'{stage.end_epoch}; use {_cycle_fix(plan)}more data or {fix}.')


def _cycle_fix(plan) -> str:
    """``'short_cycle=False, '`` where both cycles run (the fix the MSR
    evidence supports), else ''."""
    options = plan.options
    both = options.long_cycle and options.short_cycle
    return 'short_cycle=False, ' if both else ''


def _few_steps(plan) -> Optional[str]:
    """The warning for batches above :data:`MAX_BATCH_SHARE` of the clips
    per process (few optimizer steps per epoch); None for none or without
    exact counts."""
    if not plan.exact:
        return None
    samples = plan.samples_per_rank
    large = [s for s in plan.stages
             if max(plan.batch_sizes(s)) > MAX_BATCH_SHARE * samples]
    if not large:
        return None
    stage = large[0]
    batch, acc = max(plan.batch_sizes(stage)), plan.accumulative_counts
    return (f'Batch {batch} is {batch / samples:.0%} of {samples} clips per '
            f'process: {plan.iters_per_epoch(stage) // acc} steps per epoch '
            f'in epochs {stage.start_epoch}-{stage.end_epoch} (recipe '
            f'{plan.recipe_iters_per_epoch // acc}); use {_cycle_fix(plan)}'
            f'more data or a smaller batch_size.')


def _short_cycle_warning(plan) -> Optional[str]:
    """The warning for a short cycle of other than the paper's 3 crop
    sizes; None for 3."""
    factors = list(plan.options.short_cycle_factors)
    if not plan.options.short_cycle or len(factors) == 2:
        return None
    return (f'short_cycle_factors={factors} cycle {len(factors) + 1} crop '
            f'sizes; the paper\'s 2 factors cycle 3.')
