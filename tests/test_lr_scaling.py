"""mmext.lr_scaling: the per-step LR scaling of both methods, and the check
that mmengine's auto_scale_lr did not miss the accumulation."""
import pytest
import torch
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapper, OptimWrapperDict

from mmext.lr_scaling import (EFFECTIVE_BATCH_INFO, check_auto_scale_lr,
                              optim_wrappers, scale_lrs, scaled_lrs)


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
