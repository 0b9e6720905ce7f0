"""mmext.agvm.layout: the gradients module by module in one flat buffer, on
the parameters' device, and their float64-accurate per-module sums."""
import pytest
import torch
from agvm_toy import ToyModel, build_wrapper
from torch import nn

from mmext.agvm import GradientLayout, adam_precondition

META = torch.device('meta')


def test_layout_buffers_follow_the_parameters():
    model = ToyModel().to(META)
    wrapper = build_wrapper(model, accumulative_counts=2)
    layout = wrapper.layout
    for name, param in model.named_parameters():
        if param.requires_grad and not name.startswith('aux.'):
            param.grad = torch.empty_like(param)
    flat, used = layout.flatten(extra=3)
    assert (flat.device, flat.dtype, flat.shape) == (
        META, torch.float32, (layout.numel + 3, ))
    assert (used.device, used.shape) == (META, (len(layout.params), ))
    norms = layout.module_sq_norm(flat[:layout.numel])
    assert (norms.device, norms.dtype, norms.shape) == (
        META, torch.float64, (3, ))
    dots = layout.module_dot(flat, flat)
    assert (dots.device, dots.dtype) == (META, torch.float64)


def test_layout_rejects_parameters_on_several_devices():
    model = ToyModel()
    model.head.to(META)
    with pytest.raises(ValueError, match=r"share one device; found "
                       r"\['cpu', 'meta'\]"):
        build_wrapper(model, accumulative_counts=2)


def _layout(sizes, dtype=torch.float32):
    """A layout of one parameter per module, module i of ``sizes[i]``
    elements, plus a 3-element parameter in ``others``."""
    params = [nn.Parameter(torch.zeros(n, dtype=dtype)) for n in sizes]
    extra = nn.Parameter(torch.zeros(3, dtype=dtype))
    groups = [dict(params=[p], agvm_module=f'm{i}')
              for i, p in enumerate(params)]
    groups.append(dict(params=[extra], agvm_module='others'))
    names = [f'm{i}' for i in range(len(sizes))]
    return GradientLayout(torch.optim.SGD(groups, lr=0.1), names), params


def test_segments_are_per_module_and_others_last():
    layout, params = _layout([2, 5])
    assert layout.bounds == [(0, 2), (2, 7), (7, 10)]
    assert layout.numel == 10 and layout.num_modules == 2
    params[1].grad = torch.arange(5.)
    flat, used = layout.flatten()
    assert flat.tolist() == [0, 0, 0, 1, 2, 3, 4, 0, 0, 0]
    assert used.tolist() == [0, 1, 0]
    assert layout.module_sq_norm(flat).tolist() == [0.0, 30.0]


def test_sums_are_float64_accurate_for_float32_gradients():
    """One float32 dot over 10^7 elements is off by ~1e-5 relative; the
    chunked sums stay within 1e-7 (dot) and 1e-8 (norm) of float64."""
    gen = torch.Generator().manual_seed(0)
    n = 10**7 + 3
    layout, _ = _layout([n])
    a = torch.randn(layout.numel, generator=gen)
    b = a + 0.01 * torch.randn(layout.numel, generator=gen)
    exact_dot = a[:n].double().dot(b[:n].double()).item()
    exact_sq = a[:n].double().square().sum().item()
    assert torch.dot(a[:n], b[:n]).item() != pytest.approx(exact_dot,
                                                           rel=1e-6)
    assert layout.module_dot(a, b).item() == pytest.approx(exact_dot,
                                                           rel=1e-7)
    assert layout.module_sq_norm(a).item() == pytest.approx(exact_sq,
                                                            rel=1e-8)


def test_adam_precondition_by_hand():
    """g / (sqrt(v) + eps) where the optimizer has v, g elsewhere."""
    w, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([dict(params=[w], eps=0.5),
                                   dict(params=[b])], lr=0.1)
    optimizer.state[w]['exp_avg_sq'] = torch.tensor([4.0, 9.0])
    flat = torch.tensor([5.0, 7.0, 3.0])
    out = adam_precondition(optimizer, [w, b], flat)
    assert out.tolist() == [5.0 / 2.5, 7.0 / 3.5, 3.0]
