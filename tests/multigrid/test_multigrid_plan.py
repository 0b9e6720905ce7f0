"""mmext.multigrid.plan and .report: the hook's options (the schedule ones
in MultigridOptions), the recipe's LR stages and schedulers on the
multigrid axis, what the run cannot honour, MultigridPlan from configs, its
counts and its report."""
import dataclasses
import inspect
import re
import warnings

import pytest
from mg_helpers import I3D, I3D_MILESTONES, MAX_EPOCHS, PIPE, STEP, STEPS
from mmengine.config import Config

import mmext  # noqa: F401
from mmext.multigrid import (MultigridHook, MultigridOptions, MultigridPlan,
                             build_multigrid_schedule)
from mmext.multigrid.checks import check_run
from mmext.multigrid.plan import (build_hook, find_lr_steps,
                                  remap_param_schedulers)
from mmext.multigrid.report import describe, summary
from mmext.multigrid.schedule import (DEFAULT_LONG_CYCLE_FACTORS,
                                      map_recipe_epoch)


# ---------------------------------------------------------------- options
def test_hook_shows_its_options_and_their_defaults():
    """Every option is a keyword of MultigridHook.__init__; the schedule
    ones have MultigridOptions' defaults, the runtime ones the hook's."""
    params = inspect.signature(MultigridHook).parameters
    schedule = {f.name: f.default for f in dataclasses.fields(
        MultigridOptions)}
    assert len(params) == 15 and set(schedule) < set(params)
    assert {n: params[n].default for n in schedule} == schedule
    assert schedule['long_cycle_factors'] == DEFAULT_LONG_CYCLE_FACTORS
    hook = MultigridHook()
    assert hook.options == MultigridOptions()
    assert (hook.precise_bn_iters, hook.skip_broken_clips,
            hook.keep_cpu_memory) == (200, False, True)
    assert (hook.watch.threshold, hook.watch.iters) == (0.2, 10)
    for name in params:
        assert f'    {name} (' in MultigridHook.__doc__
    assert MultigridHook.__doc__.count('Defaults to') == 15


def test_misspelt_option_is_a_type_error():
    with pytest.raises(TypeError, match='short_cycles'):
        MultigridHook(short_cycles=False)
    # Through the config, as the runner builds it.
    cfg = Config(dict(custom_hooks=[dict(type='mmext.MultigridHook',
                                         short_cycles=False)]))
    with pytest.raises(TypeError, match='short_cycles'):
        build_hook(cfg)


def test_hook_config_keys_are_not_options():
    cfg = Config(dict(custom_hooks=[
        dict(type='mmext.NaNGuardHook'),
        dict(type='mmext.MultigridHook', priority='HIGHEST',
             _scope_='mmaction', short_cycle=False)]))
    assert build_hook(cfg).options == MultigridOptions(short_cycle=False)
    with pytest.raises(ValueError, match='no mmext.MultigridHook'):
        build_hook(Config(dict(custom_hooks=[])))


def test_sequences_are_tuples_and_the_schedule_gets_its_fields():
    options = MultigridOptions(long_cycle_factors=[[0.5, 1], [1, 1]],
                               short_cycle_factors=[0.5], lr_steps=[0, 3])
    assert options.long_cycle_factors == ((0.5, 1), (1, 1))
    assert options.short_cycle_factors == (0.5, )
    assert options.lr_steps == (0, 3)
    assert options.schedule_kwargs() == dict(
        long_cycle=True, short_cycle=True, epoch_factor=1.5,
        long_cycle_factors=((0.5, 1), (1, 1)), short_cycle_factors=(0.5, ),
        short_cycle_mode='absolute', batch_policy='paper')
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.short_cycle = False


