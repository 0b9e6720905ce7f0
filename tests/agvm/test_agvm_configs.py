"""Every AGVM config builds: model and optimizer wrapper on CPU."""
import glob
import os.path as osp

import pytest
import torch
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
# A stock AdamW recipe with AGVM swapped in: its own schedule, no clipping.
SEGFORMER = 'segformer_mit-b0_agvm_8xb2-160k_ade20k-512x512.py'


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
            'mask-rcnn_r50_fpn_align_agvm_32xb16-16e_coco.py',
            SEGFORMER} <= names


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


PAPER = [c for c in CONFIGS if (c.endswith('_coco.py')
                                 or c.endswith('ade20k-512x512.py'))
         and osp.basename(c) != SEGFORMER]


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


def _options(optimizer, model):
    """Parameter name -> (lr, weight_decay) of its param group."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g['lr'], g['weight_decay'])
            for g in optimizer.param_groups for p in g['params']}


def test_segformer_recipe_is_the_stock_adamw_recipe_with_agvm():
    """Every parameter keeps the stock recipe's lr and weight decay; AGVM
    measures the Adam-preconditioned gradient of backbone and head from
    100 iterations after the 1500-iteration warm-up."""
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'agvm', SEGFORMER))
    import mmseg
    stock = Config.fromfile(osp.join(
        osp.dirname(mmseg.__file__), '.mim', 'configs', 'segformer',
        'segformer_mit-b0_8xb2-160k_ade20k-512x512.py'))
    init_default_scope('mmseg')
    for c in (cfg, stock):
        cpu_norm(c.model)
        c.model.backbone.init_cfg = None
    # (Inherited with 'mmseg::', the schedulers carry _scope_='mmseg'.)
    assert [dict(s, _scope_='mmseg') for s in stock.param_scheduler] == (
        cfg.param_scheduler)
    assert cfg.param_scheduler[0].end == 1500
    assert cfg.train_dataloader.batch_size == 2
    model = MODELS.build(cfg.model)
    agvm = build_optim_wrapper(model, dict(cfg.optim_wrapper,
                                           accumulative_counts=2))
    plain = build_optim_wrapper(model, stock.optim_wrapper)
    assert type(agvm.optimizer) is type(plain.optimizer) is torch.optim.AdamW
    options = _options(agvm.optimizer, model)
    assert options == _options(plain.optimizer, model)
    assert options['decode_head.conv_seg.weight'] == pytest.approx(
        (6e-4, 0.01))  # lr x10
    assert options['backbone.layers.0.1.0.norm1.weight'] == (6e-5, 0.0)
    assert (agvm.statistic, agvm.module_names, agvm.schedule.start_iter) == (
        'adam', ['backbone', 'decode_head'], 1600)
    assert cfg.auto_scale_lr.base_batch_size == 16


def test_segformer_recipe_trains_on_camvid(tmp_path, shared_data):
    """A short run of the recipe on the CamVid subset (BN, no pretrained
    weights, 128 px crops, 2 x 2 images per step): AGVM re-estimates the
    AdamW statistic and keeps the head's x10 LR."""
    import json
    import sys

    from helpers import run_tool
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'agvm', SEGFORMER))
    camvid = Config.fromfile(osp.join(ROOT, 'configs', 'agvm',
                                      'fpn_r18_agvm_camvid-cpu.py'))
    for key in ('train_dataloader', 'val_dataloader', 'val_evaluator',
                'default_hooks', 'log_processor'):
        cfg[key] = camvid[key]
    cfg.test_dataloader = cfg.test_evaluator = cfg.test_cfg = None
    cfg.train_dataloader.update(num_workers=0, persistent_workers=False)
    cfg.val_dataloader.update(num_workers=0, persistent_workers=False)
    cfg.val_dataloader.dataset.indices = 3
    cpu_norm(cfg.model)
    cfg.model.data_preprocessor.size = (128, 128)
    cfg.model.backbone.init_cfg = None
    cfg.model.decode_head.update(num_classes=11, ignore_index=11)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=8,
                         val_interval=8)
    cfg.param_scheduler[0].end = 2
    cfg.param_scheduler[1].update(begin=2, end=8)
    cfg.optim_wrapper.update(accumulative_counts=2, start_iter=4,
                             update_interval=1)
    cfg.default_hooks.checkpoint.interval = 8
    cfg.default_hooks.logger.interval = 1
    config = tmp_path / 'segformer_camvid.py'
    cfg.dump(str(config))
    work_dir = tmp_path / 'work'
    run_tool([sys.executable, 'tools/train.py', str(config), '--work-dir',
              str(work_dir)])
    log = next(work_dir.glob('*/*.log')).read_text()
    assert "statistic 'adam'" in log
    records = [json.loads(line) for line in next(
        work_dir.glob('*/vis_data/scalars.json')).read_text().splitlines()]
    # Steps of 2 micro-batches; re-estimated at each from iteration 4 on.
    estimates = [r for r in records if 'agvm_d/decode_head' in r]
    assert [r['step'] for r in estimates] == [6, 8]
    assert all(0 <= r[f'agvm_d/{m}'] <= 2 for r in estimates
               for m in ('backbone', 'decode_head'))
    assert [r['mIoU'] for r in records if 'mIoU' in r] != []
    assert records[-2]['agvm_mu/decode_head'] != 1.0  # moved
    ckpt = torch.load(work_dir / 'iter_8.pth', map_location='cpu',
                      weights_only=False)
    lrs = {g['agvm_module']: g['lr']
           for g in ckpt['optimizer']['param_groups']}
    assert lrs['decode_head'] == pytest.approx(10 * lrs['backbone'])
