"""mmext.agvm.optim_wrapper: AGVMOptimWrapper in one process (accumulation
halves) and its AMP variant."""
import math
import warnings

import pytest
import torch
from agvm_toy import ToyModel, build_wrapper, toy_batches, train_accumulated
from helpers import CUDA_MARKS, DEVICES
from mmengine.logging import MessageHub
from mmengine.optim import build_optim_wrapper
from torch import nn


class Vector(nn.Module):

    def __init__(self, size):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(size))


class KnownGradients(nn.Module):
    """loss(c) = sum_m w_m . c_m, so each micro-batch's gradient is c."""

    def __init__(self):
        super().__init__()
        self.backbone, self.neck, self.head = Vector(2), Vector(2), Vector(2)
        self.extra = Vector(1)

    def forward(self, coefs):
        return sum((getattr(self, m).w * c).sum() for m, c in coefs.items())


HALF_A = dict(backbone=[1., 0.], neck=[3., 4.], head=[1., 1.], extra=[1.])
HALF_B = dict(backbone=[0., 1.], neck=[3., 0.], head=[-1., -1.], extra=[1.])


def _known_step(wrapper, model, device='cpu'):
    for half in (HALF_A, HALF_B):
        coefs = {m: torch.tensor(v, device=device) for m, v in half.items()}
        with wrapper.optim_context(model):
            loss = model(coefs)
        wrapper.update_params(loss)


def _agvm_cfg(**kwargs):
    cfg = dict(
        type='mmext.AGVMOptimWrapper',
        constructor='mmext.AGVMOptimWrapperConstructor',
        optimizer=dict(type='SGD', lr=0.1),
        module_names=['backbone', 'neck', 'head'],
        accumulative_counts=2, update_interval=1)
    cfg.update(kwargs)
    return cfg


class RecordingVisualizer:
    """Stands in for mmengine's Visualizer: records ``add_scalars`` calls."""

    def __init__(self):
        self.calls = []

    def add_scalars(self, scalars, step=0, **kwargs):
        self.calls.append((step, dict(scalars)))


@pytest.fixture
def visualizer(monkeypatch):
    from mmengine.visualization import Visualizer
    recorder = RecordingVisualizer()
    monkeypatch.setattr(Visualizer, 'get_current_instance',
                        classmethod(lambda cls: recorder))
    return recorder


@pytest.mark.parametrize('device', DEVICES)
def test_factors_and_update_match_hand_computation(visualizer, device):
    model = KnownGradients().to(device)
    wrapper = build_optim_wrapper(model, _agvm_cfg())
    _known_step(wrapper, model, device)
    # Factors and d_i are host scalars (consumed as Python LRs every step).
    assert wrapper.last_variance.device.type == 'cpu'
    assert wrapper.ema.factors.device.type == 'cpu'
    # d = 1 - cos: backbone cos 0 -> 1; neck cos 9/15 -> 0.4; head -> 2.
    torch.testing.assert_close(
        wrapper.last_variance, torch.tensor([1., .4, 2.], dtype=torch.float64))
    mu = [1., math.sqrt(1 / .4), math.sqrt(.5)]
    factors = [0.97 + 0.03 * m for m in mu]
    assert wrapper.ema.factors.tolist() == pytest.approx(factors)
    for i, name in enumerate(['backbone', 'neck', 'head']):
        mean_grad = (torch.tensor(HALF_A[name]) + torch.tensor(HALF_B[name]))
        torch.testing.assert_close(
            getattr(model, name).w.detach().cpu(),
            -0.1 * factors[i] * mean_grad / 2)
    # 'extra' is outside module_names: trained, factor 1.
    torch.testing.assert_close(model.extra.w.detach().cpu(),
                               torch.tensor([-0.1]))
    # The LR seen by schedulers and the logger is restored.
    assert all(g['lr'] == 0.1 for g in wrapper.optimizer.param_groups)
    hub = MessageHub.get_current_instance()
    assert hub.get_scalar('train/agvm_mu/neck').current() == pytest.approx(
        factors[1])
    # d_i and s_i of the re-estimate reach the visualizer at its iteration
    # (2 micro-batches: the step ends at iteration 2).
    assert visualizer.calls == [(2, pytest.approx(dict(
        **{f'agvm_d/{m}': d for m, d in zip(['backbone', 'neck', 'head'],
                                            [1., .4, 2.])},
        **{f'agvm_s/{m}': f for m, f in zip(['backbone', 'neck', 'head'],
                                            factors)})))]