SCHEDULE_VALUES = [
    ('long_cycle', 1, 'a bool'),
    ('short_cycle', 'no', 'a bool'),
    ('epoch_factor', '1.5', 'a number > 0'),
    ('epoch_factor', 0, 'a number > 0'),
    ('long_cycle_factors', [0.25, 0.5, 1], '(t, s) pairs in (0, 1]'),
    ('long_cycle_factors', [(0.5, 1, 1), (1, 1)], '(t, s) pairs'),
    ('long_cycle_factors', [], '(t, s) pairs'),
    ('long_cycle_factors', [(2, 1), (1, 1)], '(t, s) pairs in (0, 1]'),
    ('short_cycle_factors', 0.5, 'factors in (0, 1)'),
    ('short_cycle_factors', [], 'factors in (0, 1)'),
    ('short_cycle_factors', [1.5], 'factors in (0, 1)'),
    ('short_cycle_mode', None, "'absolute' or 'relative'"),
    ('short_cycle_mode', 'paper', "'absolute' or 'relative'"),
    ('bn_base_size', '8', 'None or an int >= 0'),
    ('bn_base_size', 4.0, 'None or an int >= 0'),
    ('bn_base_size', -4, 'None or an int >= 0'),
    ('lr_steps', '0, 10', 'None or increasing epochs from 0'),
    ('lr_steps', [3], 'None or increasing epochs from 0'),
    ('lr_steps', [0, 5, 5], 'None or increasing epochs from 0'),
    ('lr_rule', 'square', "'linear' or 'sqrt'"),
]
# An option of a cycle that is off, a value the check would refuse, the
# setting that makes it do nothing.
UNUSED_VALUES = [
    (dict(short_cycle=False), 'short_cycle_factors', [1.5],
     'short_cycle=False'),
    (dict(short_cycle=False), 'short_cycle_mode', 'paper',
     'short_cycle=False'),
    (dict(long_cycle=False), 'long_cycle_factors', [(2, 1), (1, 1)],
     'long_cycle=False'),
    (dict(long_cycle=False), 'lr_rule', 'square', 'long_cycle=False'),
    (dict(batch_policy='constant'), 'lr_rule', 'sqrt',
     "batch_policy='constant'"),
]


@pytest.mark.parametrize('setting, name, value, cause', UNUSED_VALUES)
def test_an_option_that_does_nothing_warns_unchecked(setting, name, value,
                                                     cause):
    """Not checked, one line naming it, its value and the setting; the
    default is kept (the schedule and the resume record never see it)."""
    with pytest.warns(UserWarning) as caught:
        options = MultigridOptions(**setting, **{name: value})
    assert [str(w.message) for w in caught] == [
        f'{name}={value!r} has no effect with {cause}; remove it.']
    default = {f.name: f.default for f in dataclasses.fields(
        MultigridOptions)}[name]
    assert getattr(options, name) == default
    assert options.unused_options()[name] == cause


