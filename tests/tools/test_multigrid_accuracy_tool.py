"""tools/benchmark/multigrid_accuracy.py: option checks, the summary, the
intervals and the verdict on hand-computed cases; the slow test trains a
4-channel model on the real fight clips for 1 recipe epoch with 2 seeds and
evaluates it at T, T/2 and T/4."""
import json
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


def _run(top1, top1_half, seconds):
    # T/4 = 4 frames: the model refuses it (no top-1).
    return dict(top1_at={16: top1, 8: top1_half, 4: None}, top1=top1,
                seconds=seconds)


def test_summary_arithmetic_and_verdict(tool):
    runs = [
        dict(seed=0, recipe=_run(0.80, 0.60, 300),
             multigrid=_run(0.85, 0.80, 150)),
        dict(seed=1, recipe=_run(0.85, 0.65, 320),
             multigrid=_run(0.85, 0.75, 170)),
        dict(seed=2, recipe=_run(0.90, 0.70, 280),
             multigrid=_run(0.85, 0.85, 130)),
    ]
    out = tool.summarize(runs, chance=0.5)
    assert (out['clip_lens'], out['refused']) == ([16, 8], [4])
    at16 = out['16']
    # recipe 0.80, 0.85, 0.90: mean 0.85, sample std 0.05.
    assert at16['recipe']['mean'] == pytest.approx(0.85)
    assert at16['recipe']['std'] == pytest.approx(0.05)
    # Paired multigrid - recipe: +0.05, 0, -0.05 -> mean 0, std 0.05; the
    # t interval 0 +- 4.303 x 0.05 / sqrt(3) = +-0.124 covers 0; detectable
    # (t + z(0.8)) x 0.05 / sqrt(3) = (4.303 + 0.842) x 0.0289 = 0.149.
    diff = at16['difference']
    assert diff['differences'] == pytest.approx([0.05, 0.0, -0.05])
    assert diff['summary']['high'] == pytest.approx(0.1242, abs=1e-4)
    assert diff['detectable'] == pytest.approx(0.1485, abs=1e-3)
    assert out['verdict'] == (
        'parity: multigrid - recipe +0.000 [-0.124, +0.124] covers 0; this '
        'run detects a true difference of 0.149 or more (80 % power)')
    # At T/2 multigrid is better in every seed: +0.20, +0.10, +0.15.
    assert out['8']['difference']['summary']['mean'] == pytest.approx(0.15)
    assert not out['8']['difference']['summary']['covers_zero']
    # 900 s against 450 s.
    assert out['speedup'] == pytest.approx(2.0)
    text = tool.report(out)
    assert 'T=16: recipe 0.850 +- 0.050 (n=3)' in text
    assert 'T=8: recipe 0.650 +- 0.050 (n=3), multigrid 0.800 +- 0.050' in text
    assert 'speed-up 2.00x' in text
    assert 'not evaluated: T=[4] (the model refuses these clip lengths)' in (
        text)


def test_verdict_needs_a_recipe_that_learns(tool):
    runs = [dict(seed=s, recipe=_run(0.6, 0.5, 1), multigrid=_run(0.6, 0.5,
                                                                  1))
            for s in (0, 1)]
    assert tool.summarize(runs, chance=0.5)['verdict'].startswith(
        'undecided: the recipe reaches top-1 0.600, less than 0.25 above '
        'chance (0.50)')
    better = [dict(seed=s, recipe=_run(0.8, 0.5, 1),
                   multigrid=_run(0.9 + s / 100, 0.5, 1)) for s in (0, 1)]
    assert tool.summarize(better, chance=0.5)['verdict'].startswith(
        'multigrid is better than the recipe: +0.105')
    with pytest.raises(ValueError, match='each seed once'):
        tool.summarize(runs[:1] * 2, chance=0.5)


@pytest.mark.parametrize('args,message', [
    (['--config', 'configs/demo/recognizer3d_r18_demo-video.py'],
     'has no MultigridHook in custom_hooks'),
    (['--epochs', '0'], '--epochs must be >= 1, got 0'),
    (['--threads', '0'], '--threads must be >= 1, got 0'),
    (['--seeds', '1', '1'], '--seeds: at least 2 distinct seeds >= 0'),
    (['--seeds', '-1', '2'], '--seeds: at least 2 distinct seeds >= 0'),
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
    # The I3D-style stem needs T >= 8: T/4 = 4 is not evaluated.
    assert (out['clip_lens'], out['refused']) == ([16, 8], [4])
    for run in out['runs']:
        for arm in ('recipe', 'multigrid'):
            top1 = run[arm]['top1_at']
            assert top1['16'] == run[arm]['top1'] and top1['4'] is None
            assert 0 <= top1['8'] <= 1
    assert out['16']['difference']['differences'] == pytest.approx(
        [r['multigrid']['top1'] - r['recipe']['top1'] for r in out['runs']])
    assert out['speedup'] == pytest.approx(
        sum(r['recipe']['seconds'] for r in out['runs']) /
        sum(r['multigrid']['seconds'] for r in out['runs']))
    assert 'verdict: ' in proc.stdout
