"""The MSR Action3D recipe (configs/multigrid/*msr-action3d.py): its multigrid
config is the plain recipe plus the hook, and every planned grid shape crops
the same part of the raw 320x240 frame (the field of view), as the hook
rescales the train pipeline (``resize_pipeline``)."""
import copy
import os.path as osp
import random
import warnings

import numpy as np
import pytest
from mg_helpers import ROOT
from mmaction.registry import TRANSFORMS
from mmengine.config import Config
from mmengine.registry import DefaultScope

import mmext  # noqa: F401
from mmext.multigrid import MultigridPlan
from mmext.multigrid.data import resize_pipeline
from mmext.multigrid.plan import build_hook

PLAIN = osp.join(ROOT, 'configs', 'multigrid',
                 'recognizer3d_r18_adamw_msr-action3d.py')
MULTIGRID = osp.join(ROOT, 'configs', 'multigrid',
                     'recognizer3d_r18_adamw_multigrid_msr-action3d.py')
SPATIAL = ('Resize', 'CenterCrop', 'MultiScaleCrop')


def field_of_view(pipeline, steps=None, seed=0):
    """``(x, y, w, h)`` of the raw 320x240 frame (fractions) that the
    pipeline's first ``steps`` spatial transforms keep (mmaction2's
    ``crop_quadruple``), and the frame's width after them (pixels)."""
    results = dict(imgs=[np.zeros((240, 320, 3), np.uint8)],
                   img_shape=(240, 320), original_shape=(240, 320),
                   modality='RGB')
    random.seed(seed)  # MultiScaleCrop's choice of size and offset
    # mmaction2's Resize, whichever scope an earlier test left as default.
    with DefaultScope.overwrite_default_scope('mmaction'):
        for t in [t for t in pipeline if t['type'] in SPATIAL][:steps]:
            results = TRANSFORMS.build(copy.deepcopy(t))(results)
    quadruple = results.get('crop_quadruple', np.array([0, 0, 1, 1]))
    return quadruple.tolist(), results['img_shape'][1]


def test_multigrid_config_is_the_recipe_plus_the_hook():
    plain, multigrid = Config.fromfile(PLAIN), Config.fromfile(MULTIGRID)
    hooks = multigrid.pop('custom_hooks')
    assert [h['type'] for h in hooks] == ['mmext.MultigridHook']
    assert 'custom_hooks' not in plain
    assert multigrid.to_dict() == plain.to_dict()


def test_the_config_sets_no_option_that_does_nothing():
    """Its hook builds without a warning; the short-cycle options it set
    with short_cycle=False until issue 44 would warn."""
    cfg = Config.fromfile(MULTIGRID)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        build_hook(cfg)
    cfg.custom_hooks[0].update(short_cycle_factors=[0.6, 0.5**0.5],
                               short_cycle_mode='absolute')
    with pytest.warns(UserWarning) as caught:
        build_hook(cfg)
    [message] = [str(w.message) for w in caught]  # the default: silent
    assert message.startswith(f'short_cycle_factors={[0.6, 0.5**0.5]} has')
    assert message.endswith(' with short_cycle=False; remove it.')


def test_multigrid_arm_scales_adamw_lr_by_the_square_root():
    plan = MultigridPlan.from_config(Config.fromfile(MULTIGRID))
    # Long cycle 8B, 4B, 2B, B: AdamW's LR x sqrt(8), sqrt(4), sqrt(2), 1.
    assert [plan.lr_scale(s) for s in plan.stages[:4]] == pytest.approx(
        [8**0.5, 2.0, 2**0.5, 1.0])


def _grid_shapes(cfg):
    plan = MultigridPlan.from_config(cfg)
    return sorted({(x.clip_len, x.crop_size) for s in plan.stages
                   for x in s.short_cycle})


def test_the_config_trains_the_long_cycle_alone():
    """The time-to-accuracy run's best arm: the long cycle at the paper's
    batches (64, 32, 16, 8), no short cycle."""
    plan = MultigridPlan.from_config(Config.fromfile(MULTIGRID))
    assert [(plan.batch_sizes(s), s.shape.clip_len, s.shape.crop_size)
            for s in plan.stages[:4]] == [([64], 4, 45), ([32], 8, 45),
                                          ([16], 8, 64), ([8], 16, 64)]


def test_every_grid_shape_sees_the_central_square_of_the_frame():
    cfg = Config.fromfile(MULTIGRID)
    # Its crops too, as the benchmark's arms with the short cycle train them
    # (.dev_scripts/benchmark/multigrid_accuracy.py).
    cfg.custom_hooks[0].update(short_cycle=True,
                               short_cycle_factors=[0.6, 0.5**0.5])
    pipeline = cfg.train_dataloader.dataset.pipeline
    shapes = _grid_shapes(cfg)
    # The paper's long cycle (T/4 .. T, S/sqrt2 .. S) and the short cycle's
    # 0.6 and 1/sqrt2 of the base 64 px crop.
    assert shapes == [(4, 38), (4, 45), (8, 38), (8, 45), (8, 64), (16, 38),
                      (16, 45), (16, 64)]
    base, _ = field_of_view(pipeline)
    for t, s in shapes:
        scaled = resize_pipeline(pipeline, t, s)
        # Resize to a short side and CenterCrop of that side: the central
        # 240x240 square of the raw frame, to a pixel of the resized frame.
        centre, side = field_of_view(scaled, steps=2)
        assert centre == pytest.approx((40 / 320, 0, 240 / 320, 1),
                                       abs=1 / side)
        # The multi-scale crop (same random draw) takes the same part of
        # that square: its size to a pixel and a half of the square's side,
        # its offset to 4 pixels (MultiScaleCrop's offset grid floors
        # (side - crop) // 4).
        crop, _ = field_of_view(scaled)
        assert crop[2:] == pytest.approx(base[2:], abs=1.5 / side)
        assert crop[:2] == pytest.approx(base[:2], abs=4 / side)


def test_a_crop_of_the_raw_frame_keeps_its_field_of_view():
    """The pilot's pipeline (CenterCrop 240 of the raw frame, then a resize
    to 72): the 240 stands before the first resize and keeps its size, so
    every grid shape sees the central 240 of the frame's 320."""
    cfg = Config.fromfile(MULTIGRID)
    pilot = [dict(type='UniformSample', clip_len=16, num_clips=1),
             dict(type='CenterCrop', crop_size=240),
             dict(type='Resize', scale=(72, 72), keep_ratio=False),
             *cfg.train_dataloader.dataset.pipeline[5:]]
    assert field_of_view(pilot, steps=2)[0][2] == pytest.approx(0.75)
    scaled = resize_pipeline(pilot, 8, 45)
    assert scaled[1]['crop_size'] == 240 and scaled[2]['scale'] == (51, 51)
    assert field_of_view(scaled, steps=2)[0][2] == pytest.approx(0.75)
