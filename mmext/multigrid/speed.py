"""What makes multigrid runs fast: glibc keeping freed memory on CPUs,
``torch.compile`` sized to the plan, ``mmext.ChannelsLastHook`` and
``mmext.Float32HeadHook`` (docs/en/multigrid.md#with-the-usual-speed-options).
"""
import ctypes
import os
from typing import Callable, List, Optional

import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from mmext.compat import (DynamoRecompileLimitWatch, dynamo_graph_count,
                          dynamo_recompile_limit, set_dynamo_recompile_limit)
from mmext.registry import HOOKS

__all__ = [
    'prepare_run', 'keep_freed_memory', 'glibc_version', 'compile_enabled',
    'train_shape_count', 'run_outside_dynamo', 'CompiledRun',
    'ChannelsLastHook', 'to_channels_last_3d', 'Float32HeadHook',
    'float32_head_outputs', 'autocasts_to_bf16', 'unwrap_model'
]

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
_CHANNELS_LAST = torch.channels_last_3d


def unwrap_model(model):
    return model.module if is_model_wrapper(model) else model


def prepare_run(runner, keep_cpu_memory: bool = True) -> Callable[[], None]:
    """Set up what ``MultigridHook`` gives a run besides multigrid (logged):
    glibc keeping freed memory when the model trains on the CPU, and
    :func:`run_outside_dynamo` under mmengine's ``compile``.

    Returns:
        callable: Undoes the dynamo exclusions (the allocator setting is
        process-wide and stays).
    """
    model = unwrap_model(runner.model)
    param = next(model.parameters(), None)
    if (keep_cpu_memory and param is not None and param.device.type == 'cpu'
            and keep_freed_memory()):
        print_log(f'glibc {glibc_version()} keeps freed memory for reuse '
                  f'(mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1); '
                  f'keep_cpu_memory=False leaves malloc alone',
                  logger='current')
    if not compile_enabled(runner.cfg.get('compile')):
        return lambda: None
    print_log('torch.compile: the data preprocessor, the message hub and '
              'the optimizer step run outside dynamo', logger='current')
    return run_outside_dynamo(model, runner.message_hub,
                              runner.optim_wrapper)