def test_the_defaults_of_an_unused_option_do_not_warn():
    """Set to its default (lists as a config gives them), an unused option
    is silent; unused_options lists every option that does nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        short = MultigridOptions(short_cycle=False,
                                 short_cycle_factors=[0.5, 0.5**0.5],
                                 short_cycle_mode='absolute')
        long = MultigridOptions(long_cycle=False, lr_rule='linear',
                                long_cycle_factors=[
                                    list(f)
                                    for f in DEFAULT_LONG_CYCLE_FACTORS])
    assert short.unused_options() == dict(
        short_cycle_factors='short_cycle=False',
        short_cycle_mode='short_cycle=False')
    assert long.unused_options() == dict(long_cycle_factors='long_cycle=False',
                                         lr_rule='long_cycle=False')
    assert MultigridOptions().unused_options() == {}


def test_a_2d_recipe_without_the_long_cycle_keeps_its_default_factors():
    """T=1 (a 2D model): the default long-cycle factors (t < 1) were refused
    with long_cycle=False, where they do nothing."""
    with pytest.raises(ValueError, match='2D models need t = 1'):
        build_multigrid_schedule(1, 112, [0, 4], 4)
    stages = build_multigrid_schedule(1, 112, [0, 4], 4, long_cycle=False)
    assert [[x.crop_size for x in s.short_cycle] for s in stages] == [
        [56, 79, 112]]


RUNTIME_VALUES = [
    ('skip_broken_clips', 'yes', 'a bool'),
    ('skip_broken_clips', None, 'a bool'),
    ('keep_cpu_memory', 1, 'a bool'),
    ('precise_bn_iters', True, 'an int >= 0'),
    ('precise_bn_iters', -1, 'an int >= 0'),
    ('data_wait_threshold', 'high', 'None or a share in [0, 1]'),
    ('data_wait_threshold', 1.5, 'None or a share in [0, 1]'),
    ('data_wait_threshold', -0.1, 'None or a share in [0, 1]'),
    ('data_wait_iters', 0, 'an int >= 1'),
    ('data_wait_iters', 2.5, 'an int >= 1'),
]


@pytest.mark.parametrize('name, value, expected',
                         SCHEDULE_VALUES + RUNTIME_VALUES)
def test_each_option_is_checked_once_where_it_enters(name, value, expected):
    """The message names the option, what it must be and the value; the
    hook refuses at construction, the schedule options through
    MultigridOptions (which the plan and the tool build too)."""
    builds = [MultigridHook]
    if (name, value, expected) in SCHEDULE_VALUES:
        builds.append(MultigridOptions)
    for build in builds:
        with pytest.raises(ValueError) as err:
            build(**{name: value})
        message = str(err.value)
        assert message.startswith(f'{name} must be {expected}')
        assert message.endswith(f', got {value!r}')


def test_nothing_to_cycle():
    with pytest.raises(ValueError, match='both False: nothing to cycle'):
        MultigridOptions(long_cycle=False, short_cycle=False)


@pytest.mark.parametrize('factors', [
    [(1, 1), (0.5, 1), (0.25, 0.5**0.5)],  # reversed
    [(0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1)],  # no base shape last
    [(0.5, 1), (0.5, 0.5**0.5), (1, 1)],  # finer before coarser
])
def test_long_cycle_factors_run_coarse_to_fine_to_the_base_shape(factors):
    """Raising epoch_factor or max_epochs would not fix these: the message
    says what does."""
    with pytest.raises(ValueError, match='coarse to fine, ending'):
        MultigridOptions(long_cycle_factors=factors)


# ------------------------------------------------ the recipe's schedulers
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


def test_milestones_are_lr_stages_in_order():
    """mmengine counts MultiStepLR milestones in any order."""
    assert find_lr_steps([dict(type='MultiStepLR', milestones=[80, 40],
                               gamma=0.5)], 100) == ([0, 40, 80], 0.5)


def _messages(schedulers, samples_per_rank=None, world_size=1, **options):
    options.setdefault('long_cycle_factors', [(0.5, 0.5**0.5), (1, 1)])
    plan = MultigridPlan(PIPE, 4, 4, schedulers,
                         samples_per_rank=samples_per_rank,
                         world_size=world_size,
                         options=MultigridOptions(**options))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        messages = check_run(plan).warnings
    assert [str(w.message) for w in caught] == messages
    return messages


def test_stock_i3d_recipe_shortened_warns_about_milestones():
    cfg = Config.fromfile(I3D)
    cfg.train_cfg.max_epochs = 2
    cfg.custom_hooks[0].long_cycle = False
    plan = MultigridPlan.from_config(cfg)
    with pytest.warns(UserWarning) as record:
        [message] = check_run(plan).warnings
    assert I3D_MILESTONES in message
    assert [str(w.message) for w in record] == [message]
    assert plan.lr_steps == [0, 2] and plan.max_epochs == 3


@pytest.mark.parametrize('scheduler, fragments', [
    (dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=5),
     ['LinearLR', 'recipe epoch 5', '4 recipe epochs']),
    (dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=3,
          convert_to_iter_based=True),
     ['LinearLR (warm-up) ends at recipe epoch 3', 'LR stage [0, 2)']),
    (dict(type='CosineAnnealingLR', by_epoch=True, begin=0, end=10,
          T_max=10),
     ['CosineAnnealingLR', 'recipe epoch 10', '4 recipe epochs']),
    (dict(type='ExponentialLR', gamma=0.9, by_epoch=True, begin=4),
     ['ExponentialLR', 'recipe epoch 4']),
    (dict(type='MultiStepLR', by_epoch=False, milestones=[30, 50]),
     ['MultiStepLR with by_epoch=False', 'lr_steps']),
    (dict(STEP, milestones=[0, 2]),
     ['milestones [0] make no', 'start at [0, 2]']),
])
def test_dropped_scheduler_values(scheduler, fragments):
    schedulers = [scheduler]
    if scheduler['type'] != 'MultiStepLR':
        schedulers.append(STEP)
    [message] = _messages(schedulers)
    assert all(f in message for f in fragments), message


def test_dropped_shapes_of_every_lr_stage_are_named():
    """4 recipe epochs, LR steps at 1 and 2 (base T=32, S=224): LR stage 0
    keeps (8, 158) and (16, 224), LR stage 1 keeps (8, 158) and (16, 158);
    the fine-tune's first half, at LR stage 1 and the base shape, does not
    hide that stage's own lost base shape."""
    pipe = [dict(type='SampleFrames', clip_len=32, frame_interval=2),
            dict(type='Resize', scale=(224, 224), keep_ratio=False)]
    plan = MultigridPlan(pipe, 8, 4, [dict(STEP, end=4, milestones=[1, 2])])
    assert [(s.lr_stage, s.shape.clip_len, s.shape.crop_size, s.fine_tune)
            for s in plan.stages] == [
        (0, 8, 158, False), (0, 16, 224, False), (1, 8, 158, False),
        (1, 16, 158, False), (1, 32, 224, True), (2, 32, 224, True)]
    with pytest.warns(UserWarning):
        [message] = check_run(plan).warnings
    assert message.startswith('Shapes (B, T, S) trained for 0 epochs: ')
    assert 'LR stage 0 [(32, 16, 158), (8, 32, 224)], LR stage 1 ' in (
        message)
    assert 'LR stage 1 [(16, 16, 224), (8, 32, 224)]; ' in message


