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
                                     optimizer_type='AdamW',
                                     betas=(0.9, 0.99)))
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
