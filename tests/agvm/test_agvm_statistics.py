"""mmext.agvm.statistics: gradient variance, modulation factors and their
EMA against hand-computed values; every row of the statistic table keeps the
norm identity the halves rely on."""
import math

import pytest
import torch
from helpers import DEVICES

from torch import nn

from mmext.agvm.statistics import (STATISTICS, HalfStatistics, ModulationEMA,
                                   adam_precondition, gradient_variance,
                                   half_dot_from_norms, keeps_adam_moments,
                                   modulation_factors, split_ranks)


def _stats(pairs, device='cpu'):
    a = [torch.tensor(x, dtype=torch.float64, device=device) for x, _ in pairs]
    b = [torch.tensor(y, dtype=torch.float64, device=device) for _, y in pairs]
    return HalfStatistics(
        dot=torch.stack([x @ y for x, y in zip(a, b)]),
        sq_norm_a=torch.stack([x @ x for x in a]),
        sq_norm_b=torch.stack([y @ y for y in b]))


@pytest.mark.parametrize('device', DEVICES)
def test_gradient_variance_and_factors_by_hand(device):
    # module 0: cos = 0 -> d = 1; module 1: cos = 0.6 -> d = 0.4;
    # module 2: opposite -> d = 2; module 3: identical -> d = 0.
    stats = _stats([([1., 0.], [0., 2.]), ([3., 4.], [3., 0.]),
                    ([1., 1.], [-2., -2.]), ([1., 2.], [2., 4.])], device)
    d, valid = gradient_variance(stats)
    assert valid.all()
    assert d.device == valid.device == torch.device(device)
    torch.testing.assert_close(d.cpu(), torch.tensor([1., .4, 2., 0.],
                                                     dtype=torch.float64))
    mu = modulation_factors(d, valid, 0, (0.5, 10.0))
    assert mu.device == torch.device(device)
    expected = [1.0, math.sqrt(1 / .4), math.sqrt(.5), math.sqrt(10.)]
    torch.testing.assert_close(mu.cpu(), torch.tensor(expected,
                                                      dtype=torch.float64))


def test_zero_and_nonfinite_gradients_are_skipped():
    stats = _stats([([1., 0.], [1., 1.]), ([0., 0.], [1., 1.]),
                    ([float('nan'), 1.], [1., 1.])])
    d, valid = gradient_variance(stats)
    assert valid.tolist() == [True, False, False]
    assert torch.isfinite(d).all()
    ema = ModulationEMA(3, 0.5)
    factors = ema.update(modulation_factors(d, valid, 0, (0.5, 10.)))
    assert factors.tolist() == [1.0, 1.0, 1.0]
    # An invalid anchor invalidates every factor of that measurement.
    mu = modulation_factors(d, torch.tensor([False, True, True]), 0,
                            (0.5, 10.))
    assert torch.isnan(mu).all()
    assert ema.update(mu).tolist() == [1.0, 1.0, 1.0]
    assert ema.num_updates == 1


def test_zero_anchor_variance_gives_finite_factors():
    d = torch.tensor([0., 0., .5], dtype=torch.float64)
    mu = modulation_factors(d, torch.ones(3, dtype=torch.bool), 0,
                            (0.5, 10.))
    torch.testing.assert_close(
        mu, torch.tensor([1., 1., math.sqrt(.5)], dtype=torch.float64))


def test_half_dot_from_norms_matches_direct_dot():
    torch.manual_seed(0)
    a, b = torch.randn(2, 50, dtype=torch.float64)
    dot = half_dot_from_norms((a + b) @ (a + b), a @ a, b @ b)
    torch.testing.assert_close(dot, a @ b)


def test_ema_sequence_and_state_round_trip():
    ema = ModulationEMA(2, 0.9)
    ema.update(torch.tensor([1., 3.]))
    ema.update(torch.tensor([1., 2.]))
    expected = 0.9 * (0.9 + 0.1 * 3) + 0.1 * 2
    assert ema.factors[1].item() == pytest.approx(expected)
    other = ModulationEMA(2, 0.9)
    other.load_state_dict(ema.state_dict())
    assert other.factors.tolist() == ema.factors.tolist()
    assert other.num_updates == 2


@pytest.mark.parametrize('world_size,expected', [
    (2, ([0], [1])), (3, ([0], [1])), (4, ([0, 1], [2, 3])),
    (5, ([0, 1], [2, 3]))])
def test_split_ranks(world_size, expected):
    assert tuple(split_ranks(world_size)) == expected


def _adam_with_state():
    w, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([dict(params=[w], eps=0.5),
                                   dict(params=[b])], lr=0.1)
    optimizer.state[w]['exp_avg_sq'] = torch.tensor([4.0, 9.0])
    return optimizer, [w, b]


def test_adam_precondition_by_hand():
    """g / (sqrt(v) + eps) where the optimizer has v, g elsewhere."""
    optimizer, params = _adam_with_state()
    flat = torch.tensor([5.0, 7.0, 3.0])
    out = adam_precondition(optimizer, params, flat)
    assert out.tolist() == [5.0 / 2.5, 7.0 / 3.5, 3.0]
    assert flat.tolist() == [5.0, 7.0, 3.0]


