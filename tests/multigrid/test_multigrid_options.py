"""mmext.multigrid.options: MultigridOptions, the one owner of the hook's
options."""
import dataclasses

import pytest

from mmext.multigrid import (DEFAULT_LONG_CYCLE_FACTORS, MultigridHook,
                             MultigridOptions)


def test_skip_option_is_validated():
    with pytest.raises(ValueError, match=r"skip_broken_clips='yes' \(str\): "
                       'expected True or False'):
        MultigridHook(skip_broken_clips='yes')


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
    (dict(data_wait_iters=2.5), r'data_wait_iters=2.5 \(float\): expected '
     'an int >= 1'),
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


@pytest.mark.parametrize('options, message', [
    (dict(long_cycle=1), "long_cycle=1 (int): expected True or False"),
    (dict(short_cycle='no'), "short_cycle='no' (str): expected True or "
     'False'),
    (dict(skip_broken_clips=None), 'skip_broken_clips=None (NoneType): '
     'expected True or False'),
    (dict(epoch_factor='1.5'), "epoch_factor='1.5' (str): expected a "
     'number > 0 (total epochs = max_epochs x epoch_factor), e.g. '
     'epoch_factor=1.5'),
    (dict(long_cycle_factors=[0.25, 0.5, 1]), 'long_cycle_factors=[0.25, '
     '0.5, 1] (list): expected a list of (t, s) pairs'),
    (dict(long_cycle_factors=[(0.5, 1, 1), (1, 1)]), 'long_cycle_factors=['
     '(0.5, 1, 1), (1, 1)] (list): expected a list of (t, s) pairs'),
    (dict(short_cycle_factors=0.5), 'short_cycle_factors=0.5 (float): '
     'expected a list of crop factors in (0, 1)'),
    (dict(short_cycle_mode=None), 'short_cycle_mode=None'),
    (dict(bn_base_size='8'), "bn_base_size='8' (str): expected None, 0 (no "
     'sub-batch BN) or a positive clip count, e.g. bn_base_size=8'),
    (dict(bn_base_size=4.0), 'bn_base_size=4.0 (float)'),
    (dict(precise_bn_iters=True), 'precise_bn_iters=True (bool)'),
    (dict(data_wait_threshold='high'), "data_wait_threshold='high' (str)"),
    (dict(lr_steps='0, 10'), "lr_steps='0, 10' (str): expected None or a "
     'list of epochs'),
])
def test_wrong_types_name_the_option_and_an_example(options, message):
    with pytest.raises(ValueError) as err:
        MultigridOptions(**options)
    assert str(err.value).startswith('MultigridHook option ' + message)
    assert ', e.g. ' in str(err.value)


@pytest.mark.parametrize('options, message', [
    (dict(epoch_factor=0), 'epoch_factor must be > 0, got 0'),
    (dict(long_cycle=False, short_cycle=False),
     'Multigrid needs long_cycle or short_cycle'),
    (dict(long_cycle_factors=[]), 'must list at least one'),
    (dict(long_cycle_factors=[(2, 1), (1, 1)]), r'entry \(2, 1\): t and s '
     r'must be in \(0, 1\]'),
    (dict(short_cycle_factors=[]), 'short_cycle_factors must be factors'),
    (dict(short_cycle_factors=[1.5]), 'short_cycle_factors must be factors '
     r'in \(0, 1\) of the crop size, got \[1.5\]'),
    (dict(short_cycle_mode='paper'), "short_cycle_mode must be one of "
     r"\('absolute', 'relative'\), got 'paper'"),
    (dict(lr_steps=[3]), r'lr_steps must start at 0 and increase strictly'),
    (dict(lr_steps=[0, 5, 5]), r'got \[0, 5, 5\]'),
])
def test_values_out_of_range_name_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        MultigridOptions(**options)


@pytest.mark.parametrize('factors', [
    [(1, 1), (0.5, 1), (0.25, 0.5**0.5)],  # reversed
    [(0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1)],  # no base shape last
    [(0.5, 1), (0.5, 0.5**0.5), (1, 1)],  # finer before coarser
])
def test_long_cycle_factors_run_coarse_to_fine_to_the_base_shape(factors):
    """Raising epoch_factor or max_epochs would not fix these: the message
    says what does."""
    with pytest.raises(ValueError) as err:
        MultigridOptions(long_cycle_factors=factors)
    assert str(err.value).startswith(
        'long_cycle_factors must run coarse to fine (each shape T x S^2 at '
        'least the one before) and end with the base shape (1, 1); got ')
    assert 'epoch_factor' not in str(err.value)
