"""mmext.multigrid.shape_probe: every planned grid shape tried on the model
(meta device, tiny-batch fallback), the final feature map recorded."""
import pytest
import torch
from mg_helpers import PIPE, STEP
from mg_zoo import FAMILIES, base_shape, build
from torch import nn

from mmext.multigrid import MultigridOptions, MultigridPlan
from mmext.multigrid.shape_probe import (PlannedShape, meta_copy,
                                         planned_shapes, probe_input_size,
                                         probe_shapes)
from mmext.multigrid.transformers import install_shape_adapters

TWO = MultigridOptions(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                       bn_base_size=None)


def test_planned_shapes_are_the_distinct_short_cycle_shapes():
    # Base (B, T, S) = (4, 16, 56); long cycle (8, 40) in epochs 0-3, then
    # (16, 56) in 3-4 and the fine-tune 4-6; short cycle S = 28, 40.
    plan = MultigridPlan(PIPE, 4, 4, [STEP], options=TWO)
    assert [tuple(s) for s in planned_shapes(plan)] == [
        (32, 8, 28, False, (0, 3)),  # B x T0 S0^2 / (T S^2), rounded
        (16, 8, 40, True, (0, 3)),
        (16, 16, 28, False, (3, 6)),
        (8, 16, 40, False, (3, 6)),
        (4, 16, 56, True, (3, 6)),
    ]
    assert str(planned_shapes(plan)[0]) == '(B, T, S) = (32, 8, 28)'


def test_probe_input_size_follows_the_data_layout():
    i3d, tsm = build('ResNet3d', 'meta'), build('TSM', 'meta')
    assert probe_input_size(i3d, 4, 16, 112) == (4, 1, 3, 16, 112, 112)
    tsm_pipe = [dict(type='SampleFrames', clip_len=1, num_clips=8)]
    assert probe_input_size(tsm, 4, 1, 112, tsm_pipe) == (4, 8, 3, 112, 112)


def test_meta_copy_leaves_the_model_alone():
    model = build('ResNet3d')
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ghost = meta_copy(model)
    assert {p.device.type for p in ghost.parameters()} == {'meta'}
    assert {b.device.type for b in ghost.buffers()} == {'meta'}
    assert [n for n, _ in ghost.named_parameters()] == [
        n for n, _ in model.named_parameters()]
    shape = PlannedShape(8, 8, 112, True, (0, 1))
    [result] = probe_shapes(model, [shape])
    assert result.error is None and result.device == 'meta'
    assert all(torch.equal(v, before[k])
               for k, v in model.state_dict().items())
    assert {p.device.type for p in model.parameters()} == {'cpu'}


def _plan(family, **options):
    t, s = base_shape(family)
    pipe = [dict(type='SampleFrames', clip_len=t, frame_interval=2,
                 num_clips=8 if family == 'TSM' else 1),
            dict(type='Resize', scale=(s, s), keep_ratio=False)]
    defaults = dict(bn_base_size=None)
    if family == 'TSM':
        # A 2D recognizer's T is 1 frame per segment: spatial cycles only.
        defaults['long_cycle_factors'] = [(1, 0.5**0.5), (1, 1)]
    return MultigridPlan(pipe, 8, 100, options=MultigridOptions(
        **dict(defaults, **options))), pipe


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_every_family_at_the_default_multigrid_shapes(family):
    """The paper's default cycles on each family of the zoo, built tiny:
    all shapes pass but C3D's (fixed fc6 input), after the transformers
    got their shape adapters."""
    model = build(family, 'meta' if family == 'C3D' else 'cpu')
    install_shape_adapters(model)
    plan, pipe = _plan(family)
    results = probe_shapes(model, planned_shapes(plan), pipe)
    assert len(results) == len(planned_shapes(plan)) >= 3
    assert {r.device for r in results} == {'meta'}
    refused = [r for r in results if r.error]
    if family != 'C3D':
        assert refused == []
        return
    # Only the recipe's (16, 112) passes: short clips end in a pooling
    # layer, 16-frame clips of other crops in fc6.
    assert [(r.shape.clip_len, r.shape.crop_size) for r in results
            if not r.error] == [(16, 112)]
    assert {r.module for r in refused if r.shape.clip_len == 16} == {
        'backbone.fc6 (Linear)'}
    assert {r.module for r in refused if r.shape.clip_len < 16} <= {
        'backbone.pool4 (MaxPool3d)', 'backbone.pool5 (MaxPool3d)'}


@pytest.mark.parametrize('family', ['TimeSformer', 'VisionTransformer',
                                    'UniFormerV2'])
def test_transformers_without_adapters_are_refused(family):
    model = build(family)
    plan, pipe = _plan(family)
    results = probe_shapes(model, planned_shapes(plan), pipe)
    base = base_shape(family)
    passed = {(r.shape.clip_len, r.shape.crop_size) for r in results
              if not r.error}
    assert base in passed
    refused = [r for r in results if r.error]
    assert refused and {r.module for r in refused} == {
        f'backbone ({family})'}
    assert all(r.error.startswith('RuntimeError: ') for r in refused)


def test_final_feature_map_sizes():
    """ResNet3d (total stride 32): 28 -> 1, 40 -> 2 (ceil), 56 -> 2,
    224 -> 7; SlowFast gives its pathways' map; transformers none."""
    model = build('ResNet3d')
    shapes = [PlannedShape(4, 16, s, True, (0, 1)) for s in (28, 40, 56, 224)]
    assert [r.feature_map for r in probe_shapes(model, shapes)] == [
        (1, 1), (2, 2), (2, 2), (7, 7)]
    [slowfast] = probe_shapes(build('SlowFast'), shapes[-1:])
    assert slowfast.feature_map == (7, 7)
    vit = build('VisionTransformer')
    [tokens] = probe_shapes(vit, [PlannedShape(2, 16, 224, True, (0, 1))])
    assert tokens.error is None and tokens.feature_map is None


class _NeedsData(nn.Module):
    """Reads a value of its input (no meta kernel can): takes only T=4."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv3d(3, 2, 1), nn.BatchNorm3d(2))
        self.cls_head = nn.Linear(2 * 4, 3)

    def forward(self, inputs, mode, stage):
        x = self.backbone(inputs.flatten(0, 1))
        scale = 1 + 0 * x.abs().max().item()
        return self.cls_head(x.mean((3, 4)).flatten(1) * scale)


def test_data_dependent_forward_falls_back_to_a_tiny_batch():
    model = _NeedsData().train()
    model.backbone[1].eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = probe_shapes(model, [PlannedShape(64, 4, 16, True, (0, 1)),
                                   PlannedShape(64, 2, 16, True, (0, 1))])
    assert [r.device for r in results] == ['cpu', 'cpu']
    assert results[0].error is None and results[0].feature_map == (16, 16)
    assert results[1].module == 'cls_head (Linear)'
    assert results[1].error.startswith('RuntimeError: mat1 and mat2')
    # Modes restored, no statistic or weight changed.
    assert model.training and not model.backbone[1].training
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
