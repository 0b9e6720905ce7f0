"""mmext.multigrid.lr: the recipe's LR stages and schedulers on the multigrid
axis, and what of them a multigrid run cannot honour."""
import warnings

import pytest
from mg_helpers import I3D, I3D_MILESTONES, MAX_EPOCHS, PIPE, STEP, STEPS
from mmengine.config import Config

import mmext  # noqa: F401
from mmext.multigrid import (MultigridOptions, MultigridPlan,
                             build_multigrid_schedule, map_recipe_epoch)
from mmext.multigrid.lr import find_lr_steps, remap_param_schedulers
from mmext.multigrid.model_checks import check_run


def test_remap_schedulers():
    cfgs = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0,
             end=34, convert_to_iter_based=True),
        dict(type='MultiStepLR', by_epoch=True, begin=0, end=239,
             milestones=[94, 154, 196], gamma=0.1),
        dict(type='CosineAnnealingLR', by_epoch=True, begin=0, T_max=239,
             end=239)
    ]
    stages = build_multigrid_schedule(32, 224, STEPS, MAX_EPOCHS)
    out = remap_param_schedulers(
        cfgs, lambda e: map_recipe_epoch(stages, STEPS, MAX_EPOCHS, e),
        lambda e: int(round(e * 10)), base_epoch_len=10)
    assert out[0]['by_epoch'] is False and 'convert_to_iter_based' not in \
        out[0]
    assert (out[0]['begin'], out[0]['end']) == (0, 571)  # 57.1 epochs
    assert out[1]['milestones'] == [158, 259, 343] and out[1]['end'] == 358
    assert out[2]['T_max'] == 358
    assert cfgs[0]['end'] == 34  # input untouched


def test_step_schedule_without_milestones_is_one_long_cycle():
    steps, gamma = find_lr_steps(
        [dict(type='MultiStepLR', by_epoch=True, milestones=[8])], 4)
    assert (steps, gamma) == ([0, 4], None)
    stages = build_multigrid_schedule(16, 56, steps, 4, gamma=gamma)
    assert [s.lr_stage for s in stages] == [0] * len(stages)
    assert stages[-1].end_epoch == 6 and stages[-1].lr_factor == 1












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


def test_stock_i3d_recipe_shortened_warns_about_milestones():
    cfg = Config.fromfile(I3D)
    cfg.train_cfg.max_epochs = 2
    cfg.custom_hooks[0].long_cycle = False
    plan = MultigridPlan.from_config(cfg)
    with pytest.warns(UserWarning) as record:
        assert check_run(plan) == [I3D_MILESTONES]
    assert [str(w.message) for w in record] == [I3D_MILESTONES]
    assert plan.lr_steps == [0, 2] and plan.max_epochs == 3


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
