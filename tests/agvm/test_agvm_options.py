"""mmext.agvm.options: every AGVM option checked by name, type and range,
with the option, the value, what is expected and an example in the message;
before any model is built (constructor, mmext.Runner)."""
import re

import pytest
from mmengine.registry import MODELS

from mmext.agvm import AGVMOptimWrapper, AGVMOptimWrapperConstructor

BAD = [
    # (option, value, expected, example): one per option and kind of mistake
    ('start_iter', '10', 'an integer >= 0', 560),
    ('start_iter', -1, 'an integer >= 0', 560),
    ('start_iter', 10.0, 'an integer >= 0', 560),
    ('end_iter', '100', 'None (to the end of training) or an integer > '
     'start_iter (0)', None),
    ('end_iter', 0, 'None (to the end of training) or an integer > '
     'start_iter (0)', None),
    ('update_interval', 2.5, 'an integer >= 1', 10),
    ('update_interval', 0, 'an integer >= 1', 10),
    ('update_interval', True, 'an integer >= 1', 10),
    ('accumulative_counts', '2', 'an integer >= 1', 2),
    ('accumulative_counts', 0, 'an integer >= 1', 2),
    ('ratio_range', 10, '(lo, hi) with 0 < lo <= hi', (0.5, 10.0)),
    ('ratio_range', (0, 10), '(lo, hi) with 0 < lo <= hi', (0.5, 10.0)),
    ('ratio_range', (10, 0.5), '(lo, hi) with 0 < lo <= hi', (0.5, 10.0)),
    ('ratio_range', ('0.5', 10), '(lo, hi) with 0 < lo <= hi', (0.5, 10.0)),
    ('ratio_range', (0.5, 5, 10), '(lo, hi) with 0 < lo <= hi', (0.5, 10.0)),
    ('ema_momentum', 'x', 'a number in [0, 1)', 0.97),
    ('ema_momentum', 1.0, 'a number in [0, 1)', 0.97),
    ('ema_momentum', -0.1, 'a number in [0, 1)', 0.97),
    ('clip_grad_window', 560, '(begin, end): runner iterations, integers '
     'with 0 <= begin < end, or None (clip always)', (360, 560)),
    ('clip_grad_window', (560, 360), '(begin, end): runner iterations, '
     'integers with 0 <= begin < end, or None (clip always)', (360, 560)),
    ('clip_grad_window', ('360', 560), '(begin, end): runner iterations, '
     'integers with 0 <= begin < end, or None (clip always)', (360, 560)),
    ('statistic', 'lamb', "one of ['grad', 'adam']", 'grad'),
    ('module_names', 'backbone', "None (the model's top-level modules) or a "
     'list of submodule names, anchor first',
     ['backbone', 'neck', 'rpn_head', 'roi_head']),
    ('module_names', ['backbone', 3], "None (the model's top-level modules) "
     'or a list of submodule names, anchor first',
     ['backbone', 'neck', 'rpn_head', 'roi_head']),
]


def _message(option, value, expected, example):
    return (f'optim_wrapper.{option}={value!r} ({type(value).__name__}): '
            f'expected {expected}, e.g. {option}={example!r}')


@pytest.mark.parametrize('option, value, expected, example', BAD,
                         ids=[f'{b[0]}={b[1]!r}' for b in BAD])
def test_each_bad_option_is_named_with_the_fix(option, value, expected,
                                               example):
    with pytest.raises(ValueError) as err:
        AGVMOptimWrapper.check_options({option: value})
    assert str(err.value) == _message(option, value, expected, example)


def test_misspelt_option_lists_the_valid_names():
    with pytest.raises(ValueError) as err:
        AGVMOptimWrapper.check_options(dict(start_iters=10))
    assert str(err.value) == (
        "AGVMOptimWrapper got unknown options ['start_iters']; its options "
        "are ['accumulative_counts', 'clip_grad', 'clip_grad_window', "
        "'ema_momentum', 'end_iter', 'module_names', 'ratio_range', "
        "'start_iter', 'statistic', 'update_interval']")


def test_good_options_and_config_keys_pass():
    AGVMOptimWrapper.check_options(dict(
        type='mmext.AGVMOptimWrapper', _scope_='mmdet',
        constructor='mmext.AGVMOptimWrapperConstructor',
        optimizer=dict(type='SGD', lr=0.1), paramwise_cfg={},
        base_constructor='DefaultOptimWrapperConstructor',
        module_names=('backbone', 'neck'), start_iter=560, end_iter=None,
        update_interval=10, accumulative_counts=2, ratio_range=[0.5, 10],
        ema_momentum=0, clip_grad_window=[360, 560], statistic='adam',
        clip_grad=dict(max_norm=1.0)))


def test_constructor_checks_before_building_the_optimizer():
    with pytest.raises(ValueError, match=re.escape(
            "optim_wrapper.start_iter='10' (str)")):
        AGVMOptimWrapperConstructor(dict(
            type='mmext.AGVMOptimWrapper', optimizer=dict(type='SGD', lr=1),
            start_iter='10'))


@MODELS.register_module(force=True)
class NeverBuilt:

    def __init__(self):
        raise AssertionError('the model was built before the options were '
                             'checked')


def test_mmext_runner_checks_before_the_model_is_built(tmp_path):
    from mmengine.config import Config

    from mmext.runner import Runner
    cfg = Config(dict(
        model=dict(type='NeverBuilt'), work_dir=str(tmp_path),
        optim_wrapper=dict(type='mmext.AGVMOptimWrapper',
                           constructor='mmext.AGVMOptimWrapperConstructor',
                           optimizer=dict(type='SGD', lr=0.1),
                           accumulative_counts='2')))
    with pytest.raises(ValueError) as err:
        Runner.from_cfg(cfg)
    assert str(err.value) == _message('accumulative_counts', '2',
                                      'an integer >= 1', 2)