# ---------------------------------------------------------------- allocator
def glibc_version() -> Optional[str]:
    """The C library's version, e.g. ``'2.36'``; None if it is not glibc."""
    try:
        name = os.confstr('CS_GNU_LIBC_VERSION')
    except (ValueError, OSError):
        return None
    if not name or not name.startswith('glibc '):
        return None
    return name.split(' ', 1)[1]


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (process-wide, idempotent).

    Returns:
        bool: False if the C library is not glibc.

    Raises:
        OSError: If glibc refused a setting (``mallopt`` returned 0).
    """
    if glibc_version() is None:
        return False
    # The process's own symbol table holds the libc it runs with.
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    for param, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)):
        if mallopt(param, value) != 1:
            raise OSError(f'glibc mallopt({param}, {value}) failed')
    return True


# ---------------------------------------------------------------- compile
def compile_enabled(compile_cfg) -> bool:
    """Whether a config's ``compile`` value makes mmengine compile
    (``True`` or a dict without ``disable=True``)."""
    if isinstance(compile_cfg, dict):
        return not compile_cfg.get('disable', False)
    return bool(compile_cfg)


def train_shape_count(plan) -> int:
    """Distinct ``(batch, T, S, sub-BN splits)`` with iterations in
    ``plan`` (a ``MultigridPlan`` with ``samples_per_rank``)."""
    return len({(x.batch_size, x.shape.clip_len, x.shape.crop_size,
                 x.sub_bn_splits) for x in plan.shape_iterations() if x.iters})


def run_outside_dynamo(model: torch.nn.Module, message_hub=None,
                       optim_wrapper=None) -> Callable[[], None]:
    """Run the data preprocessor, ``message_hub.update_scalar`` and each
    optimizer's ``step`` outside dynamo (``torch.compiler.disable`` on the
    instances); return the undo."""
    wrappers = list(getattr(optim_wrapper, 'optim_wrappers', {}).values()
                    ) or ([optim_wrapper] if optim_wrapper is not None else [])
    done = []
    for owner, name in ((getattr(model, 'data_preprocessor', None),
                         'forward'), (message_hub, 'update_scalar'),
                        *[(w.optimizer, 'step') for w in wrappers]):
        if owner is not None and name not in vars(owner):
            setattr(owner, name, torch.compiler.disable(getattr(owner, name)))
            done.append((owner, name))

    def undo():
        for owner, name in done:
            delattr(owner, name)

    return undo


class CompiledRun:
    """dynamo sized to a plan, and the graphs one run compiled.

    Args:
        plan (MultigridPlan): The run's plan (with ``samples_per_rank``).

    Attributes:
        shapes (int): :func:`train_shape_count` of the plan.
        limit (int): The run's recompile limit (at least ``shapes``).
        graphs (int): Graphs compiled between :meth:`start` and :meth:`stop`.
        fallbacks (list[str]): Frames that hit a recompile limit meanwhile
            (``"<limit>: <function> (<file>:<line>)"``).
    """

    def __init__(self, plan):
        self.shapes = train_shape_count(plan)
        self.limit = self.shapes
        self.graphs = 0
        self.fallbacks: List[str] = []
        self._previous: Optional[int] = None
        self._automatic_dynamic = True
        self._start_graphs = 0
        self._watch: Optional[DynamoRecompileLimitWatch] = None

    def start(self) -> str:
        """Raise the recompile limit, compile every shape statically, start
        counting; return what was set, for the log."""
        from torch._dynamo import config as dynamo_config
        self._previous = dynamo_recompile_limit()
        self.limit = max(self.shapes, self._previous)
        set_dynamo_recompile_limit(self.limit)
        self._automatic_dynamic = dynamo_config.automatic_dynamic_shapes
        dynamo_config.automatic_dynamic_shapes = False
        self._watch = DynamoRecompileLimitWatch().__enter__()
        self._start_graphs = dynamo_graph_count()
        return (f'torch.compile: dynamo recompile limit {self.limit} (was '
                f'{self._previous}) for the plan\'s {self.shapes} train '
                f'shapes, one static graph each')

    def stop(self) -> str:
        """Restore the limit and automatic dynamic shapes; count graphs and
        fallbacks; return the count, for the log."""
        from torch._dynamo import config as dynamo_config
        self.graphs = dynamo_graph_count() - self._start_graphs
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self.fallbacks = list(self._watch.fallbacks)
            self._watch = None
        if self._previous is not None:
            set_dynamo_recompile_limit(self._previous)
            dynamo_config.automatic_dynamic_shapes = self._automatic_dynamic
            self._previous = None
        if not self.fallbacks:
            return (f'torch.compile: {self.graphs} graphs compiled; no frame '
                    f'fell back to eager')
        return (f'torch.compile: {self.graphs} graphs compiled; frames that '
                f'hit the recompile limit {self.limit} and ran eagerly: '
                f'{"; ".join(self.fallbacks)}. Raise '
                f'torch._dynamo.config.recompile_limit (TORCH_LOGS='
                f'"recompiles" names the changing guards).')


# ---------------------------------------------------------- channels_last
def to_channels_last_3d(model: torch.nn.Module) -> int:
    """Store every 5-D parameter and buffer in channels_last_3d, in place
    (4-D ones, e.g. TSM's, stay); return how many were converted."""
    count = 0
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.dim() == 5 and not tensor.is_contiguous(
                    memory_format=_CHANNELS_LAST):
                tensor.data = tensor.data.contiguous(
                    memory_format=_CHANNELS_LAST)
                count += 1
    return count


def _inputs_to_channels_last(module, args):
    """Forward pre-hook: the first 5-D positional input in channels_last."""
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 5:
        return (args[0].contiguous(memory_format=_CHANNELS_LAST), ) + tuple(
            args[1:])
    return None


@HOOKS.register_module()
class ChannelsLastHook(Hook):
    """Train and evaluate a recognizer's backbone in channels_last_3d.

    A forward pre-hook converts the backbone's 5-D input; 5-D parameters,
    buffers and optimizer state are converted in ``before_train`` (after
    loading, before ``compile`` traces) and ``before_val``/``before_test``.
    With or without ``mmext.MultigridHook``::

        custom_hooks = [dict(type='mmext.ChannelsLastHook'),
                        dict(type='mmext.MultigridHook')]

    Raises:
        ValueError: In ``before_run`` if the model has no ``backbone``.
    """

    priority = 'VERY_HIGH'

    def __init__(self):
        self._handle = None

    def before_run(self, runner) -> None:
        model = unwrap_model(runner.model)
        backbone = getattr(model, 'backbone', None)
        if backbone is None:
            raise ValueError(
                f'ChannelsLastHook converts the inputs of model.backbone, '
                f'but {type(model).__name__} has no backbone; use it with an '
                f'mmaction2 recognizer.')
        if self._handle is None:
            self._handle = backbone.register_forward_pre_hook(
                _inputs_to_channels_last)

    def before_train(self, runner) -> None:
        count = to_channels_last_3d(unwrap_model(runner.model))
        optimizer = getattr(runner.optim_wrapper, 'optimizer', None)
        for state in getattr(optimizer, 'state', {}).values():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() == 5:
                    state[key] = value.contiguous(
                        memory_format=_CHANNELS_LAST)
        print_log(f'ChannelsLastHook: {count} 5-D parameters/buffers and '
                  f'the backbone inputs in channels_last_3d',
                  logger='current')

    def before_val(self, runner) -> None:
        to_channels_last_3d(unwrap_model(runner.model))

    before_test = before_val

    def after_run(self, runner) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


# ---------------------------------------------------------------- bfloat16
def _to_float32(module, args, output):
    if torch.is_tensor(output) and output.is_floating_point():
        return output.float()
    return None


def float32_head_outputs(model: torch.nn.Module) -> bool:
    """Make ``model.cls_head`` return float32 tensors (idempotent); return
    whether the forward hook was added now."""
    head = getattr(model, 'cls_head', None)
    if head is None or getattr(head, 'mmext_float32_outputs', False):
        return False
    head.register_forward_hook(_to_float32)
    head.mmext_float32_outputs = True
    return True


def autocasts_to_bf16(optim_wrapper) -> bool:
    """Whether the optim wrapper (or one of an ``OptimWrapperDict``)
    autocasts to bfloat16."""
    wrappers = list(getattr(optim_wrapper, 'optim_wrappers', {}).values())
    return any(
        getattr(w, 'cast_dtype', None) == torch.bfloat16
        for w in wrappers or [optim_wrapper])


@HOOKS.register_module()
class Float32HeadHook(Hook):
    """Class scores in float32 under bfloat16 AMP (mmaction2's top-k
    accuracy uses numpy, which has no bfloat16); ``MultigridHook`` does the
    same by itself."""

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        if float32_head_outputs(unwrap_model(runner.model)):
            print_log('Float32HeadHook: cls_head outputs in float32',
                      logger='current')
