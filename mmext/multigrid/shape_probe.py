"""Every grid shape of a plan tried on the recognizer before training.

One forward pass per distinct per-process ``(B, T, S)`` of the plan (long-
and short-cycle shapes alike), on a copy of the model on PyTorch's ``meta``
device: meta tensors carry shapes and dtypes but no data, so a recipe's full
batch costs no memory and the whole check takes seconds for any model. The
copy shares nothing with the model (its parameters and buffers are new meta
tensors, :func:`meta_copy`), so the model's weights, BN statistics and
autograd state are untouched. Operations that need data (``.item()``,
tensors created on the CPU inside ``forward``, custom kernels without a meta
implementation) fail on ``meta``; that shape is then tried again on the
model itself, on its device, with a batch of at most
:data:`FALLBACK_BATCH` clips in eval mode without gradients.

The probe also records the spatial size of the backbone's output, the final
feature map, at every shape (:attr:`ShapeResult.feature_map`), which the
feature-map check of :mod:`.model_checks` reads.
"""
import copy
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = [
    'PlannedShape', 'ShapeResult', 'FALLBACK_BATCH', 'planned_shapes',
    'probe_input_size', 'meta_copy', 'probe_shapes', 'probe_plan'
]

# Clips of the fallback forward on the model's own device.
FALLBACK_BATCH = 2


class PlannedShape(NamedTuple):
    """One distinct per-process mini-batch shape of a plan.

    Attributes:
        batch (int): Clips per process ``B``.
        clip_len (int): ``T`` in frames.
        crop_size (int): ``S`` in pixels.
        long_cycle (bool): Whether some stage trains it as its long-cycle
            shape (else only inside short cycles).
        epochs (tuple[int, int]): First and end (exclusive) multigrid epoch
            of the stages that train it.
    """
    batch: int
    clip_len: int
    crop_size: int
    long_cycle: bool
    epochs: Tuple[int, int]

    def __str__(self) -> str:
        return f'(B, T, S) = ({self.batch}, {self.clip_len}, {self.crop_size})'


class ShapeResult(NamedTuple):
    """What one planned shape did on the model.

    Attributes:
        shape (PlannedShape): The shape.
        error (str, optional): ``'<ExceptionType>: <message>'`` of the
            failed forward; None if it passed.
        module (str, optional): The innermost module whose forward raised,
            as ``'backbone.pool5 (MaxPool3d)'`` (``'model'`` for the
            recognizer itself); None if it passed.
        feature_map (tuple[int, int], optional): ``(H, W)`` of the
            backbone's output (the smallest over pathways), None for
            backbones that return tokens (``(N, C)``).
        device (str): Where the forward ran: ``'meta'``, or the model's
            device after a fallback.
    """
    shape: PlannedShape
    error: Optional[str]
    module: Optional[str]
    feature_map: Optional[Tuple[int, int]]
    device: str


def planned_shapes(plan) -> List[PlannedShape]:
    """Distinct per-process ``(B, T, S)`` of a plan, in training order.

    Args:
        plan (MultigridPlan): The run's plan.

    Returns:
        list[PlannedShape]: Every short-cycle shape of every stage (which
        includes its long-cycle shape), each once.
    """
    found = {}
    for stage in plan.stages:
        for grid in stage.short_cycle:
            key = (plan.base_batch * grid.batch_factor, grid.clip_len,
                   grid.crop_size)
            long_cycle = grid == stage.shape
            first = found.get(key)
            found[key] = PlannedShape(
                *key, long_cycle or bool(first and first.long_cycle),
                (first.epochs[0] if first else stage.start_epoch,
                 stage.end_epoch))
    return list(found.values())


