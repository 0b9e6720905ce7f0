"""mmext.lr_scaling: effective batch, the per-step LR scaling of both methods,
and the check that mmengine's auto_scale_lr did not miss the accumulation."""
import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper, OptimWrapperDict

from mmext.lr_scaling import (EFFECTIVE_BATCH_INFO, check_auto_scale_lr,
                              effective_batch, optim_wrappers, scale_lrs,
                              scaled_lrs)


def test_effective_batch_spells_out_its_factors():
    assert effective_batch(2, 4, 3) == (
        '24 (loader batch 2 x world size 4 x accumulative_counts 3)')


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


@pytest.mark.parametrize('auto, counts, info', [
    (False, 2, None), (True, 1, None), (True, 2, {'': 4})])
def test_auto_scale_lr_check_passes(auto, counts, info):
    hub = MessageHub.get_instance(f'check_auto_scale_lr_{counts}_{info}')
    if info is not None:
        hub.update_info(EFFECTIVE_BATCH_INFO, info)
    check_auto_scale_lr(hub, auto, counts)


def test_auto_scale_lr_check_names_the_missing_factor():
    hub = MessageHub.get_instance('check_auto_scale_lr_refused')
    with pytest.raises(ValueError) as err:
        check_auto_scale_lr(hub, True, 4, ratio=0.25)
    assert str(err.value) == (
        "auto_scale_lr is enabled and optim_wrapper.accumulative_counts=4, "
        "but mmengine's Runner.scale_lr scales the LR by loader batch x "
        'world size only (it applied x0.25), 4x too small for the batch of '
        "an optimizer step. Set runner_type='mmext.Runner' in the config "
        "(mmext's tools/train.py does), or disable auto_scale_lr and set "
        'the LR for the effective batch yourself.')
