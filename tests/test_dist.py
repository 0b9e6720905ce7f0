"""mmext.dist: gloo set-up on CPU-only machines, process group tear-down."""
import os.path as osp

import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config

from mmext.dist import finish_distributed, setup_cpu_distributed
from bench_utils import run_processes


@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA present')
def test_mpi_needs_cuda():
    with pytest.raises(RuntimeError, match='--launcher mpi: .* on CPU use '
                       '--launcher pytorch'):
        setup_cpu_distributed(Config(dict(launcher='mpi')), 'mpi')


@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA present')
def test_cpu_launch_sets_up_gloo_ddp_without_device_ids(tmp_path):
    run_processes(_setup_and_report, 2, (str(tmp_path), ))
    assert [(tmp_path / f'rank{r}').read_text() for r in range(2)] == [
        'gloo None MMDistributedDataParallel'] * 2


@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA present')
def test_sync_bn_on_cpu_is_named_with_the_fix():
    cfg = Config(dict(model=dict(
        type='FasterRCNN', backbone=dict(norm_cfg=dict(type='BN')),
        roi_head=dict(bbox_head=[dict(norm_cfg=dict(type='SyncBN'))]))))
    with pytest.raises(ValueError, match=r'SyncBN needs CUDA.*'
                       r'model\.roi_head\.bbox_head\.0\.norm_cfg\.type\. '
                       r'Use BN on CPU, e\.g\. --cfg-options model\.roi_head'
                       r'\.bbox_head\.0\.norm_cfg\.type=BN'):
        setup_cpu_distributed(cfg, 'pytorch')
    assert not dist.is_initialized()


def _setup_and_report(rank, world_size, out_dir):
    cfg = Config(dict(launcher='pytorch'))
    setup_cpu_distributed(cfg, 'pytorch')
    with open(osp.join(out_dir, f'rank{rank}'), 'w') as f:
        f.write(f'{dist.get_backend()} {cfg.model_wrapper_cfg.device_ids} '
                f'{cfg.model_wrapper_cfg.type}')


def _finish_and_report(rank, world_size, out_dir):
    finish_distributed()
    with open(osp.join(out_dir, f'rank{rank}'), 'w') as f:
        f.write(str(dist.is_initialized()))


def test_finish_distributed_destroys_the_process_group(tmp_path):
    finish_distributed()  # no process group: nothing to do
    run_processes(_finish_and_report, 2, (str(tmp_path), ))
    assert [(tmp_path / f'rank{r}').read_text() for r in range(2)] == [
        'False', 'False'
    ]