def test_a_dropped_fine_tune_is_named_with_the_other_stages():
    """epoch_factor 1 with LR steps at 1 and 3 of 4 recipe epochs: LR stage
    2 (the fine-tune at the last LR) rounds to 0 epochs, so the recipe's
    last LR is never trained; stages 0 and 1 lose shapes too."""
    pipe = [dict(type='SampleFrames', clip_len=32, frame_interval=2),
            dict(type='Resize', scale=(224, 224), keep_ratio=False)]
    plan = MultigridPlan(pipe, 8, 4, [dict(STEP, end=4, milestones=[1, 3])],
                         options=MultigridOptions(epoch_factor=1.0))
    assert {s.lr_stage for s in plan.stages} == {0, 1}
    with pytest.warns(UserWarning):
        [message] = check_run(plan).warnings
    assert 'LR stage 0 [(32, 16, 158), (16, 16, 224), (8, 32, 224)], ' in (
        message)
    assert ', LR stage 1 [(16, 16, 224)], LR stage 2 [(8, 32, 224)]' in (
        message)


@pytest.mark.parametrize('samples, world_size, unused', [
    (64, 1, None), (40, 1, 'another batch_size.'),
    (40, 2, 'fewer processes.')])
def test_clips_left_unused_by_incomplete_batches_are_said(samples, world_size,
                                                          unused):
    """Stage 0 cycles batches 32, 16, 16, the base-shape stages 16, 8, 4:
    64 clips leave 0 and 8 (12.5 %) unused per epoch; 40 leave 8 (20 %)
    and 12 (30 %)."""
    messages = [m for m in _messages([STEP], samples_per_rank=samples,
                                     world_size=world_size)
                if m.startswith('Batches ')]
    if unused is None:
        assert messages == []
        return
    [message] = messages
    assert message.startswith('Batches [16, 8, 4] leave 12 of 40 clips ')
    assert 'per process unused per epoch in epochs 3-4; ' in message
    assert message.endswith(unused)


@pytest.mark.parametrize('options, samples, expected, fix', [
    # Stage 0 cycles batches 32, 16, 16: 32 of 120 clips (27 %) leave
    # 120 // 64 * 3 + 2 = 5 steps per epoch, against 120 / 4 = 30.
    (dict(), 120, ['Batch 32 is 27% of 120 clips per process: ',
                   '5 steps per epoch in epochs 0-3 (recipe 30); '],
     'use short_cycle=False, more'),
    (dict(), 128, None, None),  # 32 is 25 %: no warning
    # The long cycle alone: batch 16 of 60 clips (27 %), 3 steps per epoch.
    (dict(short_cycle=False), 60, ['Batch 16 is 27% of 60 clips',
                                   '3 steps per epoch'],
     '); use more data or'),
    (dict(batch_policy='sqrt'), 40, ['Batch 12 is 30% of 40 clips'],
     'use short_cycle=False, more'),  # round(sqrt 8) x 4 = 12
])
def test_few_optimizer_steps_per_epoch_are_said(options, samples, expected,
                                               fix):
    """Base (B, T, S) = (4, 16, 56); the first long-cycle shape has the
    paper's batch factor 4, its short cycle 8. A batch above 25 % of the
    clips per process warns with the steps per epoch and the fix the MSR
    evidence supports (the long cycle alone)."""
    messages = [m for m in _messages([STEP], samples_per_rank=samples,
                                     bn_base_size=None, **options)
                if m.startswith('Batch ')]
    if expected is None:
        assert messages == []
        return
    [message] = messages
    assert all(fragment in message for fragment in expected)
    assert fix in message and message.endswith('a smaller batch_size.')


