"""Every AGVM config builds: model and optimizer wrapper on CPU."""
import glob
import os.path as osp

import pytest
import torch.distributed as dist
from helpers import cpu_norm
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, init_default_scope

import mmext  # noqa: F401  (the ``mmext::`` prefix and registries)
from mmext.agvm import AGVMOptimWrapper

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = sorted(
    glob.glob(osp.join(ROOT, 'configs', 'agvm', '*.py')) +
    glob.glob(osp.join(ROOT, 'configs', 'demo', '*agvm*.py')))



def test_all_configs_found():
    names = {osp.basename(c) for c in CONFIGS}
    assert {'faster-rcnn_r50_fpn_agvm_16xb16-16e_coco.py',
            'faster-rcnn_r50_fpn_agvm_32xb16-16e_coco.py',
            'mask-rcnn_r50_fpn_agvm_32xb16-16e_coco.py',
            'retinanet_r50_fpn_agvm_64xb16-16e_coco.py',
            'fpn_r50_agvm_16xb8-20k_ade20k-512x512.py',
            'fpn_r18_agvm_camvid-cpu.py',
            'faster-rcnn_r50_fpn_agvm_coco128-cpu.py',
            'faster-rcnn_r18_fpn_agvm_demo-det.py',
            'faster-rcnn_r50_fpn_align_agvm_16xb16-16e_coco.py',
            'faster-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py',
            'mask-rcnn_r50_fpn_agvm_16xb16-16e_coco.py',
            'mask-rcnn_r50_fpn_align_agvm_16xb16-16e_coco.py',
            'mask-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py'} <= names


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_no_helper_keys_in_the_final_config(path):
    assert [k for k in Config.fromfile(path) if k.startswith('_')] == []


# The released recipes (Sense-X/AGVM configs/*/agvm/*_bs{256,512}.py): lr,
# warm-up end, AGVM start, clipping window, per batch and model.
RELEASED = {
    'faster-rcnn_r50_fpn_align_agvm_16xb16-16e_coco.py':
    (0.16 * 2**0.5, 920, 1020, (820, 1020)),
    'faster-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py':
    (0.38, 460, 560, (360, 560)),
    'mask-rcnn_r50_fpn_align_agvm_16xb16-16e_coco.py':
    (0.16 * 2**0.5, 920, 1020, (820, 1020)),
    'mask-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py':
    (0.32, 460, 560, (360, 560)),
}


@pytest.mark.parametrize('name', sorted(RELEASED))
def test_released_recipes(name):
    for variant in (name, name.replace('_align', '')):
        cfg = Config.fromfile(osp.join(ROOT, 'configs', 'agvm', variant))
        wrapper = cfg.optim_wrapper
        assert (wrapper.optimizer.lr, cfg.param_scheduler[0].end,
                wrapper.start_iter, wrapper.clip_grad_window) == (
                    RELEASED[name])
        assert cfg.auto_scale_lr.base_batch_size == (
            256 if '16xb16' in name else 512)


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_configs_turn_the_nan_guard_on(path):
    hooks = Config.fromfile(path).get('custom_hooks', [])
    assert dict(type='mmext.NaNGuardHook') in hooks


PAPER = [c for c in CONFIGS if c.endswith('_coco.py')
         or c.endswith('ade20k-512x512.py')]


@pytest.mark.parametrize('path', PAPER, ids=osp.basename)
def test_paper_recipes_warm_up_exponentially_and_start_after_it(path):
    """mmcv's warmup='exp' from 0.001 as released; AGVM starts after the
    warm-up (100 iterations later) and clips in the 200 before."""
    from mmext.agvm.schedule import AGVMSchedule
    from mmext.scheduler_checks import warmup_ends
    cfg = Config.fromfile(path)
    warmup = cfg.param_scheduler[0]
    assert (warmup.type, warmup.start_factor, warmup.by_epoch) == (
        'mmext.ExpWarmupLR', 0.001, False)
    wrapper = cfg.optim_wrapper
    assert wrapper.start_iter == warmup.end + 100
    assert wrapper.clip_grad_window == (warmup.end - 100, warmup.end + 100)
    assert AGVMSchedule(start_iter=wrapper.start_iter).inside_warmup(
        warmup_ends(cfg.param_scheduler, 1000)) == []


@pytest.mark.parametrize('name', [
    osp.basename(c) for c in CONFIGS if 'mask-rcnn' in c])
def test_mask_rcnn_recipe_modulates_box_and_mask_heads_apart(name):
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'agvm', name))
    assert cfg.optim_wrapper.module_names == [
        'backbone', 'neck', 'rpn_head', 'roi_head.bbox_head',
        'roi_head.mask_head']


@pytest.mark.parametrize('arch', ['faster-rcnn', 'mask-rcnn'])
def test_align_variants_change_what_the_reference_model_does(arch):
    """The reference's *_align model against mmdet 3.x's stock one, and a
    training forward of it (softmax RPN) on one small image."""
    import numpy as np
    import torch
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    name = f'{arch}_r50_fpn_%sagvm_32xb16-16e_coco.py'
    stock, align = (Config.fromfile(osp.join(ROOT, 'configs', 'agvm',
                                             name % v)).model
                    for v in ('', 'align_'))
    assert stock.rpn_head.loss_cls.use_sigmoid is True
    assert align.rpn_head.loss_cls.use_sigmoid is False
    assert (align.rpn_head.loss_bbox.type,
            align.rpn_head.loss_bbox.beta) == ('SmoothL1Loss', 1 / 9)
    assert (align.roi_head.bbox_head.loss_bbox.type,
            align.roi_head.bbox_head.loss_bbox.beta) == ('SmoothL1Loss', 1.0)
    assert align.train_cfg.rpn_proposal.max_per_img == 2000
    assert align.test_cfg.rcnn.score_thr == 0.0
    box_ratio = align.roi_head.bbox_roi_extractor.roi_layer.sampling_ratio
    assert box_ratio == (2 if arch == 'faster-rcnn' else 0)
    if arch == 'mask-rcnn':
        assert align.roi_head.mask_roi_extractor.roi_layer.sampling_ratio == 2
    init_default_scope('mmdet')
    cpu_norm(align)
    align.backbone.update(depth=18, init_cfg=None)
    align.neck.in_channels = [64, 128, 256, 512]
    model = MODELS.build(align)
    sample = DetDataSample(metainfo=dict(img_shape=(64, 64),
                                         pad_shape=(64, 64)))
    sample.gt_instances = InstanceData(
        bboxes=torch.tensor([[8., 8., 40., 48.]]),
        labels=torch.tensor([3]),
        masks=BitmapMasks(np.ones((1, 64, 64), dtype=np.uint8), 64, 64))
    losses = model.loss(torch.randn(1, 3, 64, 64), [sample])
    assert {'loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'loss_bbox'} <= set(
        losses)
    assert all(torch.isfinite(sum(v) if isinstance(v, list) else v)
               for v in losses.values())


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_config_builds_model_and_wrapper(path):
    assert not dist.is_initialized()
    cfg = Config.fromfile(path)
    scope = cfg.get('default_scope', 'mmdet')
    init_default_scope(scope)
    model_cfg = cfg.model
    cpu_norm(model_cfg)
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
