"""mmext.scheduler_checks: what of a param_scheduler a run cannot honour
(on the run's axis or a recipe's), resumed and rescaled schedules."""
import pytest

from mmext.scheduler_checks import (rescale_iterations, rescale_schedulers,
                                    resumed_batch_mismatch, schedule_ratio,
                                    scheduler_configs, scheduler_states,
                                    unused_scheduler_values, warmup_ends,
                                    warmup_images)


def test_scheduler_configs_of_every_form():
    a, b = dict(type='LinearLR'), dict(type='MultiStepLR')
    assert scheduler_configs(a) == [a]
    assert scheduler_configs([a, b]) == [a, b]
    assert scheduler_configs(dict(gen=[a], disc=b)) == [a, b]
    assert scheduler_configs(None) == []


def test_stock_i3d_schedule_on_a_short_run():
    """The I3D recipe's MultiStepLR (end 100, milestones [40, 80]) with
    max_epochs=2, and a 500-iteration warm-up in a 40-iteration run."""
    schedulers = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
             end=500),
        dict(type='MultiStepLR', begin=0, end=100, by_epoch=True,
             milestones=[1, 40, 80], gamma=0.1),
        dict(type='CosineAnnealingLR', begin=5, by_epoch=True),
    ]
    assert unused_scheduler_values(schedulers, 2, 40) == [
        'param_scheduler LinearLR ends at iteration 500, after the end of '
        'training (40 iterations): it is cut short (the warm-up never '
        'reaches its target LR). Shorten it or train longer.',
        'param_scheduler MultiStepLR milestones [40, 80] lie at or after the '
        'end of training (2 epochs): those LR steps never happen. Remove '
        'them or train longer.',
        'param_scheduler CosineAnnealingLR begins at epoch 5, not before the '
        'end of training (2 epochs): it never applies. Move its begin or '
        'remove it.',
    ]
    assert unused_scheduler_values(schedulers[1:2], 100, 4000) == []


def test_the_same_rules_on_another_axis():
    """A hook that moves the schedulers onto its own axis checks the
    recipe's on the recipe's axis; iteration bounds only where its
    iterations are known."""
    schedulers = [
        dict(type='LinearLR', by_epoch=False, end=500),
        dict(type='MultiStepLR', by_epoch=True, milestones=[1, 40]),
    ]
    assert unused_scheduler_values(schedulers, 2, None, axis='recipe') == [
        'param_scheduler MultiStepLR milestones [40] lie at or after the end '
        'of training (2 recipe epochs): those LR steps never happen. Remove '
        'them or train longer.']
    assert unused_scheduler_values(schedulers[:1], 2, 64, axis='recipe') == [
        'param_scheduler LinearLR ends at recipe iteration 500, after the end '
        'of training (64 recipe iterations): it is cut short (the warm-up '
        'never reaches its target LR). Shorten it or train longer.']


def test_scheduler_states_of_both_checkpoint_forms():
    a, b = dict(last_step=3, by_epoch=False), dict(last_step=1)
    assert scheduler_states([a, b]) == [a, b]
    assert scheduler_states(dict(gen=[a], disc=[b])) == [a, b]
    assert scheduler_states([]) == []


def test_resumed_batch_mismatch_names_the_iteration_based_schedulers():
    states = [dict(by_epoch=False, begin=0, end=40),
              dict(by_epoch=True, begin=0, end=100),
              dict(by_epoch=False, begin=40, end=400)]
    names = ['LinearLR', 'MultiStepLR', 'CosineAnnealingLR']
    message = resumed_batch_mismatch({'': 8}, {'': 16}, states, names,
                                     'epoch_3.pth')
    assert message.startswith(
        'epoch_3.pth was trained with effective batch 8 (loader batch x '
        'world size x accumulative_counts), this run has 16: its '
        'iteration-based param schedulers keep the bounds computed for that '
        'batch (LinearLR iterations [0, 40), CosineAnnealingLR iterations '
        '[40, 400)), so they end elsewhere')
    # Two optimizers; names that do not line up are replaced by indices.
    two = resumed_batch_mismatch({'gen': 8, 'disc': 8},
                                 {'gen': 16, 'disc': 8}, states[:1], names)
    assert 'effective batch gen: 8, disc: 8' in two
    assert 'this run has gen: 16, disc: 8' in two
    assert 'param_scheduler 0 iterations [0, 40)' in two
    # Nothing to say: equal or unknown batches, epoch-based schedulers only.
    assert resumed_batch_mismatch({'': 8}, {'': 8}, states, names) is None
    assert resumed_batch_mismatch(None, {'': 8}, states, names) is None
    assert resumed_batch_mismatch({'': 8}, {'': 16}, states[1:2]) is None