def test_extreme_short_cycle_factors_are_named():
    """Base (B, T, S) = (4, 16, 56); the first long-cycle shape (T/4, S/sqrt2)
    has batch 32, and crops of 0.1 and 0.2 of S make 50x and 12.5x more:
    1600 and 400 clips per process, more than the 64 there are."""
    with pytest.raises(ValueError, match=re.escape(
            '[0.1, 0.2] make a batch of 1600 > 64 clips per process')):
        MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank=64,
                      options=MultigridOptions(short_cycle_factors=[0.1, 0.2],
                                               bn_base_size=None))
    with pytest.raises(ValueError, match=re.escape(
            '64 clips per process < batch 512 (epochs 0-3)')):
        MultigridPlan(PIPE, 64, 4, [STEP], samples_per_rank=64,
                      options=MultigridOptions(short_cycle=False))


@pytest.mark.parametrize('world_size, fixes', [
    (1, 'use more data, a smaller batch_size or short_cycle=False.'),
    (2, 'use more data, fewer processes, a smaller batch_size or '),
])
def test_too_small_a_subset_is_told_the_fixes_that_shrink_no_batch(
        world_size, fixes):
    """20 clips per process, base batch 4: stage 0's short cycle makes
    batches 32, 16, 16. The default short-cycle factors are not the cause;
    factors closer to 1 only trade the 32 for smaller batches."""
    with pytest.raises(ValueError) as error:
        MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank=20,
                      world_size=world_size, options=MultigridOptions(
                          long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]))
    assert str(error.value).startswith(
        '20 clips per process < batch 32 (epochs 0-3); ')
    assert fixes in str(error.value)


@pytest.mark.parametrize('factors, warned', [
    ([0.5], 'short_cycle_factors=[0.5] cycle 2 crop sizes'),
    ([0.5, 0.5**0.5], None)])
def test_a_short_cycle_of_other_than_3_sizes_warns(factors, warned):
    plan = MultigridPlan(PIPE, 4, 4, [STEP], options=MultigridOptions(
        short_cycle_factors=factors))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        check_run(plan)
    found = [str(w.message) for w in caught if 'crop sizes' in str(
        w.message)]
    assert found == ([] if warned is None else [found[0]])
    assert warned is None or found[0].startswith(warned)


def test_honoured_schedules_give_no_warning():
    warmup = dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0,
                  end=1, convert_to_iter_based=True)
    momentum = dict(type='LinearParamScheduler', param_name='momentum',
                    start_factor=0.5, by_epoch=True, begin=0, end=9)
    assert _messages([warmup, STEP, momentum]) == []
    # The hook's lr_steps replace the recipe's milestones as LR stages.
    assert _messages([dict(STEP, milestones=[3])], lr_steps=[0, 2]) == []


def test_iteration_bounds_need_the_epoch_length():
    warmup = dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                  end=500)
    # Unknown iterations per epoch: nothing can be said.
    assert _messages([warmup, STEP]) == []
    # 64 clips / batch 4 = 16 iterations per recipe epoch, 64 in the recipe.
    message = _messages([warmup, STEP], samples_per_rank=64)[0]
    assert 'recipe iteration 500' in message
    assert '64 recipe iterations' in message


# ---------------------------------------------------------------- the plan
def test_stock_i3d_recipe_shortened_error_names_the_milestones():
    cfg = Config.fromfile(I3D)
    cfg.train_cfg.max_epochs = 2
    with pytest.raises(ValueError) as info:
        MultigridPlan.from_config(cfg)
    message = str(info.value)
    assert message.startswith('epoch_factor=1.5 with 2 recipe epochs leaves')
    assert 'cannot honour: ' in message and I3D_MILESTONES in message


def test_iteration_based_config_named_by_the_plan():
    """The schedule tool's plan rejects what the hook rejects, by name."""
    cfg = Config(dict(
        custom_hooks=[dict(type='mmext.MultigridHook')],
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=100),
        train_dataloader=dict(batch_size=8, dataset=dict(pipeline=[])),
        param_scheduler=[]))
    with pytest.raises(ValueError, match='needs an epoch-based loop'):
        MultigridPlan.from_config(cfg)


