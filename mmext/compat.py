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
    """Let configs inherit ``_base_ = '<name>::path'``.

    Adds ``name`` to mmengine's ``config.utils.MODULE2PACKAGE`` table.

    Args:
        name (str): An installed package holding ``.mim/configs``.
    """
    config_utils.MODULE2PACKAGE.setdefault(name, name)


def config_base_files(filename: str) -> List[str]:
    """The paths a config's ``_base_`` names, ``pkg::`` resolved.

    Through ``Config._get_base_files`` and ``Config._get_cfg_path``.

    Args:
        filename (str): A config file.

    Returns:
        list[str]: The base files' paths.
    """
    return [Config._get_cfg_path(base, filename)[0]
            for base in Config._get_base_files(filename)]


def unwrap_model(model):
    """The model inside mmengine's model wrappers, as its own hooks reach it.

    Args:
        model (nn.Module): A model, wrapped (DDP, FSDP, ...) or not.

    Returns:
        nn.Module: ``model.module`` of a wrapper, else ``model``.
    """
    return model.module if is_model_wrapper(model) else model


# ------------------------------------ the train loop and checkpoints, re-timed
def set_train_loop_length(loop, max_epochs: int, max_iters: int) -> None:
    """Set a train loop's read-only length (``_max_epochs``, ``_max_iters``).

    Args:
        loop (BaseLoop): An ``EpochBasedTrainLoop``.
        max_epochs (int): Its new epochs.
        max_iters (int): Its new iterations.
    """
    loop._max_epochs = int(max_epochs)
    loop._max_iters = int(max_iters)


def loop_validates(loop, done: int) -> bool:
    """Whether an ``EpochBasedTrainLoop`` validates after some epochs.

    By its interval (its ``_decide_current_val_interval`` after the epoch;
    the last epoch aside).

    Args:
        loop (EpochBasedTrainLoop): The loop.
        done (int): Epochs done.

    Returns:
        bool: Whether it validates after epoch ``done``.
    """
    step = bisect.bisect(loop.dynamic_milestones, done + 1)
    return done >= loop.val_begin and done % loop.dynamic_intervals[
        step - 1] == 0


def set_validation_epochs(loop, epochs: Sequence[int]) -> None:
    """Make an ``EpochBasedTrainLoop`` validate after exactly given epochs.

    The interval ``v`` of ``dynamic_intervals`` from the epoch of ``epochs``
    before ``v`` up to ``v`` validates at ``v`` only.

    Args:
        loop (EpochBasedTrainLoop): The loop.
        epochs (Sequence[int]): Ascending epoch counts (the last one if it
            validates at all).
    """
    loop.val_begin = epochs[0] if epochs else loop.max_epochs + 1
    loop.dynamic_milestones = [0] + [v + 2 for v in epochs]
    loop.dynamic_intervals = list(epochs) + [loop.max_epochs + 1]
    loop.val_interval = loop.dynamic_intervals[0]


def epoch_checkpoint_hooks(runner) -> List[CheckpointHook]:
    """A runner's checkpoint hooks that save by epoch.

    Args:
        runner (Runner): The runner.

    Returns:
        list[CheckpointHook]: Its ``CheckpointHook`` instances with
        ``by_epoch=True`` and a positive ``interval``.
    """
    return [h for h in runner.hooks if isinstance(h, CheckpointHook)
            and h.by_epoch and h.interval > 0]


def checkpoint_saves(hook: CheckpointHook, done: int) -> bool:
    """Whether an epoch-based ``CheckpointHook`` saves after some epochs.

    By its interval (``every_n_epochs`` from ``save_begin``).

    Args:
        hook (CheckpointHook): The hook.
        done (int): Epochs done.

    Returns:
        bool: Whether it saves after epoch ``done``.
    """
    return done >= hook.save_begin and (
        done - hook.save_begin) % hook.interval == 0


def save_checkpoint_after(hook: CheckpointHook, done: int,
                          save: bool) -> None:
    """Make an epoch-based ``CheckpointHook`` save after some epochs or not.

    Whatever its interval: moves its ``save_begin``.

    Args:
        hook (CheckpointHook): The hook.
        done (int): Epochs done.
        save (bool): Whether it saves after epoch ``done``.
    """
    hook.save_begin = done if save else done + 1


def accumulative_counts(wrapper) -> int:
    """Micro-batches per optimizer step of an OptimWrapper.

    Args:
        wrapper (OptimWrapper): The wrapper.

    Returns:
        int: Its ``_accumulative_counts``.
    """
    return wrapper._accumulative_counts


def max_counts(wrapper) -> int:
    """Micro-batches an OptimWrapper expects in total.

    Args:
        wrapper (OptimWrapper): The wrapper.

    Returns:
        int: Its ``_max_counts``; -1 until ``initialize_count_status``.
    """
    return wrapper._max_counts


def calling_runner():
    """The innermost mmengine runner whose method is on the call stack.

    For components the runner does not pass itself to: ``Runner.train``
    calls ``OptimWrapper.initialize_count_status`` (``FlexibleRunner``
    through its strategy) and ``Runner.build_optim_wrapper`` the
    constructors from their own methods. The runner's ``cfg`` is the run's
    config as an object (its printed text, the message hub's ``'cfg'``, does
    not parse back when a value prints as no Python, e.g. ``inf``).

    Returns:
        Runner | FlexibleRunner | None: The runner, or None outside one.
    """
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
    """Remove a key from a message hub, so the logger hook stops writing its
    last value.

    Args:
        message_hub (MessageHub): The hub (its ``log_scalars``).
        key (str): The scalar's key, e.g. ``'train/grad_norm'``.
    """
    message_hub.log_scalars.pop(key, None)