def test_window_and_interval(visualizer):
    model = KnownGradients()
    wrapper = build_optim_wrapper(
        model, _agvm_cfg(start_iter=2, end_iter=6, update_interval=2))
    history = []
    for _ in range(4):
        _known_step(wrapper, model)
        history.append(wrapper.ema.num_updates)
    # steps 0..3 cover iterations 0-1, 2-3, 4-5, 6-7; re-estimate at step 1.
    assert history == [0, 1, 1, 1]
    # One visualizer record per re-estimate, at the step's last iteration.
    assert [step for step, _ in visualizer.calls] == [4]
    hub = MessageHub.get_current_instance()
    assert hub.get_scalar('train/agvm_mu/neck').current() == 1.0


@pytest.mark.parametrize('device', DEVICES)
def test_parameters_outside_modules_change_and_frozen_do_not(device):
    model = ToyModel()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trained, wrapper, _ = train_accumulated(toy_batches(2, 2),
                                            device=device,
                                            module_names=['backbone'])
    after = {k: v.cpu() for k, v in trained.state_dict().items()}
    for name in ['neck.weight', 'head.weight', 'aux.weight']:
        assert not torch.equal(after[name], before[name]), name
    assert torch.equal(after['frozen.weight'], before['frozen.weight'])
    assert torch.equal(after['unused.weight'], before['unused.weight'])
    tags = {g['agvm_module'] for g in wrapper.optimizer.param_groups}
    assert tags == {'backbone', 'others'}


def test_paramwise_cfg_groups_are_tagged_and_scaled():
    model = ToyModel()
    wrapper = build_optim_wrapper(model, dict(
        constructor='mmext.AGVMOptimWrapperConstructor',
        optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
        paramwise_cfg=dict(custom_keys={'head': dict(lr_mult=0.5)}),
        accumulative_counts=2))
    names = {id(p): n for n, p in model.named_parameters()}
    for group in wrapper.optimizer.param_groups:
        for param in group['params']:
            top = names[id(param)].split('.')[0]
            expected = top if top in wrapper.module_names else 'others'
            assert group['agvm_module'] == expected
            assert group['lr'] == (0.05 if top == 'head' else 0.1)
    # Default module_names: top-level children with trainable params.
    assert wrapper.module_names == ['backbone', 'neck', 'head', 'aux',
                                    'unused']
    assert type(wrapper).__name__ == 'AGVMOptimWrapper'


@pytest.mark.parametrize('device', DEVICES)
def test_resume_reproduces_factors(tmp_path, device):
    batches = toy_batches(5, 2)
    model, wrapper, history = train_accumulated(batches, device)
    # Same run interrupted after 3 steps, saved, restored into new objects.
    first, saved, _ = train_accumulated(batches[:3], device)
    torch.save(dict(model=first.state_dict(), optim=saved.state_dict()),
               tmp_path / 'ckpt.pth')
    # mmengine's resume maps the checkpoint to the current device.
    ckpt = torch.load(tmp_path / 'ckpt.pth', map_location=device,
                      weights_only=False)
    resumed = ToyModel().to(device)
    resumed.load_state_dict(ckpt['model'])
    wrapper2 = build_wrapper(resumed, accumulative_counts=2)
    wrapper2.load_state_dict(ckpt['optim'])
    assert wrapper2.ema.factors.tolist() == history[2].tolist()
    assert wrapper2.ema.factors.device.type == 'cpu'
    assert wrapper2.last_variance.device.type == 'cpu'
    # What the train loop does on resume: the counter comes from runner.iter.
    wrapper2.initialize_count_status(resumed, 6, 10)
    for parts in batches[3:]:
        for x, y, use_aux in parts:
            with wrapper2.optim_context(resumed):
                loss = resumed(x.to(device), y.to(device), use_aux)
            wrapper2.update_params(loss)
    torch.testing.assert_close(wrapper2.ema.factors, history[-1])
    for key, value in model.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_checkpoint_of_other_modules_is_rejected():
    _, wrapper, _ = train_accumulated(toy_batches(1, 2))
    other = build_wrapper(ToyModel(), accumulative_counts=2,
                          module_names=['neck', 'head'])
    with pytest.raises(ValueError, match='differ'):
        other.load_state_dict(wrapper.state_dict())


def test_clip_grad_only_inside_window():
    hub = MessageHub.get_instance('agvm_clip_test')
    model = KnownGradients()
    wrapper = build_optim_wrapper(model, _agvm_cfg(
        clip_grad=dict(max_norm=1e-3), clip_grad_window=(2, 4)))
    wrapper.message_hub = hub
    clipped, logged = [], []
    for _ in range(3):
        before = model.neck.w.detach().clone()
        _known_step(wrapper, model)
        clipped.append(
            (model.neck.w.detach() - before).abs().max().item() < 1e-3)
        logged.append('train/grad_norm' in hub.log_scalars)
    assert clipped == [False, True, False]
    # No stale norm once clipping stops: the key leaves the message hub.
    assert logged == [False, True, False]