def _tiny_plan(**options):
    """Base (B, T, S) = (4, 16, 56), 4 recipe epochs, LR step at 2, long
    cycle (T/2, S/sqrt2) then base, 64 clips per process."""
    options = dict(dict(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                        bn_base_size=4), **options)
    return MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank=64,
                         options=MultigridOptions(**options))


def test_shape_iterations_by_hand():
    """Stage 0 (epochs 0-3) cycles batches 32, 16, 16 = 64 clips: one
    iteration of each shape per epoch. The base-shape stages cycle 16, 8, 4:
    two cycles (56 clips) per epoch, the 8 left over make no batch."""
    plan = _tiny_plan()
    rows = [(x.stage.start_epoch, x.batch_size, x.shape.clip_len,
             x.shape.crop_size, x.iters) for x in plan.shape_iterations()]
    assert rows == [
        (0, 32, 8, 28, 3), (0, 16, 8, 40, 3), (0, 16, 8, 40, 3),
        (3, 16, 16, 28, 2), (3, 8, 16, 40, 2), (3, 4, 16, 56, 2),
        (4, 16, 16, 28, 2), (4, 8, 16, 40, 2), (4, 4, 16, 56, 2),
        (5, 16, 16, 28, 2), (5, 8, 16, 40, 2), (5, 4, 16, 56, 2)]
    assert sum(r[-1] for r in rows) == plan.max_iters == 27


def test_long_cycle_shapes_end_where_the_next_stage_changes_shape():
    plan = _tiny_plan()
    # Stages [3, 4) and [4, 5) are followed by the same shapes (LR drops).
    assert [e for e in range(plan.max_epochs) if plan.is_shape_end(e)] == [
        2, 5]


def test_recipe_epochs_on_the_multigrid_axis():
    """LR stage [0, 2) of the recipe is multigrid [0, 5), [2, 4) is [5, 6):
    recipe epochs 1, 2, 3, 4 end at 2.5, 5, 5.5, 6, rounded half up."""
    plan = _tiny_plan()
    assert [plan.recipe_epoch_to_multigrid(r) for r in range(5)] == [
        0, 2.5, 5, 5.5, 6]
    assert plan.multigrid_epochs([1, 2, 3, 4]) == [3, 5, 6]
    assert plan.multigrid_epochs([4, 2]) == [5, 6]
    assert plan.multigrid_epochs([]) == []


@pytest.mark.parametrize('edit, message', [
    (dict(train_cfg=dict(type='IterBasedTrainLoop', max_iters=10)),
     "needs an epoch-based loop, got train_cfg="),
    (dict(train_dataloader=dict(dataset=dict(
        type='RepeatDataset', times=2, dataset=dict(type='VideoDataset')))),
     'train_dataloader.dataset, got a RepeatDataset'),
])
def test_for_config_names_what_the_plan_needs(edit, message):
    cfg = Config.fromfile(I3D)
    if 'train_cfg' in edit:
        cfg.train_cfg = edit['train_cfg']
    else:
        cfg.train_dataloader.dataset = edit['train_dataloader']['dataset']
    with pytest.raises(ValueError, match=message):
        MultigridPlan.from_config(cfg)


def test_sub_bn_splits_count_the_clips_of_repeated_videos():
    """RepeatAugDataset: 1 video per index, 4 clips each. Short cycle only
    (batches of 4, 2, 1 videos), bn_base_size=4: 16, 8 and 4 clips, so 4, 2
    and 1 splits; counted per video none would split and sub-batch BN would
    never be enabled."""
    options = MultigridOptions(long_cycle=False, bn_base_size=4)
    per_video = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                              options=options)
    plan = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                         options=options, clips_per_sample=4)
    assert [x.batch_size for x in plan.shape_iterations()][:3] == [4, 2, 1]
    assert [x.sub_bn_splits for x in plan.shape_iterations()][:3] == [4, 2, 1]
    assert [x.sub_bn_splits for x in per_video.shape_iterations()][:3] == [
        1, 1, 1]
    assert max(plan.sub_bn_splits(s) for s in plan.stages) == 4
    assert plan.sub_bn_base_size == 4 and per_video.sub_bn_base_size is None
    with pytest.raises(ValueError, match='split the batch of 6 clips'):
        MultigridPlan(PIPE, 1, 4, [STEP], options=options, clips_per_sample=3)


