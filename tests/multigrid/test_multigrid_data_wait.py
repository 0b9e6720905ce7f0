"""MultigridHook on a tiny data-bound run: stage-change figures, 1 warning."""
import logging
import os
import os.path as osp

import pytest
from mmcv.transforms import BaseTransform

import mmext  # noqa: F401
from mmext.cli import build_runner, load_run_config

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')

pytestmark = pytest.mark.usefixtures('repo_demo_data')


class _FakeClock:
    """Stands in for ``time`` in the hook: only loading advances it."""

    now = 0.0

    @classmethod
    def perf_counter(cls):
        return cls.now


class SlowLoadingForDataWaitTest(BaseTransform):
    """Loading a clip takes 0.1 s on the fake clock; compute takes none."""

    def transform(self, results):
        _FakeClock.now += 0.1
        return results


@pytest.mark.slow
def test_data_bound_run_warns_once(tmp_path, monkeypatch):
    from mmaction.registry import TRANSFORMS

    import mmext.multigrid.hook as hook_module
    TRANSFORMS.register_module(module=SlowLoadingForDataWaitTest, force=True)
    logged = []
    monkeypatch.setattr(hook_module, 'time', _FakeClock)
    monkeypatch.setattr(
        hook_module, 'print_log',
        lambda msg, logger=None, level=logging.INFO: logged.append(
            (level, msg)))
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(default_hooks=dict(checkpoint=dict(
        interval=100, save_last=False))), str(tmp_path))
    cfg.train_cfg.update(max_epochs=2, val_begin=100)
    cfg.param_scheduler[1].update(end=2, milestones=[1])
    cfg.train_dataloader.dataset.pipeline.insert(
        -1, dict(type='SlowLoadingForDataWaitTest'))
    cfg.custom_hooks[0].update(data_wait_threshold=0.3, data_wait_iters=2)
    runner = build_runner(cfg)
    runner.train()
    hook = next(h for h in runner.hooks
                if type(h).__name__ == 'MultigridHook')

    warnings = [m for level, m in logged if level == logging.WARNING]
    assert len(warnings) == 1
    assert 'this run is data-bound' in warnings[0]
    assert 'threshold 30%' in warnings[0]
    # All time on the fake clock is loading.
    assert warnings[0].startswith(
        'Multigrid: waiting for data took 100% of the iteration time at '
        'epoch 0 (batches ')

    # One stage-change summary per loader rebuild (every stage here has at
    # least 1 + 2 iterations), naming the epoch the new shapes start.
    plan = hook.plan
    rebuilds = [s.start_epoch for i, s in enumerate(plan.stages)
                if i == 0 or s.short_cycle != plan.stages[i - 1].short_cycle]
    summaries = [m for level, m in logged
                 if level == logging.INFO and 'stage change at' in m]
    assert [int(m.split('at epoch ')[1].split(' ')[0])
            for m in summaries] == rebuilds
    assert all('loader rebuild 0.00 s' in m and 'data wait 100%' in m
               for m in summaries)
    precise = [m for _, m in logged if 'precise BN over 2 batches' in m]
    assert len(precise) == len(rebuilds)
