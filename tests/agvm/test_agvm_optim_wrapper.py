"""mmext.agvm.optim_wrapper: AGVMOptimWrapper in one process (accumulation
halves); its options, checked by name, type and range when it is built; its
start-of-run summary; the checks it makes when training starts, with
mmengine's Runner as with mmext.Runner; the AMP variant."""
import inspect
import math
import os.path as osp
import re
import uuid
import warnings

import pytest
import torch
from agvm_toy import ToyModel, build_wrapper, toy_batches, train_accumulated
from helpers import (CUDA_MARKS, DEVICES, REPO_ROOT, ToyRegressionData,
                     ToyRegressor, toy_loader)
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.logging import MessageHub
from mmengine.optim import OptimWrapperDict, build_optim_wrapper
from mmengine.registry import (DATASETS, HOOKS, MODELS,
                               OPTIM_WRAPPER_CONSTRUCTORS)
from mmengine.runner import Runner as MMEngineRunner
from torch import nn

from mmext.agvm import AGVMOptimWrapper
from mmext.agvm.optim_wrapper import (ema_interval_messages,
                                      halves_description, run_summary)
from mmext.agvm.schedule import AGVMSchedule
from bench_utils import build_runner
from mmext.compat import trusted_checkpoint_loading


@pytest.fixture(autouse=True)
def fresh_message_hub():
    """A wrapper reads the run's config from the current message hub; a
    runner of an earlier test must not leave its config there."""
    MessageHub.get_instance(f'agvm_test_{uuid.uuid4().hex}')


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
                                            module_names=['backbone',
                                                          'neck'])
    after = {k: v.cpu() for k, v in trained.state_dict().items()}
    for name in ['head.weight', 'aux.weight']:
        assert not torch.equal(after[name], before[name]), name
    assert torch.equal(after['frozen.weight'], before['frozen.weight'])
    assert torch.equal(after['unused.weight'], before['unused.weight'])
    tags = {g['agvm_module'] for g in wrapper.optimizer.param_groups}
    assert tags == {'backbone', 'neck', 'others'}


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
    with pytest.raises(ValueError, match=re.escape(
            "module_names=['backbone', 'neck', 'head']")):
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
    weights = wrapper.precondition(wrapper.layout.params, flat)
    assert weights.device == torch.device(device)
    v = wrapper.optimizer.state[model.backbone.w]['exp_avg_sq']
    torch.testing.assert_close(weights[:2], 1 / (v.sqrt() + 1e-8))
    _known_step(wrapper, model, device)
    assert torch.isfinite(wrapper.ema.factors).all()
    assert wrapper.ema.num_updates == 2