def test_a_cosine_longer_than_the_run_is_not_called_a_warm_up():
    assert unused_scheduler_values(
        [dict(type='CosineAnnealingLR', by_epoch=True, begin=0, end=10,
              T_max=10)], 4, 40) == [
        'param_scheduler CosineAnnealingLR ends at epoch 10, after the end '
        'of training (4 epochs): it is cut short (it never reaches its '
        'final value). Shorten it or train longer.']


def test_warmup_ends_in_iterations():
    """The LR-raising schedulers only, counted in iterations; a LinearLR
    that decays, a ConstantLR at factor 1 and a step schedule are none."""
    schedulers = [
        dict(type='mmext.ExpWarmupLR', by_epoch=False, begin=0, end=460),
        dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=1,
             end=2),
        dict(type='ConstantLR', by_epoch=False, end=30),
        dict(type='LinearLR', start_factor=1.0, end_factor=0.0,
             by_epoch=False, end=1000),
        dict(type='ConstantLR', factor=1.0, by_epoch=False, end=50),
        dict(type='LinearLR', start_factor=0.1, by_epoch=False),
        dict(type='MultiStepLR', by_epoch=True, milestones=[12, 14]),
    ]
    assert warmup_ends(schedulers, epoch_length=100) == [
        ('mmext.ExpWarmupLR', 0, 460), ('LinearLR', 100, 200),
        ('ConstantLR', 0, 30)]


def test_schedule_ratio_is_images_per_iteration_over_the_recipes():
    # 64 GPUs x 4 images against mmdet's 16: r = 16.
    assert schedule_ratio(4, 64, 16) == 16
    # The run's own accumulation does not count: its iterations hold 128
    # images against a recipe written for 16 per iteration.
    assert schedule_ratio(4, 32, 16) == 8
    # A recipe written with accumulation: 16 images per step in 2
    # micro-batches, 8 per iteration.
    assert schedule_ratio(4, 32, 16, base_accumulative_counts=2) == 16
    with pytest.raises(ValueError, match=r"base_batch_size='16': expected "
                       r'an integer >= 1, e.g. base_batch_size=16'):
        schedule_ratio(4, 1, '16')


def test_released_512_recipe_keeps_its_warmup_images_with_accumulation():
    """AGVM's released batch-512 recipe (exponential warm-up over 460
    iterations of 512 images), trained in one process with loader batch 16
    and accumulative_counts=2 as docs/en/agvm.md tells one-process users:
    the warm-up keeps its 235,520 images (a default of the run's K halved
    them to 117,760)."""
    recipe = [dict(type='mmext.ExpWarmupLR', by_epoch=False, begin=0,
                   end=460)]
    ratio = schedule_ratio(16, 1, 512)
    scaled, _ = rescale_schedulers(recipe, ratio)
    assert scaled[0]['end'] * 16 == 460 * 512 == 235520
    assert warmup_images(recipe, scaled, 512, 16) == [
        'warm-up mmext.ExpWarmupLR: 460 iterations x 512 = 235520 images in '
        'the recipe, 14720 x 16 = 235520 images in this run']


def test_rescaled_mmdet_1x_schedule_as_detectron2():
    """mmdet's 1x (500-iteration linear warm-up, steps at epochs 8 and 11)
    and an iteration-based poly schedule, at 16x the batch: iteration counts
    / 16, rounded (detectron2: int(round(x / scale))), epochs unchanged."""
    schedulers = [
        dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
             end=500),
        dict(type='MultiStepLR', by_epoch=True, begin=0, end=12,
             milestones=[8, 11], gamma=0.1),
        dict(type='PolyLR', by_epoch=False, begin=500, end=90000),
        dict(type='MultiStepLR', by_epoch=False, milestones=[60000, 80000]),
        dict(type='CosineAnnealingLR', by_epoch=False, T_max=1000, begin=8,
             end=9),
    ]
    scaled, changes = rescale_schedulers(schedulers, 16)
    assert scaled == [
        dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
             end=31),
        schedulers[1],
        dict(type='PolyLR', by_epoch=False, begin=31, end=5625),
        dict(type='MultiStepLR', by_epoch=False, milestones=[3750, 5000]),
        dict(type='CosineAnnealingLR', by_epoch=False, T_max=62, begin=0,
             end=1),
    ]
    assert changes[:3] == ['LinearLR.end 500 -> 31', 'PolyLR.begin 500 -> 31',
                           'PolyLR.end 90000 -> 5625']
    assert schedulers[0]['end'] == 500  # the input is left alone
    # A smaller batch stretches the schedule.
    assert rescale_schedulers(schedulers[:1], 0.5)[0][0]['end'] == 1000
    assert rescale_iterations(1, 16) == 1 and rescale_iterations(0, 16) == 0
