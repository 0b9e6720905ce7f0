"""AGVM as a drop-in for mmengine's ``OptimWrapper`` and
``DefaultOptimWrapperConstructor``: the behaviours mmengine 0.10.7's own
optimizer tests check (tests/test_optim/test_optimizer/test_optimizer.py,
test_optimizer_wrapper.py), each asserted against what mmengine gives for
the same config, with the AGVM classes: build (per-parameter options, the
exception types), step, zero_grad, update_params, state_dict, get_lr /
get_momentum, param_groups, optim_context under DDP, ZeRO.
"""
import copy
import os
import warnings

import pytest
import torch
import torch.distributed as dist
from agvm_toy import (ToyModel, build_wrapper, run_processes, toy_batches,
                      train_accumulated)
from mmengine.optim import build_optim_wrapper
from torch import nn

from mmext.agvm import AGVMOptimWrapper

AGVM = dict(type='mmext.AGVMOptimWrapper',
            constructor='mmext.AGVMOptimWrapperConstructor',
            accumulative_counts=2)
SGD = dict(type='SGD', lr=0.01, momentum=0.0001, weight_decay=0.9)


def _options(optimizer, model):
    """Parameter name -> its group's options, without AGVM's tag."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {
        names[id(param)]: {k: v for k, v in group.items()
                           if k not in ('params', 'agvm_module')}
        for group in optimizer.param_groups for param in group['params']
    }


# ------------------------------------------------------------------ build
class ExampleModel(nn.Module):
    """mmengine's test model (without the DCN layer): a direct parameter,
    convolutions with and without bias, BN, and a sub-module with a
    depth-wise convolution, GN and its own direct parameter."""

    def __init__(self):
        super().__init__()
        self.param1 = nn.Parameter(torch.ones(1))
        self.conv1 = nn.Conv2d(3, 4, kernel_size=1, bias=False)
        self.conv2 = nn.Conv2d(4, 2, kernel_size=1)
        self.bn = nn.BatchNorm2d(2)
        self.sub = nn.Module()
        self.sub.conv1 = nn.Conv2d(2, 2, kernel_size=1, groups=2)
        self.sub.gn = nn.GroupNorm(2, 2)
        self.sub.param1 = nn.Parameter(torch.ones(1))


class ExampleDuplicateModel(ExampleModel):
    """mmengine's: ``conv3`` ties its only convolution to ``conv1``'s."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, 4, kernel_size=1, bias=False))
        self.conv3 = nn.Sequential(self.conv1[0])


MULTS = dict(bias_lr_mult=2, bias_decay_mult=0.5, norm_decay_mult=0,
             dwconv_decay_mult=0.1, dcn_offset_lr_mult=0.1)
# mmengine's paramwise configurations: (model, optimizer, paramwise_cfg).
BUILDS = {
    'default': (ExampleModel, SGD, None),
    'empty_paramwise': (ExampleModel, SGD, {}),
    'mults': (ExampleModel, SGD, dict(MULTS, flat_decay_mult=0.3)),
    'mults_no_grad': (ExampleModel, SGD, MULTS),
    'no_grad': (ExampleModel, SGD, None),
    'custom_keys': (ExampleModel, SGD, dict(custom_keys={
        'param1': dict(lr_mult=10), 'sub': dict(lr_mult=0.1, decay_mult=0),
        'sub.gn': dict(lr_mult=0.01), 'non_exist_key': dict(lr_mult=0.0)},
        norm_decay_mult=0.5)),
    'custom_keys_no_decay': (ExampleModel, dict(SGD, weight_decay=0), dict(
        custom_keys={'param1': dict(lr_mult=10)})),
    'bypass_duplicate': (ExampleDuplicateModel, SGD, dict(
        MULTS, flat_decay_mult=0.3, bypass_duplicate=True)),
}


