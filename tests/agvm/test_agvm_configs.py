"""Every AGVM config builds: model and optimizer wrapper on CPU."""
import glob
import os.path as osp

import pytest
import torch.distributed as dist
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, init_default_scope

import mmext  # noqa: F401  (the ``mmext::`` prefix and registries)
from mmext.agvm import AGVMOptimWrapper

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = sorted(
    glob.glob(osp.join(ROOT, 'configs', 'agvm', '*.py')) +
    glob.glob(osp.join(ROOT, 'configs', 'demo', '*agvm*.py')))


def _cpu_norm(cfg):
    """SyncBN cannot build its process group on CPU without dist."""
    if isinstance(cfg, dict):
        if cfg.get('type') == 'SyncBN':
            cfg['type'] = 'BN'
        for value in cfg.values():
            _cpu_norm(value)
    elif isinstance(cfg, list):
        for value in cfg:
            _cpu_norm(value)


def test_all_configs_found():
    names = {osp.basename(c) for c in CONFIGS}
    assert {'faster-rcnn_r50_fpn_agvm_16xb16-16e_coco.py',
            'faster-rcnn_r50_fpn_agvm_32xb16-16e_coco.py',
            'mask-rcnn_r50_fpn_agvm_32xb16-16e_coco.py',
            'retinanet_r50_fpn_agvm_64xb16-16e_coco.py',
            'fpn_r50_agvm_16xb8-20k_ade20k-512x512.py',
            'fpn_r18_agvm_camvid-cpu.py',
            'faster-rcnn_r50_fpn_agvm_coco128-cpu.py',
            'faster-rcnn_r18_fpn_agvm_demo-det.py'} <= names


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_config_builds_model_and_wrapper(path):
    assert not dist.is_initialized()
    cfg = Config.fromfile(path)
    scope = cfg.get('default_scope', 'mmdet')
    init_default_scope(scope)
    model_cfg = cfg.model
    _cpu_norm(model_cfg)
    model_cfg.get('backbone', {}).update(init_cfg=None)
    model = MODELS.build(model_cfg)
    optim_cfg = cfg.optim_wrapper
    # The paper recipes run on many GPUs (halves = ranks); on one CPU
    # process the halves need accumulation.
    optim_cfg.setdefault('accumulative_counts', 2)
    wrapper = build_optim_wrapper(model, optim_cfg)
    assert isinstance(wrapper, AGVMOptimWrapper)
    assert wrapper.module_names == list(cfg.optim_wrapper.module_names)
    assert wrapper.layout.numel == sum(
        p.numel() for p in model.parameters() if p.requires_grad)
