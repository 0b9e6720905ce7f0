"""mmext.agvm.runner_checks: what AGVM warns about through mmext.Runner when
training starts (start_iter inside the warm-up, EMAHook every micro-batch).
The resume guard is tested with the runner (tests/test_runner.py)."""
import warnings

import pytest
from helpers import ToyRegressionData, ToyRegressor, toy_loader
from mmengine.config import Config
from mmengine.hooks import EMAHook
from mmengine.registry import DATASETS, MODELS

from mmext.agvm import ema_interval_messages
from mmext.cli import build_runner

MODELS.register_module(name='ChecksToyModel', module=ToyRegressor, force=True)
DATASETS.register_module(name='ChecksToyData', module=ToyRegressionData,
                         force=True)


def _train(tmp_path, start_iter, custom_hooks=(), by_epoch=False):
    """8 iterations of 2 images, 2 micro-batches per step; a warm-up over
    the first 6 iterations (by_epoch: the first 0.75 of 8-iteration
    epochs, i.e. iteration 6)."""
    warmup = (dict(type='mmext.ExpWarmupLR', by_epoch=False, end=6)
              if not by_epoch else dict(type='LinearLR', start_factor=0.1,
                                        by_epoch=True, end=1))
    cfg = Config(dict(
        model=dict(type='ChecksToyModel'), work_dir=str(tmp_path),
        train_dataloader=toy_loader('ChecksToyData', 2),
        train_cfg=dict(by_epoch=True, max_epochs=2),
        param_scheduler=[warmup],
        optim_wrapper=dict(
            type='mmext.AGVMOptimWrapper',
            constructor='mmext.AGVMOptimWrapperConstructor',
            optimizer=dict(type='SGD', lr=0.1), accumulative_counts=2,
            start_iter=start_iter),
        custom_hooks=list(custom_hooks), launcher='none',
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=10)),
        env_cfg=dict(dist_cfg=dict(backend='gloo'))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        build_runner(cfg).train()
    return [str(w.message) for w in caught if 'AGVM start_iter' in str(
        w.message) or 'EMAHook' in str(w.message)]


@pytest.mark.parametrize('start_iter, by_epoch, warned', [
    (2, False, "(mmext.ExpWarmupLR, iterations [0, 6))"),
    (6, False, None),
    (4, True, '(LinearLR, iterations [0, 8))'),
    (8, True, None),
])
def test_start_inside_the_warmup_warns(tmp_path, start_iter, by_epoch,
                                       warned):
    messages = _train(tmp_path, start_iter, by_epoch=by_epoch)
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warned in messages[0], messages
        assert messages[0].startswith(f'AGVM start_iter={start_iter} lies '
                                      'inside the LR warm-up')


def test_ema_hook_with_accumulation_warns_with_the_interval(tmp_path):
    messages = _train(tmp_path, 6, [dict(type='EMAHook')])
    assert messages == [
        'EMAHook updates its average every interval=1 runner iteration(s), '
        'but with optim_wrapper.accumulative_counts=2 the weights change '
        'once every 2 iterations: it averages the same weights several '
        'times per optimizer step, so its momentum acts faster than the '
        'recipe means. Set interval=2 in its config (e.g. custom_hooks=['
        "dict(type='EMAHook', ..., interval=2)])."]
    assert _train(tmp_path, 6, [dict(type='EMAHook', interval=2)]) == []


def test_ema_interval_rule():
    hooks = [EMAHook(interval=4), EMAHook(interval=3), EMAHook()]
    assert len(ema_interval_messages(hooks, 2)) == 2  # 3 and 1
    assert ema_interval_messages(hooks, 1) == []
