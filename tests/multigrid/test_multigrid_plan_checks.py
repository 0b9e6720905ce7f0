"""Recipe values a multigrid plan cannot honour give warnings or errors,
the same in the hook and in tools/analysis/multigrid_schedule.py."""
import json
import os
import os.path as osp
import subprocess
import sys
import warnings

import pytest
import torch.nn as nn
from mmengine.config import Config

import mmext  # noqa: F401
from mmext.multigrid import MultigridOptions, MultigridPlan
from mmext.multigrid.model_checks import check_run

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
I3D = osp.join(ROOT, 'configs', 'multigrid',
               'i3d_r50_multigrid_8xb8-32x2x1-100e_kinetics400-rgb.py')
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
PIPE = [
    dict(type='SampleFrames', clip_len=16, frame_interval=2, num_clips=1),
    dict(type='Resize', scale=(56, 56), keep_ratio=False),
]
STEP = dict(type='MultiStepLR', by_epoch=True, begin=0, end=4,
            milestones=[2], gamma=0.1)
I3D_MILESTONES = (
    "MultiStepLR milestones [40, 80] lie outside the recipe's 2 epochs, so "
    'they are not LR stages of the multigrid schedule (LR stages start at '
    '[0, 2]).')


def _messages(schedulers, samples_per_rank=None, **options):
    options.setdefault('long_cycle_factors', [(0.5, 0.5**0.5), (1, 1)])
    plan = MultigridPlan(PIPE, 4, 4, schedulers,
                         samples_per_rank=samples_per_rank,
                         options=MultigridOptions(**options))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        messages = check_run(plan)
    assert [str(w.message) for w in caught] == messages
    return messages


def _tool(config, *args):
    return subprocess.run(
        [sys.executable, 'tools/analysis/multigrid_schedule.py', config,
         *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=osp.dirname(TINY)))


def test_stock_i3d_recipe_shortened_warns_about_milestones():
    cfg = Config.fromfile(I3D)
    cfg.train_cfg.max_epochs = 2
    cfg.custom_hooks[0].long_cycle = False
    plan = MultigridPlan.from_config(cfg)
    with pytest.warns(UserWarning) as record:
        assert check_run(plan) == [I3D_MILESTONES]
    assert [str(w.message) for w in record] == [I3D_MILESTONES]
    assert plan.lr_steps == [0, 2] and plan.max_epochs == 3


def test_stock_i3d_recipe_shortened_error_names_the_milestones():
    cfg = Config.fromfile(I3D)
    cfg.train_cfg.max_epochs = 2
    with pytest.raises(ValueError) as info:
        MultigridPlan.from_config(cfg)
    assert str(info.value) == (
        'With epoch_factor=1.5 and 2 recipe epochs the multigrid schedule '
        'rounds the base-shape stages to 0 epochs, so the model would never '
        "train at the recipe's shape. Raise epoch_factor or "
        'train_cfg.max_epochs. Recipe values the schedule cannot honour: '
        + I3D_MILESTONES)


@pytest.mark.parametrize('scheduler, message', [
    (dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=5),
     "The LinearLR warm-up ends at recipe epoch 5, after the recipe's 4 "
     'epochs: it is cut at the end of the run and never reaches its final '
     'value. Shorten it (end) or raise train_cfg.max_epochs.'),
    (dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=3,
          convert_to_iter_based=True),
     'The LinearLR warm-up ends at recipe epoch 3, after the first LR stage '
     '[0, 2): the whole first long cycle trains in warm-up. Shorten the '
     'warm-up or check the MultiStepLR milestones.'),
    (dict(type='CosineAnnealingLR', by_epoch=True, begin=0, end=10,
          T_max=10),
     "CosineAnnealingLR ends at recipe epoch 10, after the recipe's 4 "
     'epochs: it is cut at the end of the run and never reaches its final '
     'value. Shorten it (end) or raise train_cfg.max_epochs.'),
    (dict(type='ExponentialLR', gamma=0.9, by_epoch=True, begin=4),
     "ExponentialLR begins at recipe epoch 4, not before the end of the "
     "recipe's 4 epochs, so it never acts. Move its begin or raise "
     'train_cfg.max_epochs.'),
    (dict(type='MultiStepLR', by_epoch=False, milestones=[30, 50]),
     'MultiStepLR with by_epoch=False: its iteration milestones [30, 50] do '
     'not make multigrid LR stages, so the long cycle runs once over the '
     'whole run (LR stages start at [0, 4]). Use an epoch-based MultiStepLR '
     "or the hook's lr_steps."),
])
def test_dropped_scheduler_values(scheduler, message):
    schedulers = [scheduler]
    if scheduler['type'] != 'MultiStepLR':
        schedulers.append(STEP)
    assert _messages(schedulers) == [message]


