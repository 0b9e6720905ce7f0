"""AGVM across gloo processes: equal to one-process accumulation, odd sizes."""
import math

import pytest
import torch

from agvm_toy import (MODULES, ToyModel, run_processes, toy_batches,
                      train_accumulated, train_ddp)
from helpers import CUDA_MARKS
from mmext.agvm import (HalfStatistics, gradient_variance,
                        modulation_factors)


def _load(tmp_path, world_size):
    return [torch.load(tmp_path / f'rank{r}.pth', weights_only=False)
            for r in range(world_size)]


@pytest.mark.parametrize('world_size,parts_per_rank,exchange,device', [
    (2, 1, 'hook', 'cpu'), (2, 2, 'hook', 'cpu'), (2, 1, 'flat', 'cpu'),
    pytest.param(4, 1, 'hook', 'cpu', marks=pytest.mark.slow),
    pytest.param(2, 1, 'hook', 'cuda', marks=CUDA_MARKS),
    pytest.param(2, 1, 'flat', 'cuda', marks=CUDA_MARKS)])
def test_processes_match_single_process_accumulation(
        tmp_path, world_size, parts_per_rank, exchange, device):
    """Halves = ranks vs halves = first/second half of the micro-batches of
    one process, on the same data; with 2 parts per rank DDP accumulates.
    Measured in DDP's communication hook (with 4 ranks, after a reduction
    inside each half), or, when DDP already has another hook, on the
    flattened gradients."""
    batches = toy_batches(num_steps=4,
                          num_parts=world_size * parts_per_rank)
    run_processes(train_ddp, world_size,
                  (batches, str(tmp_path), {}, exchange, device))
    ranks = _load(tmp_path, world_size)
    model, wrapper, history = train_accumulated(batches)
    for result in ranks:
        assert result['hooked'] == (exchange == 'hook')
        for got, want in zip(result['history'], history):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(result['variance'],
                                   wrapper.last_variance, rtol=1e-4,
                                   atol=1e-6)
        for key, value in model.state_dict().items():
            torch.testing.assert_close(result['state'][key], value,
                                       rtol=1e-5, atol=1e-6)
    # The factors really moved (the comparison is not 1 == 1).
    assert (history[-1] - 1).abs().max() > 1e-3
    # 'unused' never got a gradient, 'aux' (rank/part 0 only) did.
    assert torch.equal(ranks[0]['state']['unused.weight'],
                       ToyModel().unused.weight)
    assert not torch.equal(ranks[0]['state']['aux.weight'],
                           ToyModel().aux.weight)


def _grads(model, part):
    model.zero_grad()
    model(*part).backward()
    return {n: p.grad.clone() if p.grad is not None else None
            for n, p in model.named_parameters()}


@pytest.mark.parametrize('exchange', ['hook', 'flat'])
def test_three_processes_unbiased_step(tmp_path, exchange):
    """World size 3: halves are ranks {0} and {1}; rank 2 only enters the
    update, which must be the plain mean of the 3 gradients."""
    batches = toy_batches(num_steps=3, num_parts=3)
    run_processes(train_ddp, 3, (batches[:1], str(tmp_path), {}, exchange))
    ranks = _load(tmp_path, 3)
    model = ToyModel()
    grads = [_grads(model, part) for part in batches[0]]

    def flat(g, module):
        return torch.cat([v.flatten() for n, v in g.items()
                          if n.startswith(module + '.')]).double()

    stats = HalfStatistics(*[torch.stack(v) for v in zip(*[
        (flat(grads[0], m) @ flat(grads[1], m),
         flat(grads[0], m) @ flat(grads[0], m),
         flat(grads[1], m) @ flat(grads[1], m)) for m in MODULES])])
    d, valid = gradient_variance(stats)
    factors = 0.5 + 0.5 * modulation_factors(d, valid, 0, (0.5, 10.))
    for result in ranks:
        torch.testing.assert_close(result['history'][0], factors)
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        used = [g[name] for g in grads if g[name] is not None]
        module = name.split('.')[0]
        factor = (factors[MODULES.index(module)].item()
                  if module in MODULES else 1.0)
        if not used:
            expected = param
        else:
            # Unused on a rank counts as a zero gradient there, as in DDP.
            expected = param - 0.1 * factor * sum(used) / 3
        torch.testing.assert_close(ranks[0]['state'][name], expected,
                                   rtol=1e-5, atol=1e-6)
    assert math.isfinite(ranks[0]['history'][0].sum().item())


def test_three_processes_several_steps_do_not_hang(tmp_path):
    batches = toy_batches(num_steps=5, num_parts=3)
    # Generous: 3 spawned processes start slowly on a loaded 2-core machine;
    # a hang still fails.
    run_processes(train_ddp, 3,
                  (batches, str(tmp_path), dict(update_interval=2)),
                  timeout=300)
    ranks = _load(tmp_path, 3)
    for result in ranks[1:]:
        torch.testing.assert_close(result['history'][-1],
                                   ranks[0]['history'][-1])
        for key, value in ranks[0]['state'].items():
            torch.testing.assert_close(result['state'][key], value)
