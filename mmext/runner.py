"""Runner plumbing shared by the tools, the multigrid hook and AGVM's wrapper.

The steps of ``tools/train.py``/``tools/test.py`` (config, distributed set-up
on CPU-only machines, runner, ``--amp``) and the per-step LR scaling that
both methods apply on top of the param schedulers.
"""
import argparse
import os
import os.path as osp
import subprocess
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .compat import trust_runner_checkpoints

__all__ = [
    'add_run_args', 'load_run_config', 'build_runner', 'enable_amp',
    'setup_cpu_distributed', 'scale_lrs', 'scaled_lrs'
]

# Optimizer wrappers and their mixed-precision counterparts (``--amp``).
AMP_WRAPPERS = {
    'OptimWrapper': 'AmpOptimWrapper',
    'mmext.AGVMOptimWrapper': 'mmext.AGVMAmpOptimWrapper',
}


def _slurm_env_to_torch_env(port: str) -> None:
    """Export torchrun's variables from Slurm's, as mmengine's slurm init does.

    Raises:
        KeyError: If the Slurm variables (``SLURM_PROCID`` ...) are missing.
    """
    node_list = os.environ['SLURM_NODELIST']
    os.environ.setdefault('MASTER_PORT', port)
    os.environ.setdefault(
        'MASTER_ADDR',
        subprocess.getoutput(f'scontrol show hostname {node_list} | head -n1'))
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['RANK'] = os.environ['SLURM_PROCID']
    os.environ['LOCAL_RANK'] = os.environ['SLURM_LOCALID']


def setup_cpu_distributed(cfg: Config, launcher: str) -> None:
    """Initialise gloo distributed training when there is no CUDA device.

    mmengine's ``init_dist`` and ``Runner.wrap_model`` call
    ``torch.cuda.set_device`` and pass ``device_ids=[LOCAL_RANK]``, which fail
    without CUDA. On a CPU-only machine this initialises the default process
    group with the gloo backend before the Runner (which then skips its own
    ``init_dist``) and makes ``MMDistributedDataParallel`` run without device
    ids. With CUDA available it does nothing, so NCCL/GPU runs are unchanged.

    Args:
        cfg (Config): The full config; ``model_wrapper_cfg`` is edited in place.
        launcher (str): ``'none'``, ``'pytorch'`` (torchrun) or ``'slurm'``.
    """
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher == 'slurm':
        _slurm_env_to_torch_env(str(cfg.get('env_cfg', {}).get(
            'dist_cfg', {}).get('port', 29500)))
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    # The same defaults as Runner.wrap_model when no wrapper is configured.
    wrapper_cfg = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper_cfg['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper_cfg


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """Add the options ``tools/train.py`` and ``tools/test.py`` share.

    ``--work-dir``, ``--cfg-options``, ``--launcher`` and ``--local-rank``
    (which ``torch.distributed.launch`` passes; torchrun sets ``LOCAL_RANK``
    instead), as in the toolboxes' tools.
    """
    parser.add_argument(
        '--work-dir', help='the dir to save logs, checkpoints and metrics')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings of the config, key=value pairs in xxx=yyy '
        'format, e.g. train_dataloader.batch_size=4')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch', 'slurm'], default='none',
        help='job launcher')
    parser.add_argument(
        '--local_rank', '--local-rank', type=int, default=0,
        action=_ExportLocalRank)


class _ExportLocalRank(argparse.Action):
    """Export ``--local-rank`` as ``LOCAL_RANK`` unless torchrun set it."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        os.environ.setdefault('LOCAL_RANK', str(values))


def load_run_config(config: str,
                    cfg_options: Optional[dict] = None,
                    work_dir: Optional[str] = None,
                    launcher: str = 'none') -> Config:
    """Read a config the way the toolboxes' ``tools/train.py`` does.

    Args:
        config (str): Path of the config file.
        cfg_options (dict, optional): ``--cfg-options`` overrides.
        work_dir (str, optional): ``--work-dir``; default
            ``./work_dirs/<config name>`` unless the config sets one.
        launcher (str): ``'none'``, ``'pytorch'`` or ``'slurm'``.

    Returns:
        Config: The merged config, with ``launcher`` and ``work_dir`` set.
    """
    cfg = Config.fromfile(config)
    cfg.launcher = launcher
    if cfg_options is not None:
        cfg.merge_from_dict(cfg_options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(config))[0])
    return cfg


def build_runner(cfg: Config) -> Runner:
    """Set up distributed training for ``cfg.launcher`` and build the runner.

    Args:
        cfg (Config): A config from :func:`load_run_config`.

    Returns:
        Runner: ``Runner.from_cfg(cfg)``, or the ``runner_type`` the config
        names, whose own checkpoint loads (``--resume``, ``load_from``) are
        trusted (:func:`mmext.compat.trust_runner_checkpoints`).
    """
    setup_cpu_distributed(cfg, cfg.launcher)
    if 'runner_type' in cfg:
        runner = RUNNERS.build(cfg)
    else:
        runner = Runner.from_cfg(cfg)
    trust_runner_checkpoints(runner)
    return runner


def enable_amp(cfg: Config) -> None:
    """Switch the config's optimizer wrapper to its mixed-precision variant.

    Args:
        cfg (Config): Edited in place (``optim_wrapper.type``, ``loss_scale``).

    Raises:
        RuntimeError: Without CUDA (mmengine's ``AmpOptimWrapper`` asserts it).
        ValueError: If the configured wrapper has no known AMP variant.
    """
    if not torch.cuda.is_available():
        raise RuntimeError('--amp needs a CUDA device; none is available. '
                           'Train without --amp on CPU.')
    wrapper_type = cfg.optim_wrapper.get('type', 'OptimWrapper')
    if wrapper_type in AMP_WRAPPERS.values():
        return
    if wrapper_type not in AMP_WRAPPERS:
        raise ValueError(f'--amp: no mixed-precision variant is known for '
                         f'optim_wrapper.type={wrapper_type!r}; expected one '
                         f'of {sorted(AMP_WRAPPERS)}.')
    cfg.optim_wrapper.type = AMP_WRAPPERS[wrapper_type]
    cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')


def scale_lrs(param_groups: Sequence[dict],
              factors: Sequence[float]) -> Callable[[], None]:
    """Multiply each param group's ``lr`` by its factor, for one step.

    Multigrid (batch factor of the long-cycle shape) and AGVM (modulation
    factor of the group's module) change the LR of one optimizer step on top
    of the recipe's schedule. Restoring it right after the step keeps param
    schedulers and the logged ``lr`` on the recipe's values.

    Args:
        param_groups (Sequence[dict]): The optimizer's param groups
            (``optimizer.param_groups``, not the wrapper's, which may hold a
            fake extra group).
        factors (Sequence[float]): One factor per group.

    Returns:
        callable: Restores the LRs as they were before the call.

    Raises:
        ValueError: If the lengths differ.
    """
    if len(param_groups) != len(factors):
        raise ValueError(f'{len(factors)} LR factors for '
                         f'{len(param_groups)} param groups')
    saved: List[float] = [group['lr'] for group in param_groups]
    for group, factor in zip(param_groups, factors):
        group['lr'] = group['lr'] * factor

    def restore() -> None:
        for group, lr in zip(param_groups, saved):
            group['lr'] = lr

    return restore


@contextmanager
def scaled_lrs(param_groups: Sequence[dict],
               factors: Sequence[float]) -> Iterator[None]:
    """Context manager form of :func:`scale_lrs` (restores on exceptions)."""
    restore = scale_lrs(param_groups, factors)
    try:
        yield
    finally:
        restore()
