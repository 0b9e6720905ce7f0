"""mmext.frozen_check: BN layers in eval mode / frozen stages without
weights, on every config of the project and on the recipe keys that cause
it."""
import glob
import os.path as osp

import pytest
from helpers import cpu_norm
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from torch import nn

import mmext  # noqa: F401  (``mmext::`` prefix)
from mmext.frozen_check import frozen_without_weights, pretrained_paths

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = sorted(glob.glob(osp.join(ROOT, 'configs', '*', '*.py')))
DEMO_DET = osp.join(ROOT, 'configs', 'demo', 'faster-rcnn_r18_fpn_demo-det.py')



def _build(cfg):
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    cpu_norm(cfg.model)
    return MODELS.build(cfg.model)


def test_every_config_is_found():
    assert len(CONFIGS) >= 18
    assert DEMO_DET in CONFIGS


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: osp.relpath(p, ROOT))
def test_no_config_freezes_layers_it_loads_no_weights_into(path):
    """Built and put in train mode, no module keeps BN in eval mode or frozen
    parameters unless the config loads weights into it."""
    cfg = Config.fromfile(path)
    model = _build(cfg)
    loaded = [''] if cfg.get('load_from') else []
    assert frozen_without_weights(model, cfg.model, loaded) == []


def test_mmdet_defaults_without_weights_are_named():
    """The demo detector as it was: mmdet's norm_eval=True / frozen_stages=1
    with init_cfg=None. All 20 BN layers of ResNet-18 stay in eval mode and
    the stem + layer1 (157504 parameters) are frozen."""
    cfg = Config.fromfile(DEMO_DET)
    cfg.model.backbone.update(norm_eval=True, frozen_stages=1)
    messages = frozen_without_weights(_build(cfg), cfg.model)
    assert messages == [
        'model.backbone: 20 of 20 BN layers stay in eval mode while training '
        '(their running mean and variance never update) and 157504 '
        'parameters are frozen (requires_grad=False), but no weights are '
        'loaded into it (no Pretrained init_cfg, no load_from), so they keep '
        'their random initialisation. Set by model.backbone.frozen_stages=1, '
        'model.backbone.norm_eval=True. Train them with '
        'model.backbone.frozen_stages=-1, model.backbone.norm_eval=False, or '
        "load pretrained weights (init_cfg=dict(type='Pretrained', "
        'checkpoint=...) or load_from).'
    ]


def test_frozen_norm_parameters_name_requires_grad():
    cfg = Config.fromfile(DEMO_DET)
    cfg.model.backbone.norm_cfg = dict(type='BN', requires_grad=False)
    (message, ) = frozen_without_weights(_build(cfg), cfg.model)
    assert message.startswith('model.backbone: 9600 parameters are frozen')
    assert ('Set by model.backbone.norm_cfg.requires_grad=False. Train them '
            'with model.backbone.norm_cfg.requires_grad=True') in message


def test_weights_clear_the_module():
    cfg = Config.fromfile(DEMO_DET)
    cfg.model.backbone.update(norm_eval=True, frozen_stages=1)
    model = _build(cfg)
    pretrained = Config(dict(model=dict(cfg.model, backbone=dict(
        cfg.model.backbone, init_cfg=dict(type='Pretrained',
                                          checkpoint='x.pth')))))
    assert frozen_without_weights(model, pretrained.model) == []
    assert frozen_without_weights(model, cfg.model, loaded=['']) == []
    assert frozen_without_weights(model, cfg.model, loaded=['backbone']) == []


class _EvalNorm(nn.Module):
    """A module that keeps its BN in eval mode by code (no config key)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 1)
        self.bn = nn.BatchNorm2d(2)

    def train(self, mode=True):
        super().train(mode)
        self.bn.eval()
        return self


def test_frozen_by_code_and_modes_restored():
    model = nn.Sequential()
    model.add_module('backbone', _EvalNorm())
    model.add_module('head', nn.Linear(2, 2))
    model.eval()
    (message, ) = frozen_without_weights(model)
    assert message.startswith('model.backbone: 1 of 1 BN layers stay in '
                              'eval mode')
    assert ('No config key of it does this (its code does). Train them with '
            'model.backbone.norm_eval=False, model.backbone.frozen_stages=-1'
            ) in message
    assert not any(m.training for m in model.modules())


def test_pretrained_paths():
    cfg = dict(backbone=dict(init_cfg=dict(type='Pretrained', checkpoint='a')),
               neck=dict(init_cfg=[dict(type='Xavier'),
                                   dict(type='Pretrained', checkpoint='b')]),
               head=dict(init_cfg=dict(type='Normal')), pretrained=None)
    assert pretrained_paths(cfg) == ['backbone', 'neck']
    assert pretrained_paths(dict(pretrained='open-mmlab://x')) == ['']
