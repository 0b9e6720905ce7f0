"""Every use of mmengine's (and torch's) private API, and the stack's fixes.

Checked against mmengine ``MMENGINE_CHECKED``; ``tests/test_compat.py``
exercises each use on real objects (docs/en/design.md, "mmengine's private
API"). Importing it adds ``mmext`` to mmengine's config package table."""
import bisect
import inspect
import logging
import os.path as osp
from contextlib import contextmanager
from typing import Iterator, List, Sequence

import torch
from mmengine.config import Config
from mmengine.config import utils as config_utils
from mmengine.hooks import CheckpointHook
from mmengine.model import is_model_wrapper
from mmengine.optim.scheduler.param_scheduler import INF
from mmengine.runner import CheckpointLoader, FlexibleRunner, Runner
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

__all__ = [
    'MMENGINE_CHECKED', 'SCHEDULER_INF', 'BatchNormBase', 'InstanceNormBase',
    'register_config_package', 'config_base_files', 'unwrap_model',
    'set_train_loop_length', 'loop_validates', 'set_validation_epochs',
    'epoch_checkpoint_hooks', 'checkpoint_saves', 'save_checkpoint_after',
    'accumulative_counts', 'max_counts',
    'calling_runner', 'random_other_index',
    'train_loader_batch_size', 'trusted_checkpoint_loading',
    'batch_norm_xd_type', 'drop_logged_scalar',
    'grad_clipping_off', 'reset_to_initial_values',
    'shadow_tensor', 'clear_shadow', 'registered_tensor',
    'dynamo_config', 'set_dynamo_config',
    'dynamo_graph_count', 'DynamoRecompileLimitWatch'
]

MMENGINE_CHECKED = '0.10.7'

# torch's private base classes of every BatchNorm (SyncBatchNorm and
# mmengine's BatchNormXd included) and InstanceNorm layer.
BatchNormBase = _BatchNorm
InstanceNormBase = _InstanceNorm

# The default ``end`` of mmengine's param schedulers, an undocumented constant.
SCHEDULER_INF = INF


def register_config_package(name: str) -> None:
    """Let configs inherit ``_base_ = '<name>::path'`` (mmengine's
    ``config.utils.MODULE2PACKAGE`` table)."""
    config_utils.MODULE2PACKAGE.setdefault(name, name)


def config_base_files(filename: str) -> List[str]:
    """The paths a config's ``_base_`` names, ``pkg::`` resolved
    (``Config._get_base_files``, ``Config._get_cfg_path``)."""
    return [Config._get_cfg_path(base, filename)[0]
            for base in Config._get_base_files(filename)]


def unwrap_model(model):
    """The model inside mmengine's model wrappers (DDP, FSDP, ...), as
    mmengine's own hooks reach it."""
    return model.module if is_model_wrapper(model) else model


# ------------------------------------ the train loop and checkpoints, re-timed
def set_train_loop_length(loop, max_epochs: int, max_iters: int) -> None:
    """Set a train loop's read-only length (``_max_epochs``,
    ``_max_iters``)."""
    loop._max_epochs = int(max_epochs)
    loop._max_iters = int(max_iters)


def loop_validates(loop, done: int) -> bool:
    """Whether an ``EpochBasedTrainLoop`` validates after ``done`` epochs
    by its interval (its ``_decide_current_val_interval`` after the epoch;
    the last epoch aside)."""
    step = bisect.bisect(loop.dynamic_milestones, done + 1)
    return done >= loop.val_begin and done % loop.dynamic_intervals[
        step - 1] == 0


def set_validation_epochs(loop, epochs: Sequence[int]) -> None:
    """Make an ``EpochBasedTrainLoop`` validate after exactly ``epochs``
    (ascending epoch counts; the last one if it validates at all): the
    interval ``v`` of ``dynamic_intervals`` from the epoch of ``epochs``
    before ``v`` up to ``v`` validates at ``v`` only."""
    loop.val_begin = epochs[0] if epochs else loop.max_epochs + 1
    loop.dynamic_milestones = [0] + [v + 2 for v in epochs]
    loop.dynamic_intervals = list(epochs) + [loop.max_epochs + 1]
    loop.val_interval = loop.dynamic_intervals[0]


