"""mmext.agvm.amp: AGVMAmpOptimWrapper (mmengine's AMP set-up runs; on CUDA
the factors follow the fp32 ones)."""
import pytest
import torch
from agvm_toy import ToyModel, build_wrapper, toy_batches, train_accumulated
from helpers import CUDA_MARKS


@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA present')
def test_amp_variant_runs_mmengine_amp_set_up():
    """AmpOptimWrapper's own construction runs (and refuses a CPU-only
    machine), after AGVM has named a misspelled option."""
    with pytest.raises(AssertionError, match='only available training on '
                       'gpu'):
        build_wrapper(ToyModel(), type='mmext.AGVMAmpOptimWrapper',
                      accumulative_counts=2)
    with pytest.raises(ValueError, match=r"unknown options \['loss_scal'\]"):
        build_wrapper(ToyModel(), type='mmext.AGVMAmpOptimWrapper',
                      accumulative_counts=2, loss_scal='dynamic')


@pytest.mark.parametrize('device', [pytest.param('cuda', marks=CUDA_MARKS)])
def test_amp_training_updates_factors(device):
    model = ToyModel().to(device)
    wrapper = build_wrapper(model, type='mmext.AGVMAmpOptimWrapper',
                            accumulative_counts=2, loss_scale='dynamic')
    for parts in toy_batches(3, 2):
        for x, y, use_aux in parts:
            with wrapper.optim_context(model):
                loss = model(x.to(device), y.to(device), use_aux)
            wrapper.update_params(loss)
    assert wrapper.ema.num_updates == 3
    # fp16 gradients move d_i a little, not the factors' direction.
    _, _, fp32 = train_accumulated(toy_batches(3, 2), device)
    torch.testing.assert_close(wrapper.ema.factors, fp32[-1], rtol=0,
                               atol=0.05)
    assert 'loss_scaler' in wrapper.state_dict()
    assert 'agvm' in wrapper.state_dict()
