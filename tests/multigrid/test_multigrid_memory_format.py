"""mmext.multigrid.memory_format: channels_last_3d training with multigrid,
against the same run in the contiguous format."""
import math
import os
import os.path as osp

import pytest
import torch
import torch.nn as nn
from mg_helpers import ROOT, TINY
from mmengine.hooks import Hook

from mmext.cli import build_runner, load_run_config
from mmext.multigrid import ChannelsLastHook
from mmext.multigrid.memory_format import to_channels_last_3d
from bench_utils import RunRecorder

CL = torch.channels_last_3d


def test_only_5d_tensors_are_converted_in_place():
    net = nn.Sequential(nn.Conv3d(3, 4, 3), nn.Conv2d(4, 4, 1),
                        nn.BatchNorm3d(4))
    weight = net[0].weight
    assert to_channels_last_3d(net) == 1
    assert net[0].weight is weight and weight.is_contiguous(memory_format=CL)
    assert net[1].weight.is_contiguous()
    assert to_channels_last_3d(net) == 0


class _FormatRecorder(Hook):
    """The memory format and mode of every input of the first BN layer."""

    def __init__(self):
        self.calls = []

    def before_run(self, runner):
        def record(module, args):
            self.calls.append((module.training,
                               args[0].is_contiguous(memory_format=CL)))

        runner.model.backbone.conv1.bn.register_forward_pre_hook(record)


@pytest.fixture(autouse=True)
def _demo_data(demo_data):
    """The tiny recipe trains on the demo data."""


def _train(work_dir, channels_last):
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(default_hooks=dict(checkpoint=dict(
        interval=100, save_last=True))), str(work_dir))
    cfg.train_cfg.update(max_epochs=2, val_interval=3)
    cfg.param_scheduler[1].update(end=2, milestones=[1])
    if channels_last:
        cfg.custom_hooks.insert(0, dict(type='mmext.ChannelsLastHook'))
    runner = build_runner(cfg)
    recorder, formats = RunRecorder(), _FormatRecorder()
    runner.register_hook(recorder)
    runner.register_hook(formats)
    runner.train()
    state = torch.load(osp.join(work_dir, 'epoch_3.pth'), map_location='cpu',
                       weights_only=False)['state_dict']
    return recorder, formats.calls, state, runner


def test_channels_last_multigrid_run_matches_contiguous(tmp_path):
    """Long and short cycle, sub-batch BN, precise BN and validation run in
    channels_last_3d, from the contiguous run's start; the checkpoint is the
    recipe's."""
    plain, plain_calls, plain_state, _ = _train(tmp_path / 'plain', False)
    last, calls, state, runner = _train(tmp_path / 'cl', True)
    assert any(isinstance(h, ChannelsLastHook) for h in runner.hooks)
    assert [c for c in plain_calls] == [(m, False) for m, _ in plain_calls]
    # Training (with sub-batch BN), precise BN and validation passes.
    assert {m for m, _ in calls} == {True, False}
    assert all(fmt for _, fmt in calls) and len(calls) == len(plain_calls)
    assert {r.batch_size for r in last.iters} == {4, 8, 16, 32}
    # Same initialisation and data: the first steps agree to float32
    # rounding; later ones drift apart as any two float32 runs summing in
    # other orders do at this LR (float64 runs agree exactly, see
    # test_multigrid_bn), so only the first two are compared.
    losses = [r.loss for r in last.iters]
    assert losses[:2] == pytest.approx([r.loss for r in plain.iters][:2],
                                       rel=1e-4)
    assert all(map(math.isfinite, losses))
    assert set(state) == set(plain_state)
    # The trained model keeps the recipe's modules; the checkpoint loads.
    from mmaction.registry import MODELS
    from mmengine.config import Config
    model = MODELS.build(Config.fromfile(TINY).model)
    model.load_state_dict(state, strict=True)


def test_model_without_backbone_is_refused():
    from types import SimpleNamespace
    runner = SimpleNamespace(model=nn.Conv3d(1, 1, 1))
    with pytest.raises(ValueError, match='has no backbone'):
        ChannelsLastHook().before_run(runner)