def test_adam_precondition_reads_amsgrad_maximum():
    """AMSGrad steps along max_exp_avg_sq, the running maximum of v: after
    a large gradient and a small one, v has decayed but the maximum not."""
    w = nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.Adam([w], lr=0.1, betas=(0.9, 0.5),
                                 eps=0.0, amsgrad=True)
    for grad in ([4.0, 2.0], [0.0, 0.0]):
        w.grad = torch.tensor(grad)
        optimizer.step()
    # v = 0.5 * (0.5 * 0 + 0.5 * g1^2) = g1^2 / 4; max = g1^2 / 2.
    state = optimizer.state[w]
    assert state['exp_avg_sq'].tolist() == [4.0, 1.0]
    assert state['max_exp_avg_sq'].tolist() == [8.0, 2.0]
    out = adam_precondition(optimizer, [w], torch.tensor([1.0, 1.0]))
    assert out.tolist() == pytest.approx([8.0 ** -0.5, 2.0 ** -0.5])
    # Resumed without AMSGrad: torch steps along v, the stale maximum stays.
    optimizer.param_groups[0]['amsgrad'] = False
    out = adam_precondition(optimizer, [w], torch.tensor([1.0, 1.0]))
    assert out.tolist() == [0.5, 1.0]


@pytest.mark.parametrize('name', list(STATISTICS))
def test_each_statistic_writes_out_in_place(name):
    """``out=flat`` (the one-process halves' own buffers): the same values,
    in the same storage."""
    optimizer, params = _adam_with_state()
    precondition = STATISTICS[name].precondition
    flat = torch.tensor([5.0, 7.0, 3.0])
    expected = precondition(optimizer, params, flat)
    assert precondition(optimizer, params, flat, out=flat) is flat
    assert flat.tolist() == expected.tolist()


@pytest.mark.parametrize('name', list(STATISTICS))
def test_each_statistic_keeps_the_norm_identity(name):
    """The halves exchange only |P(S_A)|^2, |P(S_B)|^2, |P(S_A + S_B)|^2:
    P must be linear, so that their combination is P(S_A) . P(S_B)."""
    optimizer, params = _adam_with_state()
    precondition = STATISTICS[name].precondition
    a, b = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 4.0, -1.0])
    pa, pb, psum = (precondition(optimizer, params, x) for x in (a, b, a + b))
    assert half_dot_from_norms(psum @ psum, pa @ pa, pb @ pb).item() == (
        pytest.approx((pa @ pb).item()))
    accepts = STATISTICS[name].accepts
    assert accepts is None or accepts(optimizer)


def _optimizer(kind):
    from pytorch_optimizer import Lamb, Lion
    kinds = dict(Lamb=Lamb, Lion=Lion)
    cls = kinds.get(kind) or getattr(torch.optim, kind)
    return cls([nn.Parameter(torch.zeros(2))], lr=0.1)


@pytest.mark.parametrize('kind, keeps', [
    ('Adam', True), ('AdamW', True), ('NAdam', True), ('RAdam', True),
    ('Lamb', True), ('Adamax', False), ('Lion', False), ('SGD', False),
    ('RMSprop', False),
])
def test_adam_mode_accepts_the_optimizers_keeping_exp_avg_sq(kind, keeps):
    """Adamax (exp_inf) and Lion (exp_avg only) have betas but no v:
    AdamW mode would measure the raw gradient there."""
    optimizer = _optimizer(kind)
    assert keeps_adam_moments(optimizer) is keeps
    assert not optimizer.state  # the probe steps a copy, not the run's


def test_adam_mode_probe_runs_on_the_parameters_device():
    """The probe's tensor is made like the run's parameters: on the meta
    device it steps there (Adamax: betas, but no exp_avg_sq)."""
    param = nn.Parameter(torch.zeros(2, device='meta'))
    assert keeps_adam_moments(torch.optim.Adam([param], lr=0.1)) is True
    assert keeps_adam_moments(torch.optim.Adamax([param], lr=0.1)) is False


class _NeedsSchedule(torch.optim.Adam):
    """An optimizer with an argument its ``defaults`` do not keep."""

    def __init__(self, params, schedule, **kwargs):
        super().__init__(params, **kwargs)
        self.schedule = schedule


class _NeedsScheduleSGD(torch.optim.SGD):

    def __init__(self, params, schedule, **kwargs):
        super().__init__(params, **kwargs)
        self.schedule = schedule


def test_adam_mode_falls_back_to_betas_for_an_unrebuildable_class():
    params = [nn.Parameter(torch.zeros(2))]
    assert keeps_adam_moments(_NeedsSchedule(params, [1], lr=0.1)) is True
    assert keeps_adam_moments(_NeedsScheduleSGD(params, [1], lr=0.1)) is False