def test_sub_bn_check_of_repeated_clips():
    # Base batch 2 videos, bn_base_size 4: every batch of videos splits,
    # and x2 clips, but not x3 (6 clips at the base shape, last stage).
    options = MultigridOptions(bn_base_size=4)
    for clips in (1, 2):
        MultigridPlan(PIPE, 2, 4, [STEP], options=options,
                      clips_per_sample=clips)
    with pytest.raises(ValueError, match=re.escape(
            'batch of 6 clips (epochs 4-5); use bn_base_size=3.')):
        MultigridPlan(PIPE, 2, 4, [STEP], options=options,
                      clips_per_sample=3)
    # The size it names splits every batch of the run.
    MultigridPlan(PIPE, 2, 4, [STEP], options=MultigridOptions(bn_base_size=3),
                  clips_per_sample=3)


@pytest.mark.parametrize('dataset, clips', [
    (dict(type='RepeatAugDataset', num_repeats=2), 2),
    (dict(type='mmaction.RepeatAugDataset', num_repeats=3), 3),
    (dict(type='RepeatAugDataset'), 4),  # mmaction2's default num_repeats
    (dict(type='VideoDataset'), 1),
    (dict(type='NoSuchDataset'), 1),
])
def test_plan_from_config_reads_the_clips_per_video(dataset, clips):
    cfg = Config(dict(
        custom_hooks=[dict(type='mmext.MultigridHook', bn_base_size=1)],
        train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=4),
        train_dataloader=dict(batch_size=1,
                              dataset=dict(dataset, pipeline=PIPE)),
        param_scheduler=[STEP]))
    assert MultigridPlan.from_config(cfg).clips_per_sample == clips


# ---------------------------------------------------------------- report
def _plan(samples_per_rank=64):
    return MultigridPlan(
        PIPE, 4, 4, [STEP], samples_per_rank=samples_per_rank, world_size=2,
        options=MultigridOptions(long_cycle_factors=[(0.5, 0.5**0.5),
                                                     (1, 1)]))


def test_summary_by_hand():
    """6 epochs: 3 of 3 iterations, 3 of 6 (see test_shape_iterations_by_
    hand); the recipe trains 4 x ceil(64 / 4) = 64 iterations."""
    info = summary(_plan(), warnings=['w'])
    assert info['base'] == dict(batch_size=4, effective_batch_size=8,
                                clip_len=16, crop_size=56)
    assert (info['recipe_epochs'], info['epochs'], info['iters'],
            info['recipe_iters']) == (4, 6, 27, 64)
    assert info['iteration_saving'] == pytest.approx(64 / 27)
    assert info['warnings'] == ['w']
    stages = [(s['start_epoch'], s['end_epoch'], s['batch_size'],
               s['effective_batch_size'], s['short_cycle_batch_sizes'],
               s['iters'], s['lr_factor']) for s in info['stages']]
    assert stages == [(0, 3, 16, 32, [32, 16, 16], 9, 4),
                      (3, 4, 4, 8, [16, 8, 4], 6, 1),
                      (4, 5, 4, 8, [16, 8, 4], 6, 1),
                      (5, 6, 4, 8, [16, 8, 4], 6, pytest.approx(0.1))]


def test_table_rows_and_totals():
    lines = describe(_plan()).splitlines()
    assert lines[0].startswith('base (B, T, S) = (4, 16, 56), 4 recipe '
                               'epochs; ')
    assert 'world size 2 x accumulative_counts 1; ' in lines[0]
    assert '; rel. LR = batch factor x LR decay ' in lines[0]
    assert "(lr_rule='linear'); batch_policy='paper'; FLOPs = " in lines[0]
    # Stage 0's FLOPs, B T S^2 per clip over the recipe's 4 x 16 x 56^2:
    # 3 epochs x (32 x 8 x 28^2 + 2 x 16 x 8 x 40^2) / 64 -> 14.3 %.
    assert lines[2].split() == ['0', '16', '32', '8', '40', '0', '3', '9',
                                '9', '14.3%', '4', '[(32,', '28),', '(16,',
                                '40),', '(16,', '40)]']
    total = lines[-1]
    assert total.startswith('total: 6 epochs, 27 iterations (exact, 64 clips ')
    assert 'vs 64 of the recipe -> 2.37x fewer iterations; ' in total
    assert 'FLOPs x0.466 of the recipe (2.15x fewer FLOPs, ' in total
    assert total.endswith('estimate; wall time: docs/en/benchmarks.md)')