def epoch_checkpoint_hooks(runner) -> List[CheckpointHook]:
    """A runner's ``CheckpointHook``s that save by epoch."""
    return [h for h in runner.hooks if isinstance(h, CheckpointHook)
            and h.by_epoch and h.interval > 0]


def checkpoint_saves(hook: CheckpointHook, done: int) -> bool:
    """Whether an epoch-based ``CheckpointHook`` saves after ``done``
    epochs by its interval (``every_n_epochs`` from ``save_begin``)."""
    return done >= hook.save_begin and (
        done - hook.save_begin) % hook.interval == 0


def save_checkpoint_after(hook: CheckpointHook, done: int,
                          save: bool) -> None:
    """Make an epoch-based ``CheckpointHook`` save after ``done`` epochs or
    not, whatever its interval (moves its ``save_begin``)."""
    hook.save_begin = done if save else done + 1


def accumulative_counts(wrapper) -> int:
    """Micro-batches per optimizer step of an OptimWrapper
    (``_accumulative_counts``)."""
    return wrapper._accumulative_counts


def max_counts(wrapper) -> int:
    """Micro-batches an OptimWrapper expects in total (``_max_counts``; -1
    until ``initialize_count_status``)."""
    return wrapper._max_counts


def calling_runner():
    """The innermost mmengine runner (``Runner``, ``FlexibleRunner``) whose
    method is on the call stack, or None.

    For components the runner does not pass itself to: ``Runner.train``
    calls ``OptimWrapper.initialize_count_status`` (``FlexibleRunner``
    through its strategy) and ``Runner.build_optim_wrapper`` the
    constructors from their own methods. The runner's ``cfg`` is the run's
    config as an object (its printed text, the message hub's ``'cfg'``,
    does not parse back when a value prints as no Python, e.g. ``inf``)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get('self')
            if isinstance(owner, (Runner, FlexibleRunner)):
                return owner
            frame = frame.f_back
        return None
    finally:
        del frame


def drop_logged_scalar(message_hub, key: str) -> None:
    """Remove ``key`` from a message hub (``log_scalars``), so the logger
    hook stops writing its last value."""
    message_hub.log_scalars.pop(key, None)


@contextmanager
def grad_clipping_off(wrapper) -> Iterator[bool]:
    """Skip an OptimWrapper's ``clip_grad`` inside the context (empties
    its undocumented ``clip_grad_kwargs``); yields whether clipping was
    configured (and is now off)."""
    kwargs = wrapper.clip_grad_kwargs
    wrapper.clip_grad_kwargs = {}
    try:
        yield bool(kwargs)
    finally:
        wrapper.clip_grad_kwargs = kwargs


def reset_to_initial_values(param_groups: List[dict]) -> None:
    """Set each ``<param>`` of the groups back to the ``initial_<param>``
    that mmengine's schedulers store (undocumented), undoing what built
    schedulers did (``LinearLR``'s start factor)."""
    for group in param_groups:
        for key in [k for k in group if k.startswith('initial_')]:
            group[key[len('initial_'):]] = group[key]


def shadow_tensor(module: torch.nn.Module, name: str,
                  value: torch.Tensor) -> None:
    """Make ``module.<name>`` read ``value``; the registered tensor stays:
    an entry of the instance ``__dict__`` comes before
    ``nn.Module.__getattr__`` (``_parameters``/``_buffers``), so the
    module's code reads it, while ``parameters()``, ``state_dict()`` and
    the optimizer keep the registered tensor (gradients reach it via
    ``value``)."""
    vars(module)[name] = value


def clear_shadow(module: torch.nn.Module, name: str) -> None:
    """Undo :func:`shadow_tensor` (nothing if ``name`` is not shadowed)."""
    vars(module).pop(name, None)


def registered_tensor(module: torch.nn.Module, name: str) -> torch.Tensor:
    """The registered parameter or buffer ``name``, even if shadowed
    (``get_parameter`` would read the shadow); KeyError without one."""
    tensors = dict(module.named_parameters(recurse=False))
    tensors.update(module.named_buffers(recurse=False))
    return tensors[name]


def random_other_index(dataset) -> int:
    """A random valid index of a ``BaseDataset`` (``_rand_another``)."""
    return dataset._rand_another()


def batch_norm_xd_type() -> type:
    """mmengine's ``_BatchNormXd``: what ``revert_sync_batchnorm`` turns
    SyncBN into in a non-distributed run."""
    from mmengine.model.utils import _BatchNormXd
    return _BatchNormXd


def train_loader_batch_size(runner) -> int:
    """The per-process batch size of a runner's train loader
    (``_train_dataloader``: its config until built), as ``scale_lr``."""
    loader = runner._train_dataloader
    if isinstance(loader, dict):
        return loader['batch_size']
    return loader.batch_size


def load_from_local(filename: str, map_location=None):
    """mmengine's local loader (``load_from_local``, its
    FileNotFoundError too) with ``weights_only=False``: torch >= 2.6
    refuses the message hub of mmengine 0.10.7 checkpoints
    (open-mmlab/mmengine#1655); allow-listing ``builtins.getattr`` would
    void the protection for every load. Named as mmengine names its
    loaders, ``load_from_<backend>``: its log line cuts the first 10
    characters (``Loads checkpoint by local backend from path``)."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return torch.load(filename, map_location=map_location, weights_only=False)


@contextmanager
def trusted_checkpoint_loading() -> Iterator[None]:
    """Load local mmengine checkpoints without torch's ``weights_only``:
    replaces ``CheckpointLoader._schemes['']`` inside the context only
    (``torch.load`` and other schemes keep torch's defaults). Only load
    checkpoints you trust inside it."""
    schemes = CheckpointLoader._schemes
    previous = schemes['']
    schemes[''] = load_from_local
    try:
        yield
    finally:
        schemes[''] = previous


# dynamo internals (checked against torch 2.13): mmengine's runner makes the
# torch.compile call. Imported on first use: importing dynamo costs seconds.
def dynamo_config(name: str):
    """A setting of ``torch._dynamo.config``: ``recompile_limit`` (compiled
    entries a frame may hold before dynamo runs it eagerly; default 8),
    ``automatic_dynamic_shapes``."""
    import torch._dynamo
    return getattr(torch._dynamo.config, name)


def set_dynamo_config(name: str, value) -> None:
    """Set :func:`dynamo_config` ``name`` (process-wide, at once)."""
    import torch._dynamo
    setattr(torch._dynamo.config, name, value)


def dynamo_graph_count() -> int:
    """Graphs dynamo has compiled in this process, not cleared by
    ``torch.compiler.reset`` (``counters['stats']['unique_graphs']``)."""
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


class DynamoRecompileLimitWatch(logging.Handler):
    """Collect the functions dynamo ran eagerly after its recompile limit
    (a context manager): the ``'torch._dynamo hit config.%s'`` warnings of
    ``torch._dynamo.convert_frame`` into :attr:`fallbacks`
    (``"<limit name>: <function> (<file>:<line>)"``)."""

    LOGGER = 'torch._dynamo.convert_frame'

    def __init__(self):
        super().__init__(logging.WARNING)
        self.fallbacks: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith('torch._dynamo hit config.') and (
                len(record.args or ()) >= 3):
            self.fallbacks.append(f'{record.args[0]}: {record.args[2]}')

    def __enter__(self) -> 'DynamoRecompileLimitWatch':
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger(self.LOGGER).removeHandler(self)


register_config_package('mmext')
