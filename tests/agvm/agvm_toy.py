"""A tiny model, data and process launcher shared by the AGVM wrapper tests."""
import os

import torch
from mmengine.optim import build_optim_wrapper
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import \
    allreduce_hook

import bench_utils

MODULES = ['backbone', 'neck', 'head']


class ToyModel(nn.Module):
    """backbone/neck/head are modulated; ``aux`` (used only when asked) and
    ``unused`` (never used) fall into 'others'; ``frozen`` is not trained."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(6, 8), nn.Tanh(),
                                      nn.Linear(8, 8))
        self.neck = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)
        self.aux = nn.Linear(6, 2)
        self.unused = nn.Linear(2, 2)
        self.frozen = nn.Linear(2, 2).requires_grad_(False)

    def forward(self, x, y, use_aux=False):
        out = self.head(torch.tanh(self.neck(self.backbone(x))))
        if use_aux:
            out = out + self.aux(x)
        return ((out - y)**2).mean()


def toy_batches(num_steps, num_parts, part_size=4):
    """``batches[step][part] = (x, y, use_aux)``; part 0 uses ``aux``."""
    gen = torch.Generator().manual_seed(1)
    return [[(torch.randn(part_size, 6, generator=gen),
              torch.randn(part_size, 2, generator=gen), part == 0)
             for part in range(num_parts)] for _ in range(num_steps)]


def build_wrapper(model, **agvm):
    cfg = dict(
        type='mmext.AGVMOptimWrapper',
        constructor='mmext.AGVMOptimWrapperConstructor',
        optimizer=dict(type='SGD', lr=0.1),
        module_names=list(MODULES), update_interval=1, ema_momentum=0.5)
    cfg.update(agvm)
    return build_optim_wrapper(model, cfg)


def train_accumulated(batches, device='cpu', **agvm):
    """One process, each step accumulating its parts as micro-batches."""
    model = ToyModel().to(device)
    wrapper = build_wrapper(model, accumulative_counts=len(batches[0]),
                            **agvm)
    history = []
    for parts in batches:
        for x, y, use_aux in parts:
            with wrapper.optim_context(model):
                loss = model(x.to(device), y.to(device), use_aux)
            wrapper.update_params(loss)
        history.append(wrapper.ema.factors.clone())
    return model, wrapper, history


def run_processes(fn, world_size, args=(), timeout=120):
    """Run ``fn(rank, world_size, *args)`` in gloo processes; a hang fails."""
    bench_utils.run_processes(fn, world_size, args, timeout)


def train_ddp(rank, world_size, batches, out_dir, agvm, exchange='hook',
              device='cpu'):
    """Each rank trains on its share of every step's parts (accumulating if
    it gets several); every rank saves its results.

    ``exchange='flat'`` registers DDP's stock all-reduce hook first, so AGVM
    cannot add its own and reduces the flattened gradients itself. With
    ``device='cuda'`` all ranks share GPU 0 (gloo takes CUDA tensors)."""
    model = nn.parallel.DistributedDataParallel(
        ToyModel().to(device), find_unused_parameters=True)
    if exchange == 'flat':
        model.register_comm_hook(None, allreduce_hook)
    per_rank = len(batches[0]) // world_size
    wrapper = build_wrapper(model, accumulative_counts=per_rank, **agvm)
    history = []
    for parts in batches:
        for x, y, use_aux in parts[rank * per_rank:(rank + 1) * per_rank]:
            with wrapper.optim_context(model):
                loss = model(x.to(device), y.to(device), use_aux)
            wrapper.update_params(loss)
        history.append(wrapper.ema.factors.clone())
    state = {k: v.cpu() for k, v in model.module.state_dict().items()}
    torch.save(dict(state=state, history=history,
                    variance=wrapper.last_variance,
                    hooked=wrapper.halves.attach(model)),
               os.path.join(out_dir, f'rank{rank}.pth'))
