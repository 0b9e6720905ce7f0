"""mmext.scheduler_checks: what of a param_scheduler a run cannot honour."""
from mmext.scheduler_checks import (scheduler_configs, unused_scheduler_values,
                                    warmup_ends)


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
        'training (40 iterations): it is cut short (a warm-up never reaches '
        'its target LR).',
        'param_scheduler MultiStepLR ends at epoch 100, after the end of '
        'training (2 epochs): it is cut short (a warm-up never reaches its '
        'target LR).',
        'param_scheduler MultiStepLR milestones [40, 80] lie at or after the '
        'end of training (2 epochs): those LR steps never happen.',
        'param_scheduler CosineAnnealingLR begins at epoch 5, not before the '
        'end of training (2 epochs): it never applies.',
    ]
    assert unused_scheduler_values(schedulers[1:2], 100, 4000) == []


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