def test_a_constant_batch_reports_more_iterations():
    """batch_policy='constant': 6 epochs of 64 / 4 = 16 iterations, 96
    against the recipe's 4 x 16 = 64: 1.50x more, not '0.67x fewer'."""
    plan = MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank=64,
                         options=MultigridOptions(
                             long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                             batch_policy='constant', bn_base_size=None))
    total = describe(plan).splitlines()[-1]
    assert '96 iterations (exact' in total and '-> 1.50x more iterations' in (
        total)


def test_sqrt_lr_rule_in_the_plan_and_its_report():
    """The coarse shape's batch factor 4 scales the LR by 2, not 4."""
    plan = MultigridPlan(PIPE, 4, 4, [STEP], options=MultigridOptions(
        long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)], lr_rule='sqrt'))
    assert [plan.lr_scale(s) for s in plan.stages] == [2, 1, 1, 1]
    assert [s.lr_factor for s in plan.stages] == [
        2, 1, 1, pytest.approx(0.1)]
    assert summary(plan)['lr_rule'] == 'sqrt'
    assert "rel. LR = sqrt(batch factor) x LR decay (lr_rule='sqrt')" in (
        describe(plan).splitlines()[0])


def test_flops_counted_on_the_model_replace_the_estimate():
    """Per clip F(8, 28) = 1, F(8, 40) = F(16, 28) = 2, F(16, 40) = 4,
    F(16, 56) = 10 GFLOPs: epochs 0-3 cost 3 x (8 x 1 + 4 x 2 + 4 x 2) / 16
    = 4.5, epochs 3-6 3 x (4 x 2 + 2 x 4 + 1 x 10) / 7 = 78/7, the recipe
    4 x 10: ratio (4.5 + 78/7) / 40 = 219/560."""
    plan = _plan()
    estimate = plan.flops_ratio()
    assert not summary(plan)['flops_counted']
    assert summary(plan)['clip_gflops'] is None
    plan.clip_flops = {(16, 56): 10e9, (8, 28): 1e9, (8, 40): 2e9,
                       (16, 28): 2e9, (16, 40): 4e9}
    info = summary(plan)
    assert info['flops_counted']
    assert info['flops_ratio'] == pytest.approx(219 / 560)
    assert info['flop_saving'] == pytest.approx(560 / 219)
    assert [tuple(g.values()) for g in info['clip_gflops']] == [
        (8, 28, 1.0), (8, 40, 2.0), (16, 28, 2.0), (16, 40, 4.0),
        (16, 56, 10.0)]
    assert 'x0.391 of the recipe (2.56x fewer FLOPs, counted on the' in (
        describe(plan).splitlines()[-1])
    # A shape of the run not counted: the B T S^2 estimate.
    del plan.clip_flops[8, 28]
    assert not plan.flops_counted and plan.flops_ratio() == estimate


def test_estimates_without_the_dataset_size():
    plan = _plan(samples_per_rank=None)
    info = summary(plan)
    assert info['iters'] is None and not info['exact']
    # In recipe iterations per epoch: 3 epochs x 3 shapes / batch factors
    # (8 + 4 + 4).
    assert info['stages'][0]['estimated_iters'] == pytest.approx(3 * 3 / 16)
    assert describe(plan).splitlines()[-1].startswith(
        'total: 6 epochs, 1.8 x recipe iters/epoch vs 4 -> ')


@pytest.mark.parametrize('count', [
    lambda plan: plan.max_iters,
    lambda plan: plan.iter_at(1.5),
    lambda plan: plan.iters_per_epoch(plan.stages[0]),
    lambda plan: plan.shape_iterations(),
    lambda plan: plan.scheduler_cfgs(),
], ids=['max_iters', 'iter_at', 'iters_per_epoch', 'shape_iterations',
        'scheduler_cfgs'])
def test_exact_counts_of_an_estimated_plan_name_samples_per_rank(count):
    plan = _plan(samples_per_rank=None)
    assert not plan.exact
    with pytest.raises(ValueError,
                       match=r'samples_per_rank \(None\): pass len\(sampler\)'):
        count(plan)


def test_report_counts_videos_and_their_clips():
    options = MultigridOptions(long_cycle=False, bn_base_size=4)
    plan = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                         options=options, clips_per_sample=4)
    assert '(exact, 8 videos x 4 clips per process)' in describe(plan)
    plain = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                          options=options)
    assert '(exact, 8 clips per process)' in describe(plain)
