"""Every use of mmengine's private API, and the stack's compatibility fixes.

mmext relies on a few underscore attributes of mmengine that have no public
equivalent. They are all read or written here and nowhere else, checked
against mmengine ``MMENGINE_CHECKED``; ``tests/test_compat.py`` exercises each
one on real mmengine objects, so an mmengine release that renames one fails
there loudly instead of training wrongly.

Importing :mod:`mmext` changes one thing process-wide: it adds ``mmext`` to
mmengine's table of packages whose configs ``_base_ = 'pkg::path'`` may name.
Checkpoint loading is relaxed only inside :func:`trusted_checkpoint_loading`.
"""
import logging
import os.path as osp
from contextlib import contextmanager
from typing import Iterator, List, Optional

import torch
from mmengine.config import Config
from mmengine.config import utils as config_utils
from mmengine.optim.scheduler.param_scheduler import INF
from mmengine.runner import CheckpointLoader
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

__all__ = [
    'MMENGINE_CHECKED', 'SCHEDULER_INF', 'BatchNormBase', 'InstanceNormBase',
    'register_config_package', 'config_base_files',
    'set_train_loop_length', 'accumulative_counts', 'max_counts',
    'run_config', 'random_other_index',
    'train_loader_batch_size', 'trusted_checkpoint_loading',
    'trust_runner_checkpoints', 'batch_norm_xd_type', 'drop_logged_scalar',
    'grad_clipping_off', 'reset_to_initial_values',
    'shadow_tensor', 'clear_shadow', 'registered_tensor',
    'dynamo_recompile_limit', 'set_dynamo_recompile_limit',
    'dynamo_graph_count', 'DynamoRecompileLimitWatch'
]

MMENGINE_CHECKED = '0.10.7'

# torch's base classes of every BatchNorm (1d/2d/3d, SyncBatchNorm, mmengine's
# BatchNormXd) and InstanceNorm layer, what mmcv and mmengine test against
# too; torch has no public name for them.
BatchNormBase = _BatchNorm
InstanceNormBase = _InstanceNorm

# The default ``end`` of mmengine's param schedulers ("to the end of
# training"), a constant of its scheduler module.
SCHEDULER_INF = INF


def register_config_package(name: str) -> None:
    """Let configs inherit ``_base_ = '<name>::path'``.

    mmengine resolves ``pkg::`` prefixes only for packages in its hard-coded
    ``MODULE2PACKAGE`` table (``mmengine/config/utils.py``).
    """
    config_utils.MODULE2PACKAGE.setdefault(name, name)


def config_base_files(filename: str) -> List[str]:
    """The files a config's ``_base_`` names, as paths (``pkg::path``
    resolved), the way ``Config.fromfile`` finds them (its
    ``_get_base_files`` and ``_get_cfg_path``)."""
    return [Config._get_cfg_path(base, filename)[0]
            for base in Config._get_base_files(filename)]


def set_train_loop_length(loop, max_epochs: int, max_iters: int) -> None:
    """Set an ``EpochBasedTrainLoop``'s length (read-only properties).

    The loop keeps them in ``_max_epochs``/``_max_iters`` (read by its
    ``run``, the ETA, the ``[i/max]`` log and ``is_last_train_iter``).
    """
    loop._max_epochs = int(max_epochs)
    loop._max_iters = int(max_iters)


def accumulative_counts(wrapper) -> int:
    """Micro-batches per optimizer step of an OptimWrapper (its
    ``accumulative_counts`` option; the public ``inner_count`` counts the
    micro-batches done)."""
    return wrapper._accumulative_counts


def max_counts(wrapper) -> int:
    """Micro-batches an OptimWrapper expects in total (``max_iters``): -1
    until the train loop ran ``initialize_count_status``."""
    return wrapper._max_counts