@contextmanager
def grad_clipping_off(wrapper) -> Iterator[bool]:
    """Skip an OptimWrapper's ``clip_grad`` inside the context.

    Empties its undocumented ``clip_grad_kwargs`` and restores them after.

    Args:
        wrapper (OptimWrapper): The wrapper.

    Yields:
        bool: Whether clipping was configured (and is now off).
    """
    kwargs = wrapper.clip_grad_kwargs
    wrapper.clip_grad_kwargs = {}
    try:
        yield bool(kwargs)
    finally:
        wrapper.clip_grad_kwargs = kwargs


def reset_to_initial_values(param_groups: List[dict]) -> None:
    """Set each ``<param>`` of the groups back to its ``initial_<param>``.

    mmengine's schedulers store ``initial_<param>`` (undocumented); this
    undoes what built schedulers did (``LinearLR``'s start factor).

    Args:
        param_groups (list[dict]): The optimizer's param groups.
    """
    for group in param_groups:
        for key in [k for k in group if k.startswith('initial_')]:
            group[key[len('initial_'):]] = group[key]


def shadow_tensor(module: torch.nn.Module, name: str,
                  value: torch.Tensor) -> None:
    """Make ``module.<name>`` read a tensor while the registered one stays.

    An entry of the instance ``__dict__`` comes before
    ``nn.Module.__getattr__`` (``_parameters``/``_buffers``), so the module's
    code reads it, while ``parameters()``, ``state_dict()`` and the optimizer
    keep the registered tensor (gradients reach it via ``value``).

    Args:
        module (torch.nn.Module): The module.
        name (str): A registered parameter or buffer.
        value (torch.Tensor): What ``module.<name>`` reads.
    """
    vars(module)[name] = value


def clear_shadow(module: torch.nn.Module, name: str) -> None:
    """Undo :func:`shadow_tensor` (nothing if ``name`` is not shadowed).

    Args:
        module (torch.nn.Module): The module.
        name (str): The shadowed name.
    """
    vars(module).pop(name, None)


def registered_tensor(module: torch.nn.Module, name: str) -> torch.Tensor:
    """The registered parameter or buffer of a name, even if shadowed.

    ``get_parameter`` would read the shadow.

    Args:
        module (torch.nn.Module): The module.
        name (str): The name, of this module (not recursive).

    Returns:
        torch.Tensor: The parameter or buffer.

    Raises:
        KeyError: Without one.
    """
    tensors = dict(module.named_parameters(recurse=False))
    tensors.update(module.named_buffers(recurse=False))
    return tensors[name]


def random_other_index(dataset) -> int:
    """A random valid index of a ``BaseDataset`` (``_rand_another``).

    Args:
        dataset (BaseDataset): The dataset.

    Returns:
        int: An index in ``[0, len(dataset))``.
    """
    return dataset._rand_another()


def batch_norm_xd_type() -> type:
    """mmengine's ``_BatchNormXd``.

    Returns:
        type: What ``revert_sync_batchnorm`` turns SyncBN into in a
        non-distributed run.
    """
    from mmengine.model.utils import _BatchNormXd
    return _BatchNormXd


def train_loader_batch_size(runner) -> int:
    """The per-process batch size of a runner's train loader, as ``scale_lr``
    reads it.

    Args:
        runner (Runner): The runner (its ``_train_dataloader``: its config
            until built).

    Returns:
        int: The loader's ``batch_size``.
    """
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
    characters (``Loads checkpoint by local backend from path``).

    Args:
        filename (str): The checkpoint's path (``~`` expanded).
        map_location: As ``torch.load``'s. Defaults to None.

    Returns:
        dict: The loaded checkpoint.

    Raises:
        FileNotFoundError: No such file.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return torch.load(filename, map_location=map_location, weights_only=False)


@contextmanager
def trusted_checkpoint_loading() -> Iterator[None]:
    """Load local mmengine checkpoints without torch's ``weights_only``.

    Replaces ``CheckpointLoader._schemes['']`` inside the context only
    (``torch.load`` and other schemes keep torch's defaults): torch >= 2.6
    refuses the message hub of mmengine 0.10.7 checkpoints
    (open-mmlab/mmengine#1655). Only load checkpoints you trust inside it.

    Yields:
        None: Inside, mmengine's local loads use ``weights_only=False``.
    """
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
    """A setting of ``torch._dynamo.config``.

    Args:
        name (str): ``recompile_limit`` (compiled entries a frame may hold
            before dynamo runs it eagerly; default 8) or
            ``automatic_dynamic_shapes``.

    Returns:
        object: Its value.
    """
    import torch._dynamo
    return getattr(torch._dynamo.config, name)


def set_dynamo_config(name: str, value) -> None:
    """Set a :func:`dynamo_config` setting (process-wide, at once).

    Args:
        name (str): The setting.
        value (object): Its new value.
    """
    import torch._dynamo
    setattr(torch._dynamo.config, name, value)


def dynamo_graph_count() -> int:
    """Graphs dynamo has compiled in this process.

    Returns:
        int: ``counters['stats']['unique_graphs']``, not cleared by
        ``torch.compiler.reset``.
    """
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
        """Collect one record of a frame that hit a recompile limit.

        Args:
            record (logging.LogRecord): A warning of
                ``torch._dynamo.convert_frame``; others are ignored.
        """
        if str(record.msg).startswith('torch._dynamo hit config.') and (
                len(record.args or ()) >= 3):
            self.fallbacks.append(f'{record.args[0]}: {record.args[2]}')

    def __enter__(self) -> 'DynamoRecompileLimitWatch':
        logging.getLogger(self.LOGGER).addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger(self.LOGGER).removeHandler(self)


register_config_package('mmext')
