"""Shared steps of ``tools/train.py`` and ``tools/test.py``."""
import argparse
import os
import os.path as osp
from typing import Optional

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .dist_utils import setup_cpu_distributed

__all__ = ['add_run_args', 'load_run_config', 'build_runner', 'enable_amp']

# Optimizer wrappers and their mixed-precision counterparts (``--amp``).
AMP_WRAPPERS = {
    'OptimWrapper': 'AmpOptimWrapper',
    'mmext.AGVMOptimWrapper': 'mmext.AGVMAmpOptimWrapper',
}


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
        names.
    """
    setup_cpu_distributed(cfg, cfg.launcher)
    if 'runner_type' in cfg:
        return RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)


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