@pytest.mark.parametrize('case', BUILDS)
def test_build_gives_every_parameter_mmengines_options(case):
    """The optimizer holds the parameters mmengine's constructor gives it,
    each with the same lr, weight decay, momentum..., and the same
    defaults; the groups are split by module."""
    model_type, optimizer, paramwise_cfg = BUILDS[case]
    model = model_type()
    if case.endswith('no_grad'):
        model.conv1.requires_grad_(False)
    cfg = dict(optimizer=optimizer, paramwise_cfg=paramwise_cfg)
    expected = build_optim_wrapper(model, cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        agvm = build_optim_wrapper(model, dict(AGVM, **cfg))
    # AGVM's own warnings: a custom key matching nothing, a frozen anchor.
    assert [str(w.message).split(' match')[0] for w in caught
            if 'custom_keys' in str(w.message)] == (
                ["paramwise_cfg.custom_keys ['non_exist_key']"]
                if case == 'custom_keys' else [])
    assert type(agvm.optimizer) is type(expected.optimizer)
    assert agvm.optimizer.defaults == expected.optimizer.defaults
    got = _options(agvm.optimizer, model)
    assert got == _options(expected.optimizer, model)
    # Spot checks against mmengine's own expectations.
    if case == 'mults':
        assert got['conv2.bias']['lr'] == 0.02
        assert got['sub.conv1.weight']['weight_decay'] == pytest.approx(0.09)
        assert got['param1']['weight_decay'] == pytest.approx(0.27)
    if case == 'custom_keys':
        assert (got['sub.param1']['lr'], got['sub.gn.bias']['lr'],
                got['sub.conv1.bias']['weight_decay']) == (0.1, 1e-4, 0)
    for group in agvm.optimizer.param_groups:
        owner = group['agvm_module']
        for name in (n for n, p in model.named_parameters()
                     if any(p is q for q in group['params'])):
            assert name.startswith(owner + '.') or owner == 'others'


ERRORS = {
    # (exception, mmengine's optim_wrapper, AGVM's optim_wrapper)
    'paramwise_cfg_not_a_dict': (TypeError, dict(
        optimizer=dict(type='SGD', lr=1e-4), paramwise_cfg=['error']), {}),
    'decay_mult_without_weight_decay': (ValueError, dict(
        optimizer=dict(type='SGD', lr=1e-4, weight_decay=None),
        paramwise_cfg=dict(bias_decay_mult=1, norm_decay_mult=1)), {}),
    'custom_keys_not_a_dict': (TypeError, dict(
        optimizer=SGD, paramwise_cfg=dict(custom_keys=[0.1, 0.0001])), {}),
    'custom_decay_without_weight_decay': (ValueError, dict(
        optimizer=dict(type='SGD', lr=0.01), paramwise_cfg=dict(
            custom_keys={'.backbone': dict(decay_mult=0.5)})), {}),
    'no_optimizer': (AssertionError, dict(type='OptimWrapper'), {}),
    'unknown_constructor': (KeyError, dict(
        optimizer=SGD, constructor='INVALID_CONSTRUCTOR'), dict(
            constructor=AGVM['constructor'],
            base_constructor='INVALID_CONSTRUCTOR')),
    'duplicates_without_bypass': (ValueError, dict(
        optimizer=SGD, paramwise_cfg=MULTS), {}),
}


@pytest.mark.parametrize('case', ERRORS)
def test_bad_configs_raise_what_mmengine_raises(case):
    error, cfg, agvm = ERRORS[case]
    model = ExampleDuplicateModel()
    with pytest.raises(error):
        build_optim_wrapper(model, cfg)
    with pytest.raises(error):
        build_optim_wrapper(model, dict(cfg, **dict(AGVM, **agvm)))


def test_an_optim_wrapper_that_is_no_dict_is_a_type_error():
    from mmengine.optim import DefaultOptimWrapperConstructor

    from mmext.agvm import AGVMOptimWrapperConstructor
    for constructor in (DefaultOptimWrapperConstructor,
                        AGVMOptimWrapperConstructor):
        with pytest.raises(TypeError):
            constructor([])


# ---------------------------------------------------------------- wrapper
class ConvToy(nn.Module):
    """mmengine's wrapper-test model: conv1, conv2 used, conv3 not."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(1, 1, 1)
        self.conv2 = nn.Conv2d(1, 1, 1)
        self.conv3 = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        return self.conv2(self.conv1(x)).square().sum()


def _pair(optimizer=None, paramwise_cfg=None, **agvm):
    """mmengine's wrapper and AGVM's on two identical models; AGVM starts
    after 100 iterations unless told otherwise (factors 1: the same
    updates)."""
    optimizer = optimizer or dict(type='SGD', lr=0.1, momentum=0.8)
    models = ConvToy(), ConvToy()
    mmengine = build_optim_wrapper(models[0], dict(
        optimizer=optimizer, paramwise_cfg=paramwise_cfg,
        accumulative_counts=agvm.get('accumulative_counts', 2)))
    agvm = build_optim_wrapper(models[1], dict(
        AGVM, optimizer=optimizer, paramwise_cfg=paramwise_cfg,
        **dict(dict(start_iter=100), **agvm)))
    return models, (mmengine, agvm)


def _inputs(count):
    gen = torch.Generator().manual_seed(2)
    return [torch.randn(2, 1, 3, 3, generator=gen) for _ in range(count)]


def test_init_as_mmengines():
    models, (mmengine, agvm) = _pair()
    assert isinstance(agvm, AGVMOptimWrapper)
    for wrapper in (mmengine, agvm):
        assert wrapper.clip_grad_kwargs is None
        assert wrapper.message_hub is mmengine.message_hub
        assert (wrapper.inner_count, wrapper._accumulative_counts,
                wrapper._max_counts, wrapper._remainder_counts) == (
                    0, 2, -1, -1)
    with pytest.raises(AssertionError, match='If `clip_grad` is not None'):
        build_optim_wrapper(models[1], dict(
            AGVM, optimizer=dict(type='SGD', lr=0.1), clip_grad=[]))


def test_update_params_step_and_zero_grad_as_mmengines():
    """Accumulation of 2, a run of 5 iterations (the last window is one
    micro-batch, its loss not divided): after each micro-batch the same
    gradients, after each step the same weights and no gradients."""
    models, wrappers = _pair()
    for model, wrapper in zip(models, wrappers):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # AGVM never applies, no runner
            wrapper.initialize_count_status(model, 0, 5)
    for iteration, x in enumerate(_inputs(5)):
        for model, wrapper in zip(models, wrappers):
            with wrapper.optim_context(model):
                loss = model(x)
            wrapper.update_params(loss)
        stepped = iteration in (1, 3, 4)
        for (name, a), b in zip(models[0].named_parameters(),
                                models[1].parameters()):
            torch.testing.assert_close(b, a)
            if stepped or name.startswith('conv3'):
                assert a.grad is None and b.grad is None, (iteration, name)
            else:
                torch.testing.assert_close(b.grad, a.grad)
    assert wrappers[1].inner_count == wrappers[0].inner_count == 5
    # The explicit calls.
    for model, wrapper in zip(models, wrappers):
        wrapper.backward(model(_inputs(1)[0]))
        wrapper.step()
        wrapper.zero_grad()
        assert all(p.grad is None for p in model.parameters())
    for a, b in zip(*[model.parameters() for model in models]):
        torch.testing.assert_close(b, a)


@pytest.mark.parametrize('paramwise_cfg', [
    None, dict(custom_keys={'conv1.weight': dict(lr_mult=0.1)})])
def test_get_lr_get_momentum_and_param_groups_as_mmengines(paramwise_cfg):
    """mmengine's test: with paramwise_cfg get_lr gives base_lr and every
    group's lr, [0.01] + [0.1] * 5, and so does AGVM (its groups are
    mmengine's, tagged); without, AGVM's module groups all hold 0.1."""
    models, (mmengine, agvm) = _pair(paramwise_cfg=paramwise_cfg)
    expected = mmengine.get_lr()
    if paramwise_cfg:
        assert agvm.get_lr() == expected == dict(
            base_lr=[0.1], lr=[0.1 * 0.1] + [0.1] * 5)
    else:
        assert expected == dict(lr=[0.1])
        assert agvm.get_lr() == dict(base_lr=[0.1], lr=[0.1] * 3)
    assert set(agvm.get_momentum()['momentum']) == {0.8}
    # param_groups: the optimizer's, and mmengine's extra group of the
    # defaults when there are several.
    assert agvm.param_groups[:-1] == agvm.optimizer.param_groups
    assert agvm.param_groups[-1]['lr'] == 0.1
    adam = _pair(optimizer=dict(type='Adam', lr=0., betas=(0.9, 0.9)))[1]
    assert set(adam[1].get_momentum()['momentum']) == {0.9}
    assert adam[0].get_momentum() == dict(momentum=[0.9])


def test_schedulers_see_mmengines_lrs():
    from mmengine.optim import MultiStepLR
    custom = dict(custom_keys={'conv1.weight': dict(lr_mult=0.1)})
    models, wrappers = _pair(paramwise_cfg=custom)
    lrs = []
    for model, wrapper in zip(models, wrappers):
        scheduler = MultiStepLR(wrapper, milestones=[1], gamma=0.5)
        scheduler.step()
        lrs.append({n: o['lr'] for n, o in _options(wrapper.optimizer,
                                                    model).items()})
    assert lrs[1] == lrs[0]
    assert lrs[1]['conv1.weight'] == pytest.approx(0.005)


def test_state_dict_round_trip():
    """The optimizer's state dict as mmengine's wrapper saves it, plus
    'agvm'; loaded into a new wrapper, the same state and factors. A plain
    optimizer's state dict is refused (what to do: load_from)."""
    models, (mmengine, agvm) = _pair(start_iter=0, update_interval=1)
    for x in _inputs(4):
        for model, wrapper in zip(models, (mmengine, agvm)):
            with wrapper.optim_context(model):
                loss = model(x)
            wrapper.update_params(loss)
    saved = agvm.state_dict()
    plain = {k: v for k, v in saved.items() if k != 'agvm'}
    # mmengine's wrapper adds its group of defaults when there are several
    # groups: AGVM's module groups (mmengine's single group here).
    assert plain.keys() - mmengine.state_dict().keys() == {
        'base_param_settings'}
    assert plain['param_groups'] == agvm.optimizer.state_dict()[
        'param_groups']
    assert agvm.ema.num_updates == 2 and (agvm.ema.factors != 1).any()
    restored = build_optim_wrapper(models[1], dict(
        AGVM, optimizer=dict(type='SGD', lr=0.1, momentum=0.8),
        start_iter=0, update_interval=1))
    restored.load_state_dict(copy.deepcopy(saved))
    resaved = restored.state_dict()
    assert resaved['param_groups'] == saved['param_groups']
    for index, state in saved['state'].items():
        torch.testing.assert_close(resaved['state'][index], state)
    torch.testing.assert_close(restored.ema.factors, agvm.ema.factors)
    with pytest.raises(ValueError, match='no AGVM state'):
        restored.load_state_dict(mmengine.state_dict())


def _ddp_grads(rank, world_size, out_dir):
    """mmengine's optim_context test with AGVM's wrapper on a DDP model:
    gradients synchronized (the world mean) on the last micro-batch of a
    step, on a re-estimate step too; not on the others."""
    from mmengine.dist import all_gather
    model = ConvToy()
    local = ConvToy()
    x = _inputs(2)[rank]
    local(x).backward()
    results = dict(local=local.conv1.weight.grad.clone())
    for name, agvm in (('measured', dict(start_iter=0, update_interval=1)),
                       ('plain', dict(start_iter=10)),
                       ('accumulated', dict(accumulative_counts=3))):
        # A DDP model per wrapper: DDP takes one communication hook.
        ddp = nn.parallel.DistributedDataParallel(
            model, find_unused_parameters=True)
        wrapper = build_optim_wrapper(model, dict(
            AGVM, optimizer=dict(type='SGD', lr=0.01), **dict(
                dict(accumulative_counts=1), **agvm)))
        wrapper.initialize_count_status(model, 0, 100)
        grads = []
        for _ in range(3 if name == 'accumulated' else 1):
            model.zero_grad()
            with wrapper.optim_context(ddp):
                loss = ddp(x)
            loss.backward()
            grads.append(all_gather(model.conv1.weight.grad.clone()))
            wrapper._inner_count += 1  # as update_params, without a step
        results[name] = grads
    torch.save(results, os.path.join(out_dir, f'rank{rank}.pth'))


def test_optim_context_under_ddp(tmp_path):
    run_processes(_ddp_grads, 2, (str(tmp_path), ))
    ranks = [torch.load(tmp_path / f'rank{r}.pth', weights_only=False)
             for r in range(2)]
    mean = (ranks[0]['local'] + ranks[1]['local']) / 2
    assert not torch.allclose(ranks[0]['local'], ranks[1]['local'])
    for result in ranks:
        for name in ('measured', 'plain'):
            for grad in result[name][0]:
                torch.testing.assert_close(grad, mean)
        first, second, last = result['accumulated']
        for step in (first, second):  # no_sync: each rank its own
            torch.testing.assert_close(step[0], ranks[0]['local'])
            torch.testing.assert_close(step[1], ranks[1]['local'])
        torch.testing.assert_close(last[0], last[1])
        torch.testing.assert_close(last[0], mean)


# ------------------------------------------------------------------- ZeRO
ZERO = dict(type='ZeroRedundancyOptimizer', optimizer_type='SGD', lr=0.1,
            momentum=0.9)
PLAIN_SGD = dict(type='SGD', lr=0.1, momentum=0.9)
PARAMWISE = {'plain': None,
             'paramwise': dict(custom_keys={'head': dict(lr_mult=0.5)})}


def _zero_built(model, paramwise_cfg):
    """What mmengine's and AGVM's constructors build with ZeRO."""
    built = {}
    for name, extra in (('mmengine', {}), ('agvm', AGVM)):
        wrapper = build_optim_wrapper(model, dict(
            extra, optimizer=ZERO, paramwise_cfg=paramwise_cfg))
        built[name] = dict(
            local=type(wrapper.optimizer.optim).__name__,
            options=_options(wrapper.optimizer, model),
            defaults=dict(wrapper.optimizer.defaults))
    return built


def _zero_train(rank, world_size, paramwise_cfg):
    """3 AGVM steps with ZeRO: 2 accumulated micro-batches (one process)
    or one per rank (DDP); then the state saved and loaded into a new
    wrapper, which must save the same."""
    batches = toy_batches(3, 2)
    model = ToyModel()
    ddp = model if world_size == 1 else nn.parallel.DistributedDataParallel(
        model, find_unused_parameters=True)
    agvm = dict(optimizer=ZERO, paramwise_cfg=paramwise_cfg,
                accumulative_counts=3 - world_size)
    wrapper = build_wrapper(ddp, **agvm)
    history = []
    for parts in batches:
        for x, y, use_aux in parts[rank::world_size]:
            with wrapper.optim_context(ddp):
                loss = ddp(x, y, use_aux)
            wrapper.update_params(loss)
        history.append(wrapper.ema.factors.clone())
    saved = wrapper.state_dict()
    shared = [saved]
    if world_size > 1:
        dist.broadcast_object_list(shared, src=0)
    restored = build_wrapper(ddp, **agvm)
    # ZeRO's load_state_dict empties the other ranks' entries in place.
    restored.load_state_dict(copy.deepcopy(shared[0]))
    return dict(state=model.state_dict(), history=history, saved=saved,
                resaved=restored.state_dict())


def _zero_run(rank, world_size, out_dir):
    results = {}
    for key, paramwise_cfg in PARAMWISE.items():
        results[key] = dict(built=_zero_built(ToyModel(), paramwise_cfg),
                            **_zero_train(rank, world_size, paramwise_cfg))
    try:  # AdamW mode reads exp_avg_sq, which ZeRO shards over the ranks
        build_wrapper(ToyModel(), statistic='adam', accumulative_counts=2,
                      optimizer=dict(type=ZERO['type'], lr=0.01,
                                     optimizer_type='AdamW'))
    except ValueError as error:
        results['adam'] = str(error)
    torch.save(results, os.path.join(out_dir, f'rank{rank}.pth'))


@pytest.mark.parametrize('world_size', [1, 2])
def test_zero_redundancy_optimizer(tmp_path, world_size):
    """mmengine's ZeroRedundancyOptimizer, with and without paramwise_cfg:
    every parameter gets mmengine's options (split by module); training
    gives the factors and weights of plain SGD without ZeRO (halves: the
    accumulated micro-batches, or the ranks); the consolidated state (rank
    0, as mmengine saves it) keeps AGVM's and loads back."""
    run_processes(_zero_run, world_size, (str(tmp_path), ))
    ranks = [torch.load(tmp_path / f'rank{r}.pth', weights_only=False)
             for r in range(world_size)]
    for key, paramwise_cfg in PARAMWISE.items():
        model, _, history = train_accumulated(
            toy_batches(3, 2), optimizer=PLAIN_SGD,
            paramwise_cfg=paramwise_cfg)
        assert (history[-1] - 1).abs().max() > 1e-3
        for rank, result in enumerate(ranks):
            result = result[key]
            built = result['built']
            assert built['agvm']['local'] == built['mmengine']['local']
            assert built['agvm']['defaults'] == built['mmengine']['defaults']
            assert built['agvm']['options'] == built['mmengine']['options']
            for got, want in zip(result['history'], history):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            for name, value in model.state_dict().items():
                torch.testing.assert_close(result['state'][name], value,
                                           rtol=1e-5, atol=1e-6)
        lrs = {n: o['lr'] for n, o in built['agvm']['options'].items()}
        assert lrs['head.weight'] == (0.05 if paramwise_cfg else 0.1)
        saved, resaved = ranks[0][key]['saved'], ranks[0][key]['resaved']
        assert saved['param_groups'] == resaved['param_groups']
        # A momentum buffer per parameter with a gradient: not 'frozen' or
        # 'unused' (2 each).
        assert len(saved['state']) == len(model.state_dict()) - 4
        for index, state in saved['state'].items():
            torch.testing.assert_close(resaved['state'][index], state)
        torch.testing.assert_close(resaved['agvm']['ema']['factors'],
                                   history[-1], rtol=1e-5, atol=1e-6)
        # Other ranks hold no optimizer state (mmengine's ZeRO wrapper).
        for result in ranks[1:]:
            assert 'state' not in result[key]['saved']
    assert "statistic='adam' reads the optimizer state" in ranks[0]['adam']
