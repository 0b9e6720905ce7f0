"""mmext.multigrid.options: MultigridOptions, the one owner of the hook's
options."""
import dataclasses

import pytest

from mmext.multigrid import (DEFAULT_LONG_CYCLE_FACTORS, MultigridHook,
                             MultigridOptions)


def test_skip_option_is_validated():
    with pytest.raises(ValueError, match='skip_broken_clips must be True or '
                       "False, got 'yes'"):
        MultigridHook(skip_broken_clips='yes')


def test_keep_cpu_memory_option_is_validated():
    assert MultigridOptions().keep_cpu_memory is True
    with pytest.raises(ValueError, match='keep_cpu_memory must be True or '
                       'False, got 1'):
        MultigridHook(keep_cpu_memory=1)


@pytest.mark.parametrize('options, match', [
    (dict(bn_base_size=-4), 'bn_base_size'),
    (dict(precise_bn_iters=-1), 'precise_bn_iters'),
])
def test_bad_hook_options_rejected_at_build(options, match):
    with pytest.raises(ValueError, match=match):
        MultigridHook(**options)


@pytest.mark.parametrize('options, match', [
    (dict(data_wait_threshold=1.5), 'data_wait_threshold must be a share'),
    (dict(data_wait_threshold=-0.1), 'data_wait_threshold must be a share'),
    (dict(data_wait_iters=0), 'data_wait_iters must be an int >= 1'),
    (dict(data_wait_iters=2.5), 'data_wait_iters must be an int >= 1'),
])
def test_bad_watch_options(options, match):
    with pytest.raises(ValueError, match=match):
        MultigridOptions(**options)


def test_watch_options_defaults():
    options = MultigridOptions()
    assert options.data_wait_threshold == 0.2
    assert options.data_wait_iters == 10
    assert MultigridOptions(
        data_wait_threshold=None).data_wait_threshold is None


def test_misspelt_option_lists_the_valid_names():
    with pytest.raises(ValueError) as err:
        MultigridHook(short_cycles=False)
    assert str(err.value) == (
        "unknown MultigridHook options ['short_cycles']; known: "
        f'{sorted(MultigridOptions.names())}')
    assert 'short_cycle' in MultigridOptions.names()


def test_hook_config_keys_are_not_options():
    options = MultigridOptions.from_hook_config(dict(
        type='mmext.MultigridHook', priority='HIGHEST', _scope_='mmaction',
        short_cycle=False))
    assert options == MultigridOptions(short_cycle=False)


def test_sequences_are_tuples_and_the_schedule_gets_its_fields():
    options = MultigridOptions(long_cycle_factors=[[0.5, 1], [1, 1]],
                               short_cycle_factors=[0.5], lr_steps=[0, 3])
    assert options.long_cycle_factors == ((0.5, 1), (1, 1))
    assert options.short_cycle_factors == (0.5, )
    assert options.lr_steps == (0, 3)
    assert options.schedule_kwargs() == dict(
        long_cycle=True, short_cycle=True, epoch_factor=1.5,
        long_cycle_factors=((0.5, 1), (1, 1)), short_cycle_factors=(0.5, ),
        short_cycle_mode='absolute')
    assert MultigridOptions().long_cycle_factors == DEFAULT_LONG_CYCLE_FACTORS
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.short_cycle = False
