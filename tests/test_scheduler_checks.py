"""mmext.scheduler_checks: what of a param_scheduler a run cannot honour."""
from mmext.scheduler_checks import (resumed_batch_mismatch, scheduler_configs,
                                    scheduler_states, unused_scheduler_values)


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
        'reaches its target LR).',
        'param_scheduler MultiStepLR milestones [40, 80] lie at or after the '
        'end of training (2 epochs): those LR steps never happen.',
        'param_scheduler CosineAnnealingLR begins at epoch 5, not before the '
        'end of training (2 epochs): it never applies.',
    ]
    assert unused_scheduler_values(schedulers[1:2], 100, 4000) == []


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
        'world size x accumulative_counts), this run has 16. Its '
        'iteration-based param schedulers are resumed with the iteration '
        'bounds computed for that batch: LinearLR iterations [0, 40), '
        'CosineAnnealingLR iterations [40, 400); an epoch now has')
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
        'final value).']
