"""AGVMAmpOptimWrapper: mmengine's AMP semantics under AGVM (CUDA only)."""
import pytest
import torch
from mmengine.optim import AmpOptimWrapper, OptimWrapper

from agvm_toy import ToyModel, build_wrapper, toy_batches
from mmext.agvm import AGVMAmpOptimWrapper, AGVMOptimWrapper


def test_amp_variant_puts_agvm_around_amp():
    mro = AGVMAmpOptimWrapper.__mro__
    assert mro.index(AGVMOptimWrapper) < mro.index(AmpOptimWrapper) < \
        mro.index(OptimWrapper)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_amp_training_updates_factors():
    model = ToyModel().cuda()
    wrapper = build_wrapper(model, type='mmext.AGVMAmpOptimWrapper',
                            accumulative_counts=2, loss_scale='dynamic')
    for parts in toy_batches(3, 2):
        for x, y, use_aux in parts:
            with wrapper.optim_context(model):
                loss = model(x.cuda(), y.cuda(), use_aux)
            wrapper.update_params(loss)
    assert wrapper.ema.num_updates == 3
    assert torch.isfinite(wrapper.ema.factors).all()
    assert 'loss_scaler' in wrapper.state_dict()
    assert 'agvm' in wrapper.state_dict()
