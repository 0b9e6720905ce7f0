"""tools/analysis/agvm_diagnostic.py against hand-computed gradient
variances.

The toy model's loss is linear in its weights, loss = w . x, so the gradient
of a micro-batch is its input x and a half's mean gradient is the mean of its
inputs: the d_i below are computed by hand from those means.
"""
import math

import pytest
import torch
from mmengine.model import BaseModel
from torch import nn

from agvm_diagnostic import (_accumulate_half, measure_gradient_variance,
                             module_layout, summarize, variance_by_batch_size)

SQRT_HALF = math.sqrt(0.5)


class Vec(nn.Module):

    def __init__(self, size):
        super().__init__()
        self.w = nn.Parameter(torch.randn(size))


class LinearToy(BaseModel):
    """loss = a.w . x[0:2] + b.w . x[2:4] + c.w . x[4:6] + extra.w . x[6:8];
    a BN (no parameters) only moves its running statistics."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c, self.extra = Vec(2), Vec(2), Vec(2), Vec(2)
        self.bn = nn.BatchNorm1d(4, affine=False)

    def forward(self, inputs, data_samples=None, mode='loss'):
        w = torch.cat([self.a.w, self.b.w, self.c.w, self.extra.w])
        shift = self.bn(inputs.view(2, 4)).sum() * 0
        return dict(loss=(w * inputs).sum() + shift)


def batch(a, b, c, extra=(1.0, 1.0)):
    return dict(inputs=torch.tensor([*a, *b, *c, *extra]))


# Half means: a: [1,0] vs [1,1]; b: [2,0] vs [0,2]; c: [3,4] vs [4,3].
HALF_A = [batch((1, 0), (1, 0), (3, 4)), batch((1, 0), (3, 0), (3, 4))]
HALF_B = [batch((0, 1), (0, 3), (8, 6)), batch((2, 1), (0, 1), (0, 0))]
D_A = 1 - SQRT_HALF  # cos = 1 / sqrt(2)
D_B = 1.0  # orthogonal
D_C = 1 - 24 / 25  # cos = (12 + 12) / (5 * 5)


def test_variance_ratio_and_factors_match_hand_computation():
    model = LinearToy()
    layout = module_layout(model, ['a', 'b', 'c'])
    result = measure_gradient_variance(model, HALF_A, HALF_B, layout,
                                       ratio_range=(0.5, 10.0))
    assert result['d'].tolist() == pytest.approx([D_A, D_B, D_C], abs=1e-7)
    assert result['valid'].tolist() == [True, True, True]
    assert result['ratio'].tolist() == pytest.approx(
        [1.0, D_A / D_B, D_A / D_C], rel=1e-6)
    # b: ratio 0.29 is clamped to 0.5; c: sqrt(7.32) = 2.71.
    assert result['mu'].tolist() == pytest.approx(
        [1.0, SQRT_HALF, math.sqrt(D_A / D_C)], rel=1e-6)


def test_a_float64_model_gives_the_same_variances():
    model = LinearToy().double()
    result = measure_gradient_variance(
        model, HALF_A, HALF_B, module_layout(model, ['a', 'b', 'c']),
        loss_fn=lambda m, data: m(data['inputs'].double())['loss'])
    assert result['d'].tolist() == pytest.approx([D_A, D_B, D_C], abs=1e-12)


def test_default_modules_are_the_top_level_children_anchor_first():
    # 'extra' is identical in both halves: d = 0, ratio undefined, mu = hi.
    model = LinearToy()
    layout = module_layout(model)
    assert layout.module_names == ['a', 'b', 'c', 'extra']
    result = measure_gradient_variance(model, HALF_A, HALF_B, layout,
                                       ratio_range=(0.5, 4.0))
    assert result['d'][3].item() == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(result['ratio'][3].item())
    assert result['mu'][3].item() == pytest.approx(2.0)


def test_anchor_without_gradient_invalidates_every_factor():
    half = [batch((0, 0), (1, 0), (3, 4))]
    model = LinearToy()
    result = measure_gradient_variance(model, half, HALF_B,
                                       module_layout(model))
    assert result['valid'].tolist() == [False, True, True, True]
    assert all(math.isnan(v) for v in result['mu'].tolist())
    assert all(math.isnan(v) for v in result['ratio'].tolist())


def test_model_state_is_unchanged():
    model = LinearToy().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    measure_gradient_variance(model, HALF_A, HALF_B, module_layout(model))
    after = model.state_dict()
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert not model.training and not model.bn.training
    assert all(p.grad is None for p in model.parameters())


def test_halves_are_mean_gradients_in_layout_order():
    model = LinearToy()
    layout = module_layout(model, ['c', 'a'])
    flat = _accumulate_half(model, layout, HALF_A,
                            lambda m, data: m(**data)['loss'])
    # c, a, then 'others' in the model's parameter order: b, extra.
    assert flat.tolist() == [3, 4, 1, 0, 2, 0, 1, 1]


def test_buffers_follow_the_parameters_device():
    model = LinearToy().to('meta')
    layout = module_layout(model, ['a'])
    flat = _accumulate_half(model, layout, HALF_A[:1],
                            lambda m, data: m(inputs=data['inputs'].to(
                                'meta'))['loss'])
    assert flat.device.type == 'meta'


def test_module_names_are_checked_as_the_constructor_does():
    with pytest.raises(ValueError, match="'head' is not a submodule"):
        module_layout(LinearToy(), ['a', 'head'])


def test_summarize_ignores_nan():
    out = summarize([1.0, 3.0, math.nan])
    assert (out['mean'], out['std']) == pytest.approx((2.0, math.sqrt(2.0)))
    assert len(out['values']) == 3
    out = summarize([5.0])
    assert out['mean'] == 5.0 and math.isnan(out['std'])
    assert math.isnan(summarize([math.nan])['mean'])


def test_variance_by_batch_size_draws_fresh_halves_per_repeat():
    # Half i of the stream: HALF_A, HALF_B, HALF_B, HALF_A, ...: the first
    # repeat sees the hand-computed pair, the second the swapped pair (same
    # d), so the spread is 0 and the values are the hand ones.
    stream = iter([HALF_A, HALF_B, HALF_B, HALF_A])
    sizes = []

    def draw(images):
        sizes.append(images)
        return next(stream)

    model = LinearToy()
    rows = variance_by_batch_size(model, draw, [4], 2,
                                  module_layout(model, ['a', 'b', 'c']))
    assert sizes == [2, 2, 2, 2]
    (row, ) = rows
    assert row['batch_size'] == 4 and row['repeats'] == 2
    assert row['d']['b']['values'] == pytest.approx([D_B, D_B])
    assert row['d']['c']['mean'] == pytest.approx(D_C, abs=1e-7)
    assert row['d']['c']['std'] == pytest.approx(0.0, abs=1e-7)
    assert row['ratio']['c']['mean'] == pytest.approx(D_A / D_C, rel=1e-6)
    assert row['mu']['b']['mean'] == pytest.approx(SQRT_HALF)


def test_one_repeat_has_no_spread():
    stream = iter([HALF_A, HALF_B])
    model = LinearToy()
    (row, ) = variance_by_batch_size(model, lambda images: next(stream),
                                     [4], 1, module_layout(model))
    assert list(row['d']) == ['a', 'b', 'c', 'extra']
    assert row['d']['b']['values'] == pytest.approx([D_B])
    assert math.isnan(row['d']['b']['std'])
