"""mmext.lr_scaling: the per-step LR scaling of both methods,
auto_scale_lr's options and rules, and the check that mmengine's
auto_scale_lr did not miss the accumulation or the rule."""
import math
import re

import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper, OptimWrapperDict

from mmext.lr_scaling import (EFFECTIVE_BATCH_INFO, LR_RULES,
                              auto_scale_lr_options, check_auto_scale_lr,
                              is_adam_family, optim_wrappers, scale_lrs,
                              scaled_lrs)


def test_optim_wrappers_by_name():
    param = torch.nn.Parameter(torch.zeros(1))
    one = OptimWrapper(torch.optim.SGD([param], lr=0.1))
    two = OptimWrapper(torch.optim.SGD([param], lr=0.2))
    assert optim_wrappers(one) == {'': one}
    assert optim_wrappers(OptimWrapperDict(gen=one, disc=two)) == {
        'gen': one, 'disc': two}


def test_scale_and_restore():
    groups = [dict(lr=0.1), dict(lr=0.02)]
    restore = scale_lrs(groups, [2.0, 0.5])
    assert [g['lr'] for g in groups] == pytest.approx([0.2, 0.01])
    restore()
    assert [g['lr'] for g in groups] == [0.1, 0.02]


def test_context_restores_on_error():
    groups = [dict(lr=0.1)]
    with pytest.raises(RuntimeError):
        with scaled_lrs(groups, [3.0]):
            assert groups[0]['lr'] == pytest.approx(0.3)
            raise RuntimeError('step failed')
    assert groups[0]['lr'] == 0.1


def test_length_mismatch_rejected():
    with pytest.raises(ValueError, match='2 LR factors for 1 param groups'):
        scale_lrs([dict(lr=0.1)], [1.0, 2.0])


def _wrapper(counts):
    param = torch.nn.Parameter(torch.zeros(1))
    return OptimWrapper(torch.optim.SGD([param], lr=0.1),
                        accumulative_counts=counts)


@pytest.mark.parametrize('auto, counts, info', [
    (False, 2, None), (True, 1, None), (True, 2, {'': 4})])
def test_auto_scale_lr_check_passes(auto, counts, info):
    hub = MessageHub.get_instance(f'check_auto_scale_lr_{counts}_{info}')
    if info is not None:
        hub.update_info(EFFECTIVE_BATCH_INFO, info)
    check_auto_scale_lr(dict(enable=auto, base_batch_size=8),
                        _wrapper(counts), hub)


def test_auto_scale_lr_check_names_the_missing_factor():
    hub = MessageHub.get_instance('check_auto_scale_lr_refused')
    wrappers = OptimWrapperDict(gen=_wrapper(1), disc=_wrapper(4))
    with pytest.raises(ValueError, match=r"accumulative_counts=4\. Set "
                       r"runner_type='mmext\.Runner'"):
        check_auto_scale_lr(dict(enable=True, base_batch_size=8), wrappers,
                            hub)


def test_rules_by_value():
    assert LR_RULES['linear'](8.) == 8. and LR_RULES['linear'](0.25) == .25
    assert LR_RULES['sqrt'](16.) == 4. and LR_RULES['sqrt'](.5) == (
        pytest.approx(math.sqrt(.5)))


@pytest.mark.parametrize('auto, expected', [
    (None, None),
    (dict(base_batch_size=16), None),  # mmdet's default: not enabled
    (dict(enable=False, base_batch_size=None, rule='sqrt'), None),
    (dict(enable=True, base_batch_size=16), (16, 'linear')),
    (dict(enable=True, base_batch_size=256, rule='sqrt'), (256, 'sqrt')),
    (dict(enable=True, base_batch_size=0.5, rule='linear'), (0.5, 'linear')),
])
def test_auto_scale_lr_options(auto, expected):
    assert auto_scale_lr_options(auto) == expected


@pytest.mark.parametrize('auto, error, fragment', [
    (dict(), TypeError, 'base_batch_size=None'),
    (dict(base_batch_size=None), TypeError, 'base_batch_size=None'),
    (dict(base_batch_size='16'), TypeError, "base_batch_size='16'"),
    (dict(base_batch_size=True), TypeError, 'base_batch_size=True'),
    (dict(base_batch_size=0), ValueError,
     'base_batch_size=0: expected finite and > 0'),
    (dict(base_batch_size=-8), ValueError, 'base_batch_size=-8'),
    (dict(base_batch_size=math.nan), ValueError, 'base_batch_size=nan'),
    (dict(base_batch_size=math.inf), ValueError, 'base_batch_size=inf'),
    (dict(base_batch_size=8, rule='Sqrt'), ValueError,
     "rule='Sqrt': expected one of ['linear', 'sqrt']"),
    (dict(base_batch_size=8, rule=None), ValueError, 'rule=None'),
    (dict(base_batch_size=8, rules='sqrt'), TypeError,
     "unexpected key 'rules': did you mean 'rule'?"),
    (dict(base_batch_size=8, factor=2), TypeError,
     "expected one of ['enable', 'base_batch_size', 'rule']"),
])
def test_a_bad_auto_scale_lr_is_refused(auto, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        auto_scale_lr_options(dict(enable=True, **auto))


@pytest.mark.parametrize('auto, error, fragment', [
    (dict(enabled=True, base_batch_size=8), TypeError,
     "unexpected key 'enabled': did you mean 'enable'?"),
    (dict(enable=False, base_batch_size=8, rule='sqr'), ValueError,
     "rule='sqr': expected one of ['linear', 'sqrt']"),
    (dict(enable=False, base_batch_size=8, rules='sqrt'), TypeError,
     "unexpected key 'rules'"),
    (dict(enable='no', base_batch_size=8), TypeError,
     "enable='no': expected True or False"),
    (True, TypeError, 'auto_scale_lr=True: expected dict('),
])
def test_a_misspelt_or_malformed_auto_scale_lr_is_refused_even_disabled(
        auto, error, fragment):
    """A misspelt ``enable`` would otherwise leave the LR unscaled."""
    with pytest.raises(error, match=re.escape(fragment)):
        auto_scale_lr_options(auto)


def test_adam_family_and_lamb_are_recognised():
    from pytorch_optimizer import Lamb
    params = [torch.nn.Parameter(torch.zeros(2, 2))]
    adam = [torch.optim.Adam, torch.optim.AdamW, torch.optim.NAdam,
            torch.optim.RAdam, torch.optim.Adamax, Lamb]
    others = [torch.optim.SGD, torch.optim.RMSprop, torch.optim.Adagrad]
    assert [is_adam_family(kind(params, lr=0.1)) for kind in adam] == [
        True] * len(adam)
    assert [is_adam_family(kind(params, lr=0.1)) for kind in others] == [
        False] * len(others)


def test_mmengine_runner_ignoring_the_rule_is_refused():
    """mmengine scales linearly whatever ``rule`` says."""
    hub = MessageHub.get_instance('check_auto_scale_lr_sqrt')
    auto = dict(enable=True, base_batch_size=8, rule='sqrt')
    with pytest.raises(ValueError, match=re.escape(
            "rule='sqrt' needs runner_type='mmext.Runner'")):
        check_auto_scale_lr(auto, _wrapper(1), hub)
    check_auto_scale_lr(dict(auto, rule='linear'), _wrapper(1), hub)
    hub.update_info(EFFECTIVE_BATCH_INFO, {'': 2})  # mmext.Runner's run
    check_auto_scale_lr(auto, _wrapper(1), hub)