def run_config(message_hub) -> Optional[Config]:
    """The config of the run, for components that see no runner.

    mmengine's ``RuntimeInfoHook.before_run`` stores the runner's merged
    config as text (``cfg.pretty_text``, runtime info ``'cfg'``); an optimizer
    wrapper reads it there to check itself against the run (param
    schedulers, hooks, ``auto_scale_lr``) with any runner.

    Returns:
        Config | None: None before ``before_run`` (no runner, e.g. a wrapper
        built by hand) or for a text that does not parse back.
    """
    text = message_hub.get_info('cfg')
    if not text:
        return None
    try:
        return Config.fromstring(text, '.py')
    except Exception:  # noqa: B902 e.g. objects that print as no Python
        return None


def drop_logged_scalar(message_hub, key: str) -> None:
    """Remove ``key`` (e.g. ``'train/grad_norm'``) from a message hub.

    The hub keeps the last value it was given and the logger hook writes it
    at every log interval; a component that stopped producing the value
    removes it, so no stale value is logged. The hub has no public removal.
    """
    message_hub.log_scalars.pop(key, None)


@contextmanager
def grad_clipping_off(wrapper) -> Iterator[bool]:
    """Skip an OptimWrapper's ``clip_grad`` inside the context.

    ``OptimWrapper.step`` clips when its ``clip_grad_kwargs`` (set from the
    ``clip_grad`` option) are non-empty; there is no public switch.

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
    """Undo what built param schedulers did to the groups' values.

    A scheduler stores each group's value before its first step as
    ``initial_<param>`` (e.g. ``initial_lr``) and may change the value at
    construction (``LinearLR``'s start factor); schedulers built again from
    these groups would compound that. Each ``<param>`` is set back to its
    ``initial_<param>``.
    """
    for group in param_groups:
        for key in [k for k in group if k.startswith('initial_')]:
            group[key[len('initial_'):]] = group[key]


def shadow_tensor(module: torch.nn.Module, name: str,
                  value: torch.Tensor) -> None:
    """Make ``module.<name>`` read ``value``; the registered tensor stays.

    ``nn.Module`` keeps parameters and buffers in ``_parameters`` /
    ``_buffers`` and finds them through ``__getattr__``, which Python calls
    only when the instance ``__dict__`` has no such entry; its
    ``__setattr__`` would replace the registered tensor. An entry written
    straight into ``__dict__`` is therefore what the module's own code reads
    (``self.pos_embed``), while ``parameters()``, ``state_dict()``, ``.to()``
    and the optimizer keep the registered tensor, and gradients reach it
    when ``value`` is computed from it. :func:`clear_shadow` removes it.
    """
    vars(module)[name] = value


def clear_shadow(module: torch.nn.Module, name: str) -> None:
    """Undo :func:`shadow_tensor` (nothing if ``name`` is not shadowed)."""
    vars(module).pop(name, None)


def registered_tensor(module: torch.nn.Module, name: str) -> torch.Tensor:
    """The parameter or buffer ``name`` of ``module``, shadowed or not
    (``get_parameter``/``get_buffer`` read the attribute, i.e. the shadow).

    Raises:
        KeyError: If ``module`` has no such parameter or buffer.
    """
    tensors = dict(module.named_parameters(recurse=False))
    tensors.update(module.named_buffers(recurse=False))
    return tensors[name]


def random_other_index(dataset) -> int:
    """A random valid index of an mmengine ``BaseDataset`` (its refetch)."""
    return dataset._rand_another()


def batch_norm_xd_type() -> type:
    """mmengine's ``_BatchNormXd``: what ``SyncBN`` becomes without DDP.

    ``Runner.wrap_model`` calls ``revert_sync_batchnorm`` in a
    non-distributed run, which turns every ``SyncBatchNorm`` (and mmcv's
    ``MMSyncBN``) into this dimension-agnostic ``_BatchNorm``.
    """
    from mmengine.model.utils import _BatchNormXd
    return _BatchNormXd


def train_loader_batch_size(runner) -> int:
    """The per-process batch size of a runner's train loader.

    Read as mmengine's ``Runner.scale_lr`` reads it: from the runner's
    ``_train_dataloader``, the config dict until the loader is built (its
    ``batch_size``), else the built ``DataLoader``.
    """
    loader = runner._train_dataloader
    if isinstance(loader, dict):
        return loader['batch_size']
    return loader.batch_size


def _load_trusted_local(filename: str, map_location=None):
    """mmengine's local loader, with torch < 2.6's ``weights_only=False``.

    mmengine 0.10.7 checkpoints hold the message hub (``HistoryBuffer``,
    numpy arrays, objects rebuilt through ``builtins.getattr``), which torch
    >= 2.6's default ``weights_only=True`` refuses (open-mmlab/mmengine#1655).
    Allow-listing ``getattr`` would void the protection for every load, so
    only the runner's own loads are relaxed.

    Raises:
        FileNotFoundError: As mmengine's ``load_from_local``.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return torch.load(filename, map_location=map_location, weights_only=False)


@contextmanager
def trusted_checkpoint_loading() -> Iterator[None]:
    """Load local mmengine checkpoints without torch's ``weights_only``.

    Inside the context, mmengine's loader for local paths (``CheckpointLoader``
    scheme ``''``) unpickles whole checkpoints as torch < 2.6 did, so
    ``resume`` works on torch >= 2.6. ``torch.load`` itself, other schemes and
    every load outside the context keep torch's defaults. Only load
    checkpoints you trust inside it. The runners that mmext's ``tools/``
    build run their ``load_checkpoint`` in it (see
    :func:`mmext.runner.build_runner`); with the toolboxes' own tools, wrap
    ``runner.train()``::

        from mmext.compat import trusted_checkpoint_loading
        with trusted_checkpoint_loading():
            runner.train()
    """
    schemes = CheckpointLoader._schemes
    previous = schemes['']
    schemes[''] = _load_trusted_local
    try:
        yield
    finally:
        schemes[''] = previous


def trust_runner_checkpoints(runner) -> None:
    """Make ``runner``'s own checkpoint loads (resume, ``load_from``) trusted.

    Wraps the instance's ``load_checkpoint`` in
    :func:`trusted_checkpoint_loading`; nothing else is relaxed.
    """
    load = runner.load_checkpoint

    def load_checkpoint(*args, **kwargs):
        with trusted_checkpoint_loading():
            return load(*args, **kwargs)

    runner.load_checkpoint = load_checkpoint


# torch.compile (dynamo). torch 2.13's public API has ``torch.compile(...,
# recompile_limit=N)`` per call, but mmengine's runner makes that call
# itself; the process-wide limit, the compile counter and the fallback
# warning are dynamo internals (checked against torch 2.13). dynamo is
# imported on first use only: importing it costs seconds.
def dynamo_recompile_limit() -> int:
    """Compiled entries one code object (frame) may hold before dynamo
    stops compiling it and runs it eagerly
    (``torch._dynamo.config.recompile_limit``, ``cache_size_limit`` before
    torch 2.6; default 8)."""
    import torch._dynamo
    return torch._dynamo.config.recompile_limit


def set_dynamo_recompile_limit(limit: int) -> None:
    """Set :func:`dynamo_recompile_limit` (process-wide; read at each
    compilation, so it applies to functions compiled before too)."""
    import torch._dynamo
    torch._dynamo.config.recompile_limit = int(limit)


def dynamo_graph_count() -> int:
    """Graphs dynamo has compiled in this process so far (its
    ``counters['stats']['unique_graphs']``, which ``torch.compiler.reset``
    does not clear); differences of two calls count one stretch."""
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


class DynamoRecompileLimitWatch(logging.Handler):
    """Collect the functions dynamo stopped compiling (ran eagerly from
    then on) because they hit its recompile limit.

    dynamo reports this only as a warning of ``torch._dynamo.convert_frame``
    (``'torch._dynamo hit config.%s (%s)'``, then the function); the handler
    keeps ``"<limit name>: <function> (<file>:<line>)"`` per hit in
    :attr:`fallbacks`. Use as a context manager.
    """

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
