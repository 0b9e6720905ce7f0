"""tools/benchmark/multigrid_accuracy.py: option checks, summary arithmetic.

The arithmetic is checked on a hand-computed case without training; the
slow test trains a 4-channel model on the real fight clips for 1 recipe
epoch with 2 seeds (240 clips at batch 8: the recipe trains 30 iterations,
multigrid 17, see test_multigrid_speedup_tool.py).
"""
import json
import math
import sys

import pytest
from helpers import assert_refused_before_training, run_tool

TOOL = 'tools/benchmark/multigrid_accuracy.py'
TINY = ['--threads', '1', '--cfg-options', 'model.backbone.base_channels=4',
        'model.cls_head.in_channels=32', 'train_dataloader.batch_size=8']


@pytest.fixture(scope='module')
def tool():
    """The tool's module (tools/benchmark is on pytest's pythonpath)."""
    import multigrid_accuracy
    return multigrid_accuracy


def _run(top1, seconds, bound='compute'):
    return dict(top1=top1, seconds=seconds, bound=bound)


def test_summary_arithmetic(tool):
    runs = [
        dict(seed=0, recipe=_run(0.50, 300), multigrid=_run(0.75, 150)),
        dict(seed=1, recipe=_run(0.75, 320), multigrid=_run(0.75, 170,
                                                            'data')),
        dict(seed=2, recipe=_run(1.00, 280), multigrid=_run(0.50, 130)),
    ]
    out = tool.summarize(runs, iteration_saving=2.5, val_clips=60)
    # recipe 0.5, 0.75, 1.0: mean 0.75, sample std 0.25.
    assert out['recipe']['mean'] == pytest.approx(0.75)
    assert out['recipe']['std'] == pytest.approx(0.25)
    # multigrid 0.75, 0.75, 0.5: mean 2/3, std sqrt((2 (1/12)^2 +
    # (1/6)^2) / 2) = sqrt(1/48).
    assert out['multigrid']['mean'] == pytest.approx(2 / 3)
    assert out['multigrid']['std'] == pytest.approx(math.sqrt(1 / 48))
    # Paired: +0.25, 0, -0.5 -> mean -1/12, std sqrt(((1/3)^2 + (1/12)^2 +
    # (5/12)^2) / 2) = sqrt(7/48).
    diff = out['difference']
    assert diff['seeds'] == [0, 1, 2]
    assert diff['differences'] == pytest.approx([0.25, 0.0, -0.5])
    assert diff['summary']['mean'] == pytest.approx(-1 / 12)
    assert diff['summary']['std'] == pytest.approx(math.sqrt(7 / 48))
    assert out['recipe_seconds']['mean'] == pytest.approx(300)
    assert out['multigrid_seconds']['std'] == pytest.approx(20)
    # 900 s against 450 s.
    assert out['speedup'] == pytest.approx(2.0)
    assert out['speedup_per_seed'] == pytest.approx([2.0, 320 / 170,
                                                     280 / 130])
    assert out['one_clip'] == pytest.approx(1 / 60)
    assert out['bound'][1] == dict(recipe='compute', multigrid='data')
    text = tool.report(out)
    assert '0.750 +- 0.250 (n=3)' in text
    assert '-0.083 +- 0.382 (n=3)' in text
    assert 'speed-up 2.00x (iteration saving 2.50x)' in text
    assert 'one validation clip = 0.017' in text


def test_one_seed_has_no_std(tool):
    out = tool.summarize([dict(seed=3, recipe=_run(0.5, 10),
                               multigrid=_run(0.6, 5))])
    assert math.isnan(out['recipe']['std'])
    assert 'nan (n=1)' in tool.report(out)
    with pytest.raises(ValueError, match='each seed once'):
        tool.summarize([dict(seed=0, recipe=_run(0.5, 1),
                             multigrid=_run(0.5, 1))] * 2)


@pytest.mark.parametrize('args,message', [
    (['--config', 'configs/demo/recognizer3d_r18_demo-video.py'],
     'has no MultigridHook in custom_hooks'),
    (['--epochs', '0'], '--epochs must be >= 1, got 0'),
    (['--threads', '0'], '--threads must be >= 1, got 0'),
    (['--seeds', '1', '1'], '--seeds must be distinct and >= 0'),
    (['--seeds', '-1'], '--seeds must be distinct and >= 0'),
    (['--cfg-options', 'custom_hooks.0.epoch_factor=0.1'],
     'epoch_factor'),
])
def test_bad_options_stop_before_training(tmp_path, args, message):
    assert_refused_before_training(
        [sys.executable, TOOL, '--work-dir', str(tmp_path)] + args, message)


@pytest.mark.slow
def test_two_seeds_end_to_end(tmp_path, shared_data):
    proc = run_tool([sys.executable, TOOL, '--epochs', '1', '--seeds', '0',
                     '1', '--json', '--work-dir', str(tmp_path)] + TINY,
                    env=dict(MMEXT_DATA_ROOT=shared_data))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out['seeds'] == [0, 1] and len(out['runs']) == 2
    for run in out['runs']:
        recipe, mg = run['recipe'], run['multigrid']
        assert (recipe['iters'], mg['iters']) == (30, 17)
        for r in (recipe, mg):
            assert 0 <= r['top1'] <= 1
            assert r['bound'] in ('data', 'compute')
    assert out['difference']['differences'] == pytest.approx(
        [r['multigrid']['top1'] - r['recipe']['top1'] for r in out['runs']])
    assert out['iteration_saving'] == pytest.approx(30 / 17)
    assert out['one_clip'] == pytest.approx(1 / 60)
    assert out['speedup'] == pytest.approx(
        sum(r['recipe']['seconds'] for r in out['runs']) /
        sum(r['multigrid']['seconds'] for r in out['runs']))
