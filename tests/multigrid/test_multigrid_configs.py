"""The configs in configs/multigrid build, instantiate and give the table."""
import glob
import os.path as osp

import pytest
from mg_helpers import ROOT
from mmaction.registry import MODELS
from mmengine.config import Config

import mmext  # noqa: F401
from mmext.multigrid import build_multigrid_schedule
from mmext.multigrid.checks import check_clip_lengths
from mmext.multigrid.data import parse_grid_shape
from mmext.multigrid.plan import find_lr_steps

# The configs with a MultigridHook (a plain recipe beside its multigrid config
# has no "multigrid" in its name).
CONFIGS = sorted(glob.glob(osp.join(ROOT, 'configs', 'multigrid',
                                    '*multigrid*.py')) +
                 glob.glob(osp.join(ROOT, 'configs', 'demo', '*multigrid*')))


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_config_builds(path):
    cfg = Config.fromfile(path)
    hook = [h for h in cfg.custom_hooks
            if h['type'] == 'mmext.MultigridHook'][0]
    model_cfg = cfg.model.deepcopy()
    model_cfg.backbone.pop('pretrained', None)
    if 'slow_pathway' not in model_cfg.backbone:
        model_cfg.backbone.pretrained2d = False
    model = MODELS.build(model_cfg)
    t, _, s = parse_grid_shape(cfg.train_dataloader.dataset.pipeline)
    steps, gamma = find_lr_steps(cfg.param_scheduler,
                                 cfg.train_cfg.max_epochs)
    args = {k: v for k, v in hook.items()
            if k in ('long_cycle', 'short_cycle', 'epoch_factor',
                     'long_cycle_factors', 'short_cycle_factors',
                     'short_cycle_mode')}
    stages = build_multigrid_schedule(t, s, steps, cfg.train_cfg.max_epochs,
                                      gamma=gamma, **args)
    check_clip_lengths(model.backbone, [x.shape.clip_len for x in stages])
    if 'slowfast' in path:
        assert stages[-1].end_epoch == 358
        assert [x.end_epoch for x in stages[:4]] == [73, 110, 142, 158]
