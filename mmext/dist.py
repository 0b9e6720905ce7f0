"""Distributed set-up on CPU-only machines (gloo), and tear-down."""
import os
import subprocess
from typing import List

import torch
import torch.distributed as dist
from mmengine.config import Config

__all__ = [
    'LAUNCHERS', 'SYNC_BN_TYPES', 'sync_bn_paths', 'setup_cpu_distributed',
    'finish_distributed'
]

# ``--launcher`` values of the toolboxes' tools/train.py.
LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


def _slurm_env_to_torch_env(port: str) -> None:
    """Export torchrun's variables from Slurm's, as mmengine's slurm init.

    Raises:
        KeyError: If the Slurm variables are missing.
    """
    node_list = os.environ['SLURM_NODELIST']
    os.environ.setdefault('MASTER_PORT', port)
    os.environ.setdefault(
        'MASTER_ADDR',
        subprocess.getoutput(f'scontrol show hostname {node_list} | head -n1'))
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['RANK'] = os.environ['SLURM_PROCID']
    os.environ['LOCAL_RANK'] = os.environ['SLURM_LOCALID']


# Norm layer types that synchronise across processes (torch's, mmcv's).
SYNC_BN_TYPES = ('SyncBN', 'MMSyncBN', 'SyncBatchNorm')


def sync_bn_paths(cfg, prefix: str = 'model') -> List[str]:
    """Dotted paths of the ``type`` keys in a model config that build SyncBN.

    Args:
        cfg (dict | list): A model config (or part of one).
        prefix (str): Path of ``cfg`` itself.

    Returns:
        list[str]: e.g. ``['model.backbone.norm_cfg.type']``.
    """
    found = []
    if isinstance(cfg, dict):
        for key, value in cfg.items():
            if key == 'type' and value in SYNC_BN_TYPES:
                found.append(f'{prefix}.type')
            else:
                found += sync_bn_paths(value, f'{prefix}.{key}')
    elif isinstance(cfg, (list, tuple)):
        for i, value in enumerate(cfg):
            found += sync_bn_paths(value, f'{prefix}.{i}')
    return found


def setup_cpu_distributed(cfg: Config, launcher: str) -> None:
    """Initialise gloo distributed training when there is no CUDA device.

    mmengine's ``init_dist`` and ``Runner.wrap_model`` assume CUDA: this
    starts the process group first (the runner then skips ``init_dist``) and
    sets ``model_wrapper_cfg.device_ids=None``. Nothing with CUDA.

    Args:
        cfg (Config): The full config; ``model_wrapper_cfg`` is edited.
        launcher (str): ``'none'``, ``'pytorch'`` (torchrun), ``'slurm'``
            or ``'mpi'``.

    Raises:
        RuntimeError: For ``'mpi'`` without CUDA.
        ValueError: For a model with SyncBN layers (torch's SyncBatchNorm
            runs on CUDA only), naming their config keys.
    """
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher == 'mpi':
        raise RuntimeError(
            "--launcher mpi: mmengine's MPI set-up selects a CUDA device and "
            'there is none; on CPU use --launcher pytorch '
            '(tools/dist_train.sh) or slurm')
    sync = sync_bn_paths(cfg.get('model'))
    if sync:
        raise ValueError(
            f'SyncBN needs CUDA, and this {launcher} run is on CPU: '
            f'{", ".join(sync)}. Use BN on CPU, e.g. --cfg-options '
            f'{sync[0]}=BN.')
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


def finish_distributed() -> None:
    """Tear down the default process group after a completed run.

    Left to the interpreter's exit, gloo's threads can abort rank 0
    (``terminate called without an active exception``,
    pytorch/pytorch#179291); PyTorch's docs ("Shutdown") ask for this call.
    A barrier comes first, so call it only on success.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
