"""mmext.scheduler_checks: what of a param_scheduler a run cannot honour
(on the run's axis or a recipe's), and where the warm-ups end."""
from mmext.scheduler_checks import (scheduler_configs,
                                    unused_scheduler_values, warmup_ends)


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
    warmup, steps, cosine = unused_scheduler_values(schedulers, 2, 40)
    assert warmup.startswith('param_scheduler LinearLR ends at iteration 500')
    assert '(40 iterations): the warm-up never reaches' in warmup
    assert 'MultiStepLR milestones [40, 80] lie at or after' in steps
    assert 'end of training (2 epochs): those LR steps never' in steps
    assert 'CosineAnnealingLR begins at epoch 5' in cosine
    assert 'it never applies' in cosine
    assert unused_scheduler_values(schedulers[1:2], 100, 4000) == []


def test_the_same_rules_on_another_axis():
    """A hook that moves the schedulers onto its own axis checks the
    recipe's on the recipe's axis; iteration bounds only where its
    iterations are known."""
    schedulers = [
        dict(type='LinearLR', by_epoch=False, end=500),
        dict(type='MultiStepLR', by_epoch=True, milestones=[1, 40]),
    ]
    [steps] = unused_scheduler_values(schedulers, 2, None, axis='recipe')
    assert 'milestones [40] lie at' in steps
    assert '(2 recipe epochs): those LR steps never happen' in steps
    [warmup] = unused_scheduler_values(schedulers[:1], 2, 64, axis='recipe')
    assert 'ends at recipe iteration 500' in warmup
    assert '(64 recipe iterations)' in warmup


def test_a_cosine_longer_than_the_run_is_not_called_a_warm_up():
    [message] = unused_scheduler_values(
        [dict(type='CosineAnnealingLR', by_epoch=True, begin=0, end=10,
              T_max=10)], 4, 40)
    assert '(4 epochs): it never reaches its final value' in message


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