def test_honoured_schedules_give_no_warning():
    warmup = dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0,
                  end=1, convert_to_iter_based=True)
    momentum = dict(type='LinearParamScheduler', param_name='momentum',
                    start_factor=0.5, by_epoch=True, begin=0, end=9)
    assert _messages([warmup, STEP, momentum]) == []
    # The hook's lr_steps replace the recipe's milestones.
    assert _messages([dict(STEP, milestones=[40])], lr_steps=[0, 2]) == []


def test_iteration_bounds_need_the_epoch_length():
    warmup = dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                  end=500)
    # Unknown iterations per epoch: nothing can be said.
    assert _messages([warmup, STEP]) == []
    # 64 clips / batch 4 = 16 iterations per recipe epoch.
    assert _messages([warmup, STEP], samples_per_rank=64) == [
        "The LinearLR warm-up ends at recipe epoch 31.25, after the recipe's "
        '4 epochs: it is cut at the end of the run and never reaches its '
        'final value. Shorten it (end) or raise train_cfg.max_epochs.'
    ]


def test_model_check_names_unsplittable_bn_layers():
    model = nn.Module()
    model.backbone = nn.Sequential(nn.BatchNorm3d(2))
    model.cls_head = nn.Sequential(nn.BatchNorm1d(2))
    plan = MultigridPlan(PIPE, 8, 4, [STEP], options=MultigridOptions(
        bn_base_size=4, long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]))
    with pytest.raises(ValueError) as info:
        check_run(plan, model)
    assert str(info.value) == (
        'Sub-batch BN (bn_base_size=4) splits per-device batches of up to 32 '
        'clips into groups of 4, but cannot split these BN layers, which '
        'would normalise over the whole per-device batch: cls_head.0 '
        "(BatchNorm1d). Only layers of the kinds ['BatchNorm3d', "
        "'SyncBatchNorm', '_BatchNormXd'] (BN3d, SyncBN and SyncBN reverted "
        'without DDP) are split. Use one of those kinds for them, keep them '
        'in eval mode (norm_eval), or set bn_base_size=None to train every '
        'BN layer on the whole per-device batch.')
    # Long-cycle batches 8 x 4 = 32 at most: no splits, no error.
    check_run(MultigridPlan(PIPE, 8, 4, [STEP], options=MultigridOptions(
        bn_base_size=32, long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)])),
        model)


def test_tool_warns_like_the_plan():
    proc = _tool(I3D, '--json', '--no-model-check', '--cfg-options',
                 'train_cfg.max_epochs=2', 'custom_hooks.0.long_cycle=False')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)['warnings'] == [I3D_MILESTONES]


def test_tool_errors_exit_non_zero():
    proc = _tool(I3D, '--no-model-check', '--cfg-options',
                 'train_cfg.max_epochs=2')
    assert proc.returncode == 1
    assert proc.stderr.rstrip().endswith(
        'Recipe values the schedule cannot honour: ' + I3D_MILESTONES)
    # The model is built and checked as the hook does: T/4 = 4 < 8.
    proc = _tool(I3D, '--cfg-options',
                 'train_dataloader.dataset.pipeline.1.clip_len=16')
    assert proc.returncode == 1
    assert proc.stderr.rstrip().splitlines()[-1] == (
        'error: ResNet3d needs clip lengths T >= 8 (temporal strides of '
        'conv1, pool1 and pool2); the multigrid schedule uses T=[4]. Use '
        'larger t factors in long_cycle_factors or a longer '
        'SampleFrames.clip_len.')


@pytest.mark.usefixtures('repo_demo_data')
def test_hook_runs_the_same_checks_as_the_tool(tmp_path):
    from mmext.cli import build_runner, load_run_config
    option = 'param_scheduler.0.end=5'
    proc = _tool(TINY, '--json', '--dataset', '--cfg-options', option)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tool = json.loads(proc.stdout)['warnings']
    assert tool == [
        "The LinearLR warm-up ends at recipe epoch 5, after the recipe's 4 "
        'epochs: it is cut at the end of the run and never reaches its final '
        'value. Shorten it (end) or raise train_cfg.max_epochs.'
    ]
    os.chdir(ROOT)
    cfg = load_run_config(TINY, None, str(tmp_path))
    cfg.param_scheduler[0].end = 5
    runner = build_runner(cfg)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.param_schedulers = runner.build_param_scheduler(
        runner.param_schedulers)
    with pytest.warns(UserWarning) as record:
        runner.call_hook('before_run')
    assert [str(w.message) for w in record
            if 'LR' in str(w.message)] == tool


def test_iteration_based_config_named_by_the_plan():
    """The schedule tool's plan rejects what the hook rejects, by name."""
    cfg = Config(dict(
        custom_hooks=[dict(type='mmext.MultigridHook')],
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=100),
        train_dataloader=dict(batch_size=8, dataset=dict(pipeline=[])),
        param_scheduler=[]))
    with pytest.raises(ValueError, match='needs an epoch-based train loop'):
        MultigridPlan.from_config(cfg)