@pytest.mark.parametrize('kwargs,match', [
    (dict(accumulative_counts=1), 'accumulative_counts >= 2, got 1'),
    (dict(accumulative_counts=3), 'accumulative_counts >= 2, got 3'),
    (dict(module_names=['backbone', 'nope']), "'nope' is not a submodule"),
    (dict(module_names=['frozen', 'head']), "anchor 'frozen'"),
    (dict(module_names='backbone'), 'a list of submodule names'),
    (dict(start_iter=5, end_iter=5), r'integer > start_iter \(5\)'),
    (dict(ratio_range=(0, 10)), 'ratio_range'),
    (dict(statistic='lamb'), 'statistic'),
    (dict(update_interval=0), 'update_interval'),
    (dict(ema_momentum=1.0), 'ema_momentum'),
    (dict(start_iter=10, end_iter=5), 'end_iter'),
    (dict(clip_grad_window=(5, 5)), 'clip_grad_window'),
    (dict(module_names=[]), 'module_names is empty'),
    (dict(module_names=['', 'head']), 'whole model'),
    (dict(module_names=['backbone', 'frozen']), r"'frozen' owns no .* \(frozen"),
    (dict(module_names=['head', 'backbone', 'backbone.0', 'backbone.2']),
     "'backbone' owns no"),
    (dict(statistic='adam'),
     re.escape('needs exp_avg_sq (Adam, AdamW, LAMB), got SGD')),
    (dict(statistic='adam', optimizer=dict(type='Adamax', lr=0.01)),
     'exp_avg_sq .* got Adamax'),
    (dict(type='OptimWrapper'), "type='mmext.AGVMOptimWrapper'"),
])
def test_bad_configs_raise_at_build(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_wrapper(ToyModel(), **{'accumulative_counts': 2, **kwargs})


@pytest.mark.parametrize('kwargs,message', [
    (dict(start_iters=5), "AGVMOptimWrapper got an unexpected option "
     "'start_iters': did you mean 'start_iter'?"),
    (dict(clip_grads=dict(max_norm=1.)), "unexpected option 'clip_grads': "
     "did you mean 'clip_grad'?"),  # mmengine's OptimWrapper option
    (dict(warmup=10), "AGVMOptimWrapper got an unexpected option 'warmup'"),
])
def test_a_misspelt_option_is_named_with_the_one_meant(kwargs, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        build_wrapper(ToyModel(), accumulative_counts=2, **kwargs)


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
    (dict(start_iter=100), 100, ['start_iter=100 >= max_iters=100']),
    (dict(start_iter=10, end_iter=500), 100, ['end_iter=500 > max_iters=100']),
    (dict(clip_grad=dict(max_norm=1.), clip_grad_window=(100, 200)), 50,
     ['clip_grad_window=(100, 200) begins after max_iters=50']),
    (dict(start_iter=200, clip_grad=dict(max_norm=1.),
          clip_grad_window=(0, 200)), 150, [
        'start_iter=200 >= max_iters=150',
        'clip_grad_window=(0, 200) ends after max_iters=150']),
    (dict(start_iter=10, end_iter=90, clip_grad=dict(max_norm=1.),
          clip_grad_window=(0, 10)), 100, []),
])
def test_window_outside_the_run_warns(kwargs, max_iters, expected):
    """Warned when training starts, by any runner's train loop."""
    model = ToyModel()
    wrapper = build_wrapper(model, accumulative_counts=2, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        wrapper.initialize_count_status(model, 0, max_iters)
    messages = [str(w.message) for w in caught
                if 'start checks skipped' not in str(w.message)]
    assert len(messages) == len(expected)
    for message, fragment in zip(messages, expected):
        assert fragment in message, message


def test_clip_grad_window_without_clip_grad_raises():
    with pytest.raises(ValueError,
                       match=r'clip_grad_window=\(0, 10\) needs clip_grad'):
        build_wrapper(ToyModel(), accumulative_counts=2,
                      clip_grad_window=(0, 10))


@pytest.mark.parametrize('bad', [math.nan, math.inf])
@pytest.mark.parametrize('module', ['neck', 'backbone'])
def test_non_finite_gradient_stops_before_the_step(visualizer, module, bad):
    """A NaN/inf in one half's gradient of a module at a re-estimate:
    FloatingPointError naming the module, before the optimizer step (as
    NaNGuardHook's default); the factors and weights do not move."""
    model = KnownGradients()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrapper = build_optim_wrapper(model, _agvm_cfg())
    half_b = dict(HALF_B, **{module: [bad, 1.]})
    with wrapper.optim_context(model):
        loss = model({m: torch.tensor(v) for m, v in HALF_A.items()})
    wrapper.update_params(loss)
    with wrapper.optim_context(model):
        loss = model({m: torch.tensor(v) for m, v in half_b.items()})
    with pytest.raises(FloatingPointError,
                       match=re.escape(f"['{module}'] at iteration 2")):
        wrapper.update_params(loss)
    assert wrapper.ema.factors.tolist() == [1.0, 1.0, 1.0]
    assert wrapper.ema.num_updates == 0 and visualizer.calls == []
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


class NaNAtIteration5(ToyRegressor):
    """A NaN loss at (0-based) iteration 5, a re-estimate step's last
    micro-batch (as a zero-size box gives in mmdet's box losses)."""

    calls = 0

    def forward(self, inputs, labels=None, mode='tensor', **kwargs):
        out = super().forward(inputs, labels, mode, **kwargs)
        if mode == 'loss':
            type(self).calls += 1
            if type(self).calls == 6:
                out['loss'] = out['loss'] * math.nan
        return out


MODELS.register_module(name='NaNAtIteration5', module=NaNAtIteration5,
                       force=True)


class HeadFactors(Hook):
    """Records the head's AGVM factor after every iteration."""

    def __init__(self):
        self.factors = []

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        self.factors.append(runner.optim_wrapper.ema.factors[-1].item())


@pytest.mark.parametrize('action', ['skip', 'stop'])
def test_non_finite_gradient_is_left_to_nan_guard_hook(tmp_path, monkeypatch,
                                                       action):
    """With mmext.NaNGuardHook checking gradients, AGVM skips the
    re-estimate saying so, and the guard stops or skips the step with its
    own message; the factors do not move at that step."""
    logged = []
    monkeypatch.setattr('mmext.agvm.optim_wrapper.print_log',
                        lambda msg, **kwargs: logged.append(msg))
    NaNAtIteration5.calls = 0
    cfg = _cfg(tmp_path, 4, [dict(type='mmext.NaNGuardHook', action=action)],
               model=dict(type='NaNAtIteration5'))
    cfg.optim_wrapper.update_interval = 1
    runner = MMEngineRunner.from_cfg(cfg)
    recorder = HeadFactors()
    runner.register_hook(recorder, 'LOWEST')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        if action == 'stop':
            with pytest.raises(FloatingPointError, match='Non-finite loss'):
                runner.train()
        else:
            runner.train()
    skipped = [m for m in logged if 'skipped the re-estimate' in m]
    assert len(skipped) == 1
    assert "of ['backbone', 'head'] at iteration 6 (NaNGuardHook" in (
        skipped[0])
    # The first re-estimate (iterations 4-5) is skipped, the next moves.
    factors = recorder.factors
    assert factors[:5] == [1.0] * 5
    if action == 'skip':
        assert factors[5] == 1.0 != factors[7]
    assert all(math.isfinite(f) for f in factors)


def test_summary_is_logged_when_training_starts(monkeypatch):
    logged = []
    monkeypatch.setattr('mmext.agvm.optim_wrapper.print_log',
                        lambda msg, **kwargs: logged.append(msg))
    model = KnownGradients()
    wrapper = build_optim_wrapper(model, _agvm_cfg(start_iter=4))
    wrapper.initialize_count_status(model, 0, 10)
    assert logged == [wrapper.summary(10)]
    first = logged[0].splitlines()[0]
    assert "3 modulated modules, anchor (module 0) 'backbone'" in first


# ------------------------------------------------------------------ options
BAD = [
    # (option, value): one per option and kind of mistake
    ('start_iter', '10'), ('start_iter', -1), ('start_iter', 10.0),
    ('end_iter', '100'), ('end_iter', 0),
    ('update_interval', 2.5), ('update_interval', 0),
    ('update_interval', True),
    ('accumulative_counts', '2'), ('accumulative_counts', 0),
    ('ratio_range', 10), ('ratio_range', (0, 10)), ('ratio_range', (10, 0.5)),
    ('ratio_range', ('0.5', 10)), ('ratio_range', (0.5, 5, 10)),
    ('ema_momentum', 'x'), ('ema_momentum', 1.0), ('ema_momentum', -0.1),
    ('clip_grad_window', 560), ('clip_grad_window', (560, 360)),
    ('clip_grad_window', ('360', 560)),
    ('statistic', 'lamb'),
    ('module_names', 'backbone'), ('module_names', ['backbone', 3]),
]


@pytest.mark.parametrize('option, value', BAD,
                         ids=[f'{b[0]}={b[1]!r}' for b in BAD])
def test_each_bad_option_is_named_with_its_value(option, value):
    """Checked where the wrapper is built (module_names where the
    constructor resolves them, before the wrapper exists)."""
    options = dict(accumulative_counts=2)
    options[option] = value
    with pytest.raises(ValueError, match=re.escape(f'{option}={value!r}')):
        build_wrapper(ToyModel(), **options)


@pytest.mark.parametrize('option, value, expected', [
    ('end_iter', 0, 'None or an integer > start_iter (0), e.g. end_iter=None'),
    ('statistic', 'lamb', "one of ['grad', 'adam'], e.g. statistic='grad'"),
])
def test_a_bad_option_says_what_is_expected(option, value, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        build_wrapper(ToyModel(), accumulative_counts=2, **{option: value})


def test_options_are_the_signature_and_a_misspelt_one_is_a_type_error():
    assert {'update_interval', 'statistic', 'clip_grad_window',
            'accumulative_counts', 'clip_grad'} <= set(inspect.signature(
                AGVMOptimWrapper).parameters)
    with pytest.raises(TypeError, match="'start_iters'"):
        build_wrapper(ToyModel(), accumulative_counts=2, start_iters=10)


def test_good_options_and_config_keys_pass():
    wrapper = build_optim_wrapper(ToyModel(), dict(
        type='mmext.AGVMOptimWrapper',
        constructor='mmext.AGVMOptimWrapperConstructor',
        optimizer=dict(type='AdamW', lr=0.1), paramwise_cfg={},
        base_constructor='DefaultOptimWrapperConstructor',
        module_names=('backbone', 'neck'), start_iter=560, end_iter=None,
        update_interval=10, accumulative_counts=2, ratio_range=[0.5, 10],
        ema_momentum=0, clip_grad_window=[360, 560], statistic='adam',
        clip_grad=dict(max_norm=1.0)))
    schedule = wrapper.schedule
    assert (schedule.start_iter, schedule.end_iter, schedule.update_interval,
            schedule.accumulative_counts, schedule.clip_grad_window) == (
                560, math.inf, 10, 2, (360, 560))
    assert (wrapper.module_names, wrapper.ratio_range, wrapper.ema.momentum,
            wrapper.statistic) == (['backbone', 'neck'], (0.5, 10), 0,
                                   'adam')


# ---------------------------------------------------------------- summary
def test_halves_of_ranks_and_of_micro_batches():
    assert halves_description(8, 1) == 'ranks 0-3 vs ranks 4-7 (world size 8)'
    assert halves_description(2, 2) == 'rank 0 vs rank 1 (world size 2)'
    odd = halves_description(5, 1)
    assert odd.startswith('ranks 0-1 vs ranks 2-3 (world size 5; rank 4 ')
    assert 'neither half' in odd
    assert halves_description(1, 2).startswith(
        'micro-batch 1 vs micro-batch 2 of the 2 accumulated')
    assert halves_description(1, 4).startswith(
        'micro-batches 1-2 vs micro-batches 3-4 of the 4 accumulated')


def test_block_of_a_paper_recipe():
    schedule = AGVMSchedule(10, 560, None, 1, (360, 560))
    lines = run_summary(['backbone', 'neck', 'rpn_head', 'roi_head'],
                        [23508032, 3344384, 593935, 13957970, 0],
                        halves_description(32, 1), schedule, True, 'grad',
                        14656).splitlines()
    assert lines[:6] == [
        "AGVM: 4 modulated modules, anchor (module 0) 'backbone':",
        'AGVM:   backbone   23,508,032 parameters',
        'AGVM:   neck        3,344,384 parameters',
        'AGVM:   rpn_head      593,935 parameters',
        'AGVM:   roi_head   13,957,970 parameters',
        'AGVM: halves: ranks 0-15 vs ranks 16-31 (world size 32)']
    assert lines[6].startswith('AGVM: active from iteration 560 to the end ')
    assert 're-estimates every 10 optimizer step(s) of 1 iteration(s)' in (
        lines[6])
    assert "statistic 'grad'" in lines[6]
    assert lines[7].startswith('AGVM: gradient clipping in iterations ')
    assert lines[7].endswith('[360, 560] only (clip_grad_window)')
    assert len(lines) == 8


def test_block_with_others_an_end_and_no_clipping():
    schedule = AGVMSchedule(2, 4, 90, 2)
    lines = run_summary(['backbone', 'head'], [10, 4, 3],
                        halves_description(1, 2), schedule, False, 'adam',
                        100).splitlines()
    assert lines[3].split() == ['AGVM:', 'others', '3', 'parameters',
                                '(outside', 'module_names:', 'factor', '1)']
    assert lines[5].startswith('AGVM: active from iteration 4 to ')
    assert 'iteration 90 of 100 (runner iterations)' in lines[5]
    assert 'every 2 optimizer step(s) of 2 iteration(s)' in lines[5]
    assert lines[6] == 'AGVM: gradient clipping off (no clip_grad)'
    schedule = AGVMSchedule(accumulative_counts=2)
    assert run_summary(['b'], [1, 0], 'x', schedule, True, 'grad').endswith(
        'AGVM: gradient clipping at every step')


# ------------------------------------- checks when training starts (runners)
MODELS.register_module(name='ChecksToyModel', module=ToyRegressor, force=True)
DATASETS.register_module(name='ChecksToyData', module=ToyRegressionData,
                         force=True)
RUNNERS = ['mmengine', 'mmext']


def _cfg(tmp_path, start_iter=0, custom_hooks=(), by_epoch=False, **kwargs):
    """8 iterations of 2 images per epoch, 2 micro-batches per step, no
    ``runner_type``; a warm-up over the first 6 iterations (by_epoch: the
    first epoch, i.e. iterations [0, 8))."""
    warmup = (dict(type='mmext.ExpWarmupLR', by_epoch=False, end=6)
              if not by_epoch else dict(type='LinearLR', start_factor=0.1,
                                        by_epoch=True, end=1))
    cfg = dict(
        model=dict(type='ChecksToyModel'), work_dir=str(tmp_path),
        # Its own message hub, which the wrapper reads the config from (a
        # runner reuses the hub of an experiment of the same name).
        experiment_name=f'agvm_{uuid.uuid4().hex}',
        train_dataloader=toy_loader('ChecksToyData', 2),
        train_cfg=dict(by_epoch=True, max_epochs=2),
        param_scheduler=[warmup],
        optim_wrapper=dict(
            type='mmext.AGVMOptimWrapper',
            constructor='mmext.AGVMOptimWrapperConstructor',
            optimizer=dict(type='SGD', lr=0.1), accumulative_counts=2,
            start_iter=start_iter),
        custom_hooks=list(custom_hooks), launcher='none',
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=10)),
        env_cfg=dict(dist_cfg=dict(backend='gloo')))
    cfg.update(kwargs)
    return Config(cfg)


