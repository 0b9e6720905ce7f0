"""Multigrid with the speed options of tools/benchmark/multigrid_speedup.py
(bench_utils' ChannelsLastHook and Float32HeadHook): channels_last_3d
training against the contiguous format; class scores in float32 under
bfloat16 autocast."""
import math
import os.path as osp
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from bench_utils import (ChannelsLastHook, Float32HeadHook, RunRecorder,
                         to_channels_last_3d)
from mg_helpers import TINY, tiny_runner
from mmengine.config import Config
from mmengine.hooks import Hook

import mmext  # noqa: F401

CL = torch.channels_last_3d


def _model():
    model = nn.Module()
    model.backbone = nn.Linear(4, 4)
    model.cls_head = nn.Linear(4, 2)
    return model


def test_head_outputs_float32_under_bf16_autocast():
    """Once only: a second before_run adds no second cast."""
    model = _model()
    x = torch.randn(3, 4)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert model.cls_head(model.backbone(x)).dtype == torch.bfloat16
        for _ in range(2):
            Float32HeadHook().before_run(SimpleNamespace(model=model))
        scores = model.cls_head(model.backbone(x))
    assert scores.dtype == torch.float32 and scores.requires_grad
    assert len(model.cls_head._forward_hooks) == 1


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


def _train(work_dir, channels_last):
    from mg_helpers import TINY_HOOK
    hooks = [dict(type='ChannelsLastHook')] if channels_last else []
    runner = tiny_runner(
        work_dir, default_hooks=dict(checkpoint=dict(interval=100,
                                                     save_last=True)),
        train_cfg=dict(max_epochs=2, val_interval=3),
        custom_hooks=hooks + [TINY_HOOK],
        **{'param_scheduler.1.end': 2, 'param_scheduler.1.milestones': [1]})
    recorder, formats = RunRecorder(), _FormatRecorder()
    runner.register_hook(recorder)
    runner.register_hook(formats)
    runner.train()
    state = torch.load(osp.join(work_dir, 'epoch_3.pth'), map_location='cpu',
                       weights_only=False)['state_dict']
    return recorder, formats.calls, state, runner


@pytest.mark.usefixtures('demo_data')
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
    model = MODELS.build(Config.fromfile(TINY).model)
    model.load_state_dict(state, strict=True)


def test_model_without_backbone_is_refused():
    runner = SimpleNamespace(model=nn.Conv3d(1, 1, 1))
    with pytest.raises(ValueError, match='Conv3d has no backbone'):
        ChannelsLastHook().before_run(runner)