def _num_clips(pipeline: Optional[Sequence[dict]]) -> int:
    for transform in pipeline or []:
        name = transform['type']
        name = name if isinstance(name, str) else name.__name__
        if name.split('.')[-1] in ('SampleFrames', 'UniformSample'):
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
    """Size of the ``inputs`` tensor the recognizer gets at one shape.

    As mmaction2's ``FormatShape`` and ``ActionDataPreprocessor`` give it:
    ``(B, num_clips, C, T, S, S)`` for ``format_shape='NCTHW'`` (3D
    recognizers), ``(B, num_clips * T, C, S, S)`` for ``'NCHW'`` (2D
    recognizers: TSN, TSM, ...).

    Args:
        model (nn.Module): The recognizer.
        batch (int): ``B``, clips per process.
        clip_len (int): ``T`` in frames.
        crop_size (int): ``S`` in pixels.
        pipeline (Sequence[dict], optional): The train pipeline
            (``num_clips`` of its frame sampler); default one clip.

    Returns:
        tuple[int, ...]: The size. ``C`` is the first convolution's
        ``in_channels`` (3 if it has none).
    """
    fmt = getattr(getattr(model, 'data_preprocessor', None), 'format_shape',
                  'NCTHW')
    clips, channels = _num_clips(pipeline), _in_channels(model)
    if fmt == 'NCHW':
        return (batch, clips * clip_len, channels, crop_size, crop_size)
    return (batch, clips, channels, clip_len, crop_size, crop_size)


def meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose parameters and buffers are on ``meta``.

    No tensor data is copied: every parameter and buffer is given its meta
    counterpart in ``copy.deepcopy``'s memo before the copy starts.
    Forward hooks are copied with the modules.

    Raises:
        Exception: Whatever ``copy.deepcopy`` raises for a module holding an
            object that cannot be copied.
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
        self.feature_map = None
        self.handles = []
        for module in self.names:
            self.handles += [
                module.register_forward_pre_hook(self._enter),
                module.register_forward_hook(self._leave)
            ]
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

    def culprit(self) -> str:
        module = self.stack[-1] if self.stack else None
        if module is None:
            return 'model'
        return f'{self.names[module]} ({type(module).__name__})'

    def run(self, model, inputs) -> Tuple[Optional[Exception], str]:
        self.stack, self.feature_map = [], None
        try:
            model(inputs, mode='tensor', stage='head')
        except Exception as error:  # noqa: B902 any failure is the finding
            return error, self.culprit()
        return None, ''

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _needs_data(error: Exception) -> bool:
    """Whether a meta forward failed for want of data, not of a shape."""
    return 'meta' in str(error).lower()


def _error_text(error: Exception) -> str:
    lines = str(error).strip().splitlines() or ['']
    return f'{type(error).__name__}: {lines[0]}'


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
            error, module = tracer.run(
                model, torch.zeros(size, device=device, dtype=dtype))
    finally:
        tracer.remove()
        for m, mode in modes:
            m.training = mode
    return ShapeResult(shape, error and _error_text(error),
                       module or None, tracer.feature_map, str(device))


def probe_shapes(model: nn.Module, shapes: Sequence[PlannedShape],
                 pipeline: Optional[Sequence[dict]] = None
                 ) -> List[ShapeResult]:
    """Forward every shape through the recognizer (see the module doc).

    The meta copy is in training mode (``train()`` as the recipe defines
    it), as in training. The model is not changed.

    Args:
        model (nn.Module): The unwrapped recognizer (``forward(inputs,
            mode='tensor', stage='head')`` runs backbone, neck and head).
        shapes (Sequence[PlannedShape]): The shapes.
        pipeline (Sequence[dict], optional): The train pipeline, see
            :func:`probe_input_size`.

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
            error, module = tracer.run(
                ghost, torch.empty(size, device='meta', dtype=dtype))
            if error is not None and _needs_data(error):
                results.append(_fallback(model, shape, pipeline))
                continue
            results.append(
                ShapeResult(shape, error and _error_text(error),
                            module or None, tracer.feature_map, 'meta'))
    finally:
        tracer.remove()
    return results


def probe_plan(plan, model: nn.Module,
               pipeline: Optional[Sequence[dict]] = None
               ) -> List[ShapeResult]:
    """:func:`probe_shapes` over :func:`planned_shapes` of ``plan``."""
    return probe_shapes(model, planned_shapes(plan), pipeline)