@pytest.mark.parametrize('device', DEVICES)
def test_adam_statistic_uses_preconditioned_gradient(device):
    model = KnownGradients().to(device)
    wrapper = build_optim_wrapper(model, _agvm_cfg(
        optimizer=dict(type='AdamW', lr=0.01, eps=1e-8), statistic='adam'))
    _known_step(wrapper, model, device)
    flat = torch.ones(wrapper.layout.numel, device=device)
    weights = wrapper._precondition(wrapper.layout.params, flat)
    assert weights.device == torch.device(device)
    v = wrapper.optimizer.state[model.backbone.w]['exp_avg_sq']
    torch.testing.assert_close(weights[:2], 1 / (v.sqrt() + 1e-8))
    _known_step(wrapper, model, device)
    assert torch.isfinite(wrapper.ema.factors).all()
    assert wrapper.ema.num_updates == 2


@pytest.mark.parametrize('kwargs,match', [
    (dict(accumulative_counts=1), 'even number >= 2'),
    (dict(accumulative_counts=3), 'even number >= 2'),
    (dict(module_names=['backbone', 'nope']), "'nope' is not a submodule"),
    (dict(module_names=['frozen', 'head']), 'anchor module'),
    (dict(module_names='backbone'), 'list of module names'),
    (dict(ratio_range=(0, 10)), 'ratio_range'),
    (dict(statistic='lamb'), 'statistic'),
    (dict(update_interval=0), 'update_interval'),
    (dict(ema_momentum=1.0), 'ema_momentum'),
    (dict(start_iter=10, end_iter=5), 'end_iter'),
    (dict(clip_grad_window=(5, 5)), 'clip_grad_window'),
    (dict(update_intervall=3),
     r"unknown options \['update_intervall'\]; its options are .*"
     r"'update_interval'"),
    (dict(module_names=[]), 'module_names is empty'),
    (dict(module_names=['', 'head']), 'whole model'),
    (dict(module_names=['backbone', 'frozen']), r"\['frozen'\] own no"),
    (dict(module_names=['head', 'backbone', 'backbone.0', 'backbone.2']),
     r"\['backbone'\] own no"),
    (dict(statistic='adam'), 'Adam-family'),
    (dict(type='OptimWrapper'), "type='mmext.AGVMOptimWrapper'"),
])
def test_bad_configs_raise_at_build(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_wrapper(ToyModel(), **{'accumulative_counts': 2, **kwargs})


def test_wrapper_without_constructor_says_what_to_set():
    with pytest.raises(ValueError, match='AGVMOptimWrapperConstructor'):
        build_optim_wrapper(ToyModel(), dict(
            type='mmext.AGVMOptimWrapper', optimizer=dict(type='SGD', lr=.1),
            module_names=['backbone'], accumulative_counts=2))


def test_resume_from_a_run_without_agvm_says_what_to_do():
    plain = build_optim_wrapper(ToyModel(), dict(
        optimizer=dict(type='SGD', lr=0.1)))
    wrapper = build_wrapper(ToyModel(), accumulative_counts=2)
    with pytest.raises(ValueError, match='load_from=CKPT'):
        wrapper.load_state_dict(plain.state_dict())


@pytest.mark.parametrize('kwargs,max_iters,expected', [
    (dict(start_iter=100), 100, [
        'AGVM start_iter=100 is not before the end of training '
        '(max_iters=100), so AGVM never modulates the LR']),
    (dict(start_iter=10, end_iter=500), 100, [
        'AGVM end_iter=500 lies after the end of training (max_iters=100); '
        'AGVM runs to the end']),
    (dict(clip_grad=dict(max_norm=1.), clip_grad_window=(100, 200)), 50, [
        'clip_grad_window=(100, 200) begins after the end of training '
        '(max_iters=50), so gradients are never clipped']),
    (dict(start_iter=200, clip_grad=dict(max_norm=1.),
          clip_grad_window=(0, 200)), 150, [
        'AGVM start_iter=200 is not before the end of training',
        'clip_grad_window=(0, 200) ends after the end of training '
        '(max_iters=150); gradients are clipped to the end']),
    (dict(start_iter=10, end_iter=90, clip_grad=dict(max_norm=1.),
          clip_grad_window=(0, 10)), 100, []),
])
def test_window_outside_the_run_warns(kwargs, max_iters, expected):
    model = ToyModel()
    wrapper = build_wrapper(model, accumulative_counts=2, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        wrapper.initialize_count_status(model, 0, max_iters)
    messages = [str(w.message) for w in caught]
    assert len(messages) == len(expected)
    for message, start in zip(messages, expected):
        assert message.startswith(start), message


def test_clip_grad_window_without_clip_grad_raises():
    with pytest.raises(ValueError, match=r'clip_grad_window=\(0, 10\) limits '
                       'clip_grad, which is not set'):
        build_wrapper(ToyModel(), accumulative_counts=2,
                      clip_grad_window=(0, 10))


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
