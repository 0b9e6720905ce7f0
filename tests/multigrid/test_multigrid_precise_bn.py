"""Precise BN updates only the BN layers that train (fvcore semantics).

mmaction2's ResNet3d puts BN layers in eval mode in ``train()`` for
``norm_eval=True`` and for the stages up to ``frozen_stages``; their loaded
statistics must survive precise BN bit for bit.
"""
import os
import os.path as osp

import pytest
import torch
import torch.nn as nn
from helpers import DEVICES
from mmaction.models.backbones import ResNet3d

from mmext.multigrid.bn import update_precise_bn

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
STATS = ('running_mean', 'running_var', 'num_batches_tracked')


def _bns(model):
    return {n: m for n, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)}


def _load_random_stats(model, seed):
    """Stand-in for statistics loaded from a pretrained checkpoint."""
    gen = torch.Generator().manual_seed(seed)
    for m in _bns(model).values():
        n = m.num_features
        m.running_mean.copy_(torch.rand(n, generator=gen) - 0.5)
        m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
        m.num_batches_tracked.fill_(1234)


@pytest.mark.parametrize('device', DEVICES)
@pytest.mark.parametrize('setting', [dict(norm_eval=True),
                                     dict(frozen_stages=1)],
                         ids=['norm_eval', 'frozen_stages=1'])
@torch.no_grad()
def test_frozen_layers_keep_their_statistics(setting, device):
    torch.manual_seed(0)
    backbone = ResNet3d(depth=18, pretrained=None, base_channels=4,
                        conv1_stride_t=1, pool1_stride_t=1, **setting)
    # A BN after the backbone trains under both settings (norm_eval acts
    # inside the backbone only).
    model = nn.Sequential(backbone, nn.BatchNorm3d(32)).to(device)
    _load_random_stats(model, seed=1)
    model.train()
    frozen = {n for n, m in _bns(model).items() if not m.training}
    trained = set(_bns(model)) - frozen
    if 'norm_eval' in setting:
        assert trained == {'1'}
    else:
        assert 'conv1.bn' in {n[2:] for n in frozen} and len(trained) > 1
        assert not any(n.startswith('0.layer2') for n in frozen)
    # The run without precise BN keeps these.
    without = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()  # as after validation: precise BN must use train() modes
    batches = [torch.randn(2, 3, 4, 16, 16, device=device) for _ in range(3)]
    assert update_precise_bn(model, batches, model) == 3
    assert not model.training and not model[1].training
    state = model.state_dict()
    for name in frozen:
        for stat in STATS:
            key = f'{name}.{stat}'
            assert torch.equal(state[key], without[key]), key
    for name in trained:
        assert not torch.equal(state[f'{name}.running_mean'],
                               without[f'{name}.running_mean']), name
        assert state[f'{name}.num_batches_tracked'].item() == 3
    # The trained BN holds the exact average of the batch statistics of the
    # features the frozen layers (with their own statistics) produce.
    model.train()
    feats = [model[0](x) for x in batches]
    means = torch.stack([f.mean((0, 2, 3, 4)) for f in feats])
    variances = torch.stack([
        f.transpose(0, 1).flatten(1).var(1, unbiased=True) for f in feats])
    assert torch.allclose(model[1].running_mean, means.mean(0), atol=1e-5)
    assert torch.allclose(model[1].running_var, variances.mean(0),
                          rtol=1e-4)
    assert model[1].momentum == 0.1


def test_nothing_to_update_runs_no_forward_pass():
    model = ResNet3d(depth=18, pretrained=None, base_channels=4,
                     norm_eval=True)
    calls = []
    assert update_precise_bn(model, [1, 2], calls.append) == 0
    assert calls == []
    assert model.training


def test_plan_check_warns_when_precise_bn_has_nothing_to_update():
    from mmengine.config import Config
    from mmaction.registry import MODELS
    from mmengine.registry import init_default_scope
    from mmext.multigrid import MultigridPlan
    from mmext.multigrid.model_checks import check_run
    init_default_scope('mmaction')
    cfg = Config.fromfile(TINY)
    cfg.model.backbone.norm_eval = True
    plan = MultigridPlan.from_config(cfg)
    with pytest.warns(UserWarning) as record:
        messages = check_run(plan, MODELS.build(cfg.model))
    assert messages == [
        'precise_bn_iters=2, but no BN layer of the model trains (all are '
        'in eval mode after model.train(), e.g. norm_eval=True): precise '
        'BN has nothing to update and is skipped.'
    ]
    assert [str(w.message) for w in record] == messages


@pytest.mark.slow
@pytest.mark.usefixtures('repo_demo_data')
def test_training_with_frozen_stages_keeps_loaded_statistics(tmp_path):
    """End to end: a run with precise BN and one without, both from a
    checkpoint with non-trivial statistics and ``frozen_stages=1``."""
    from mmaction.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmext.cli import build_runner, load_run_config
    init_default_scope('mmaction')
    model = MODELS.build(Config.fromfile(TINY).model)
    with torch.no_grad():
        _load_random_stats(model, seed=2)
    ckpt = str(tmp_path / 'pretrained.pth')
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    finals = {}
    for iters in (2, 0):
        os.chdir(ROOT)
        work_dir = tmp_path / f'precise{iters}'
        hooks = [dict(type='mmext.MultigridHook',
                      long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                      bn_base_size=4, precise_bn_iters=iters)]
        cfg = load_run_config(TINY, dict(
            custom_hooks=hooks, model=dict(backbone=dict(frozen_stages=1)),
            load_from=ckpt), str(work_dir))
        build_runner(cfg).train()
        finals[iters] = torch.load(work_dir / 'epoch_6.pth',
                                   map_location='cpu',
                                   weights_only=False)['state_dict']
    loaded = model.state_dict()
    frozen = [k for k in loaded if k.startswith(('backbone.conv1.bn',
                                                 'backbone.layer1.'))
              and k.rsplit('.', 1)[-1] in STATS]
    assert len(frozen) == 3 * 5  # conv1.bn + 2 blocks x 2 BN
    for key in frozen:
        assert torch.equal(finals[2][key], loaded[key]), key
        assert torch.equal(finals[0][key], loaded[key]), key
    trained = 'backbone.layer4.1.conv2.bn.running_mean'
    assert not torch.equal(finals[2][trained], finals[0][trained])
    assert finals[2][trained.replace('running_mean',
                                     'num_batches_tracked')].item() == 2