def _runner(cfg, runner):
    """mmengine's own Runner (the config keeps no runner_type, as the
    toolboxes' tools/train.py builds it) or mmext.Runner (mmext's tools)."""
    return (MMEngineRunner.from_cfg(cfg) if runner == 'mmengine' else
            build_runner(cfg))


def _start_warnings(tmp_path, runner, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        _runner(_cfg(tmp_path, *args, **kwargs), runner).train()
    return [str(w.message) for w in caught if 'AGVM start_iter' in str(
        w.message) or 'EMAHook' in str(w.message)]


@pytest.mark.parametrize('runner', RUNNERS)
@pytest.mark.parametrize('start_iter, by_epoch, warned', [
    (2, False, 'mmext.ExpWarmupLR warm-up [0, 6)'),
    (6, False, None),
    (4, True, 'LinearLR warm-up [0, 8)'),
    (8, True, None),
])
def test_start_inside_the_warmup_warns(tmp_path, runner, start_iter,
                                       by_epoch, warned):
    messages = _start_warnings(tmp_path, runner, start_iter,
                               by_epoch=by_epoch)
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warned in messages[0], messages
        assert f'start_iter={start_iter} is inside' in messages[0]


@pytest.mark.parametrize('runner', RUNNERS)
def test_start_checks_read_the_config_object(tmp_path, runner):
    """A value whose printed form is no Python (``inf``) does not hide
    the config from the checks."""
    messages = _start_warnings(tmp_path, runner, 2, threshold=float('inf'))
    assert len(messages) == 1 and 'warm-up [0, 6)' in messages[0], messages


def test_start_checks_without_a_runner_say_they_are_skipped():
    model = ToyModel()
    wrapper = build_wrapper(model, accumulative_counts=2, start_iter=2)
    with pytest.warns(UserWarning, match='start checks skipped'):
        wrapper.initialize_count_status(model, 0, 10)


@pytest.mark.parametrize('runner', RUNNERS)
def test_ema_hook_with_accumulation_warns_with_the_interval(tmp_path,
                                                            runner):
    (message, ) = _start_warnings(tmp_path / 'every', runner, 6,
                                  [dict(type='EMAHook')])
    assert message.startswith('EMAHook interval=1 averages'), message
    assert message.endswith('set interval=2'), message
    assert _start_warnings(tmp_path / 'per_step', runner, 6,
                           [dict(type='EMAHook', interval=2)]) == []


def test_ema_hook_among_the_default_hooks_is_seen_too(tmp_path):
    cfg = _cfg(tmp_path, 6)
    cfg.default_hooks.ema = dict(type='EMAHook')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        MMEngineRunner.from_cfg(cfg).train()
    assert [str(w.message) for w in caught
            if 'EMAHook interval=1' in str(w.message)]


def test_ema_interval_rule():
    hooks = [dict(type='EMAHook', interval=4), dict(type='EMAHook',
                                                    interval=3),
             dict(type='mmdet.EMAHook'), dict(type='CheckpointHook')]
    assert len(ema_interval_messages(hooks, 2)) == 2  # 3 and 1
    assert ema_interval_messages(hooks, 1) == []


class FrozenBackboneToy(ToyRegressor):
    """The backbone frozen when the model is built (as ``frozen_stages``)."""

    def __init__(self):
        super().__init__()
        self.backbone.requires_grad_(False)


class UnfreezeAtEpoch1(Hook):
    """A fine-tuning hook: the backbone trains from epoch 1 on."""

    def before_train_epoch(self, runner):
        if runner.epoch == 1:
            runner.model.backbone.requires_grad_(True)


MODELS.register_module(name='FrozenBackboneToy', module=FrozenBackboneToy,
                       force=True)
HOOKS.register_module(name='UnfreezeAtEpoch1', module=UnfreezeAtEpoch1,
                      force=True)


def test_a_backbone_unfrozen_by_a_hook_trains_as_with_mmengine(tmp_path):
    """Frozen parameters stay in the optimizer, as mmengine keeps them:
    unfrozen in epoch 1, the backbone trains as with mmengine's wrapper
    (the one modulated module, the head, is its own anchor: factor 1)."""
    states = {}
    for name, wrapper in (('agvm', {}), ('mmengine', dict(optim_wrapper=dict(
            optimizer=dict(type='SGD', lr=0.1), accumulative_counts=2)))):
        cfg = _cfg(tmp_path / name, 6, [dict(type='UnfreezeAtEpoch1')],
                   model=dict(type='FrozenBackboneToy'), **wrapper)
        runner = MMEngineRunner.from_cfg(cfg)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            runner.train()
        states[name] = runner.model.state_dict()
    before = FrozenBackboneToy().backbone.weight
    assert (states['agvm']['backbone.weight'] - before).abs().max() > 1e-3
    for key, value in states['mmengine'].items():
        torch.testing.assert_close(states['agvm'][key], value)


class OneOptimizerPerModule:
    """A multi-optimizer constructor as GAN recipes use (mmagic's
    ``MultiOptimWrapperConstructor``): an ``OptimWrapperDict`` of one
    wrapper per top-level module."""

    def __init__(self, optim_wrapper_cfg, paramwise_cfg=None):
        self.cfgs = optim_wrapper_cfg

    def __call__(self, model):
        return OptimWrapperDict(**{
            name: build_optim_wrapper(getattr(model, name), cfg)
            for name, cfg in self.cfgs.items()})


OPTIM_WRAPPER_CONSTRUCTORS.register_module(
    name='OneOptimizerPerModule', module=OneOptimizerPerModule, force=True)


@pytest.mark.parametrize('runner', RUNNERS)
def test_agvm_in_an_optim_wrapper_dict_is_refused_by_name(tmp_path, runner):
    """mmengine's OptimWrapperDict never initializes its wrappers' counters
    (resume, window, start checks): refused while the runner builds it."""
    agvm = dict(type='mmext.AGVMOptimWrapper', accumulative_counts=2,
                constructor='mmext.AGVMOptimWrapperConstructor',
                optimizer=dict(type='SGD', lr=0.1))
    cfg = _cfg(tmp_path, optim_wrapper=dict(
        constructor='OneOptimizerPerModule', backbone=agvm,
        head=dict(optimizer=dict(type='SGD', lr=0.1))))
    built = _runner(cfg, runner)
    with pytest.raises(ValueError, match=re.escape(
            "OptimWrapperDict ['backbone', 'head']: not supported")):
        built.train()
    assert built.iter == 0


def test_mmengine_auto_scale_lr_with_accumulation_is_refused(tmp_path):
    runner = _runner(_cfg(tmp_path, auto_scale_lr=dict(
        enable=True, base_batch_size=8)), 'mmengine')
    with pytest.raises(ValueError, match='accumulative_counts=2'):
        runner.train()
    assert runner.iter == 0


def test_safeguards_with_mmdets_own_train_tool(tmp_path, demo_data):
    """mmdet's own tools/train.py on the AGVM demo config with mmengine's
    Runner (runner_type=Runner): the start check warns into the run's log
    file, and auto_scale_lr with accumulation is refused before training."""
    import glob
    import importlib
    import subprocess
    import sys
    tool = osp.join(osp.dirname(importlib.import_module('mmdet').__file__),
                    '.mim', 'tools', 'train.py')
    config = osp.join(REPO_ROOT, 'configs', 'demo',
                      'faster-rcnn_r18_fpn_agvm_demo-det.py')

    def train(work_dir, *args):
        return subprocess.run(
            [sys.executable, tool, config, '--work-dir', str(work_dir),
             *args, '--cfg-options', 'runner_type=Runner',
             'train_cfg.max_epochs=1', 'train_cfg.val_interval=9',
             'train_dataloader.dataset.indices=4'],
            capture_output=True, text=True, timeout=600)

    warned = train(tmp_path / 'warn', '--cfg-options',
                   'optim_wrapper.start_iter=2')
    assert warned.returncode == 0, warned.stderr[-3000:]
    [log] = glob.glob(str(tmp_path / 'warn' / '*' / '*.log'))
    with open(log) as f:
        assert 'AGVM start_iter=2 is inside' in f.read()
    refused = train(tmp_path / 'refuse', '--auto-scale-lr')
    assert refused.returncode != 0
    assert 'accumulative_counts=2' in refused.stderr
    assert 'Epoch(train)' not in refused.stdout + refused.stderr


@pytest.mark.parametrize('runner', RUNNERS)
def test_a_bad_option_is_refused_before_the_first_step(tmp_path, runner):
    cfg = _cfg(tmp_path)
    cfg.optim_wrapper.accumulative_counts = '2'
    built = _runner(cfg, runner)
    with pytest.raises(ValueError, match="accumulative_counts='2'"):
        built.train()
    assert built.iter == 0


def test_plain_checkpoint_into_agvm_config_is_refused_by_mmengine(tmp_path):
    """mmengine's Runner resumes into the wrapper's own load_state_dict."""
    plain = _runner(_cfg(tmp_path / 'plain', optim_wrapper=dict(
        optimizer=dict(type='SGD', lr=0.1))), 'mmengine')
    plain.train()
    cfg = _cfg(tmp_path / 'agvm', train_cfg=dict(by_epoch=True,
                                                 max_epochs=3))
    cfg.resume, cfg.load_from = True, str(tmp_path / 'plain' / 'epoch_2.pth')
    runner = _runner(cfg, 'mmengine')
    with trusted_checkpoint_loading(), pytest.raises(
            ValueError, match='no AGVM state'):
        runner.train()
    assert runner.iter == 16  # the checkpoint's: no step was taken


# --------------------------------------------------------------------- AMP
@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA present')
def test_amp_variant_runs_mmengine_amp_set_up():
    """AmpOptimWrapper's own construction runs (and refuses a CPU-only
    machine)."""
    with pytest.raises(AssertionError, match='only available training on '
                       'gpu'):
        build_wrapper(ToyModel(), type='mmext.AGVMAmpOptimWrapper',
                      accumulative_counts=2)


def test_amp_variant_passes_its_options_on(monkeypatch):
    """dtype reaches AmpOptimWrapper; a misspelt option is a TypeError
    (CUDA faked: AmpOptimWrapper asserts it first)."""
    from mmengine.optim.optimizer import amp_optimizer_wrapper
    monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available',
                        lambda: True)
    wrapper = build_wrapper(ToyModel(), type='mmext.AGVMAmpOptimWrapper',
                            accumulative_counts=2, dtype='bfloat16')
    assert wrapper.cast_dtype == torch.bfloat16
    assert wrapper.schedule.accumulative_counts == 2
    with pytest.raises(TypeError, match="'loss_scal'"):
        build_wrapper(ToyModel(), type='mmext.AGVMAmpOptimWrapper',
                      accumulative_counts=2, loss_scal='dynamic')


def test_amp_leaves_non_finite_gradients_to_the_loss_scaler(monkeypatch):
    """Scaled gradients overflow by design; the scaler skips the step and
    lowers the scale: AGVM skips the re-estimate instead of stopping."""
    from mmengine.optim.optimizer import amp_optimizer_wrapper
    monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available',
                        lambda: True)
    logged = []
    monkeypatch.setattr('mmext.agvm.optim_wrapper.print_log',
                        lambda msg, **kwargs: logged.append(msg))
    wrapper = build_wrapper(ToyModel(), type='mmext.AGVMAmpOptimWrapper',
                            accumulative_counts=2)
    wrapper._non_finite(3, ['neck'])
    assert len(logged) == 1 and logged[0].startswith('AGVM skipped the')
    assert "['neck'] at iteration 8 (the loss scaler handles" in logged[0]


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
