""".dev_scripts/benchmark/multigrid_accuracy.py: the curve arithmetic (interpolation,
bounds outside the curve, pairing, the verdict rules, the bootstrap interval)
on hand-made runs, the run plan, the square-root LR rule, the option checks
and the report from a JSON; the slow test runs the tool end to end on a few
MSR Action3D clips with a 4-channel model."""
import json
import sys
from types import SimpleNamespace

import pytest
from helpers import assert_refused_before_training, run_tool

TOOL = '.dev_scripts/benchmark/multigrid_accuracy.py'


@pytest.fixture(scope='module')
def tool():
    """The tool's module (on pytest's pythonpath)."""
    import multigrid_accuracy
    return multigrid_accuracy


CURVE = [(10, 0.2), (20, 0.4), (30, 0.6), (40, 0.65)]


@pytest.mark.parametrize('target,expected', [
    (0.5, (25.0, None)),  # halfway between (20, 0.4) and (30, 0.6)
    (0.625, (35.0, None)),  # halfway between (30, 0.6) and (40, 0.65)
    (0.65, (40.0, None)),  # the last point itself
    (0.2, (10, 'at most')),  # the first point: reached by then, or earlier
    (0.1, (10, 'at most')),
    (0.7, (40, 'at least')),  # above the curve: a bound, no extrapolation
])
def test_reach_interpolates_inside_and_bounds_outside(tool, target, expected):
    x, bound = tool.reach(CURVE, target)
    assert (x, bound) == (pytest.approx(expected[0]), expected[1])


def test_reach_takes_the_first_crossing_of_a_curve_that_dips(tool):
    dips = [(10, 0.3), (20, 0.5), (30, 0.45), (40, 0.6)]
    # 0.48 is first reached between 10 and 20: 10 + 0.18 / 0.2 * 10.
    assert tool.reach(dips, 0.48) == (pytest.approx(19.0), None)
    # 0.55 only after the dip: 30 + 0.1 / 0.15 * 10.
    assert tool.reach(dips, 0.55) == (pytest.approx(30 + 20 / 3), None)


def _run(arm, fraction, seed, top1, seconds, flops, half=None):
    return dict(arm=arm, fraction=fraction, epochs=round(32 * fraction),
                seed=seed, top1_at={'16': top1, '8': half or top1 - 0.1},
                seconds=seconds, cpu_seconds=2 * seconds, flops=flops,
                data_share=0.1, load=dict(load_average=2.0, other_cores=0.5),
                bound='data')


# Recipe at 0.5 (seeds 0, 1): top-1 0.40, 0.50 (mean 0.45), 110 s mean, 1
# TFLOP; at 1.0 (seeds 0-2): 0.60, 0.70, 0.65 (mean 0.65), 210 s, 2 TFLOPs.
# Multigrid at 1.0: 0.55, 0.60, 0.59 (mean 0.58), 100 s mean, 0.8 TFLOPs; at
# 0.5: 0.45, 0.55, 0.50 (mean 0.50), 60 s mean.
RUNS = [
    _run('recipe', 0.5, 0, 0.40, 100, 1e12),
    _run('recipe', 0.5, 1, 0.50, 120, 1e12),
    _run('recipe', 1.0, 0, 0.60, 200, 2e12),
    _run('recipe', 1.0, 1, 0.70, 220, 2e12),
    _run('recipe', 1.0, 2, 0.65, 210, 2e12),
    _run('multigrid', 1.0, 0, 0.55, 100, 0.8e12),
    _run('multigrid', 1.0, 1, 0.60, 110, 0.8e12),
    _run('multigrid', 1.0, 2, 0.59, 90, 0.8e12),
    _run('multigrid', 0.5, 0, 0.45, 50, 0.4e12),
    _run('multigrid', 0.5, 1, 0.55, 60, 0.4e12),
    _run('multigrid', 0.5, 2, 0.50, 70, 0.4e12),
]


def test_summary_pairs_seeds_and_reads_speedups_off_the_curve(tool):
    out = tool.summarize(RUNS, [16, 8], chance=0.05)
    full, half = out['comparisons']  # the full schedule first
    # Paired at 1.0: -0.05, -0.10, -0.06 -> mean -0.07, std 0.0265; t(2)
    # 4.303 x 0.0265 / sqrt(3) = 0.0657: [-0.1357, -0.0043] excludes 0.
    diff = full['16']['difference']
    assert diff['seeds'] == [0, 1, 2]
    assert diff['differences'] == pytest.approx([-0.05, -0.10, -0.06])
    assert diff['summary']['high'] == pytest.approx(-0.0043, abs=1e-4)
    assert full['verdict'].startswith('worse: multigrid - recipe -0.070')
    assert full['verdict'].endswith('[-0.136, -0.004] excludes 0')
    # The recipe reaches 0.58 at 110 + (0.58 - 0.45) / 0.2 x 100 = 175 s
    # against multigrid's 100 s; FLOPs: 1.65 against 0.8 TFLOPs.
    assert full['16']['speedup']['seconds']['value'] == pytest.approx(1.75)
    assert full['16']['speedup']['seconds']['bound'] is None
    assert full['16']['speedup']['flops']['value'] == pytest.approx(2.0625)
    # At 0.5 only seeds 0 and 1 have both arms: +0.05 each.
    assert half['16']['difference']['seeds'] == [0, 1]
    assert half['16']['difference']['differences'] == pytest.approx(
        [0.05, 0.05])
    # 0.50 is reached at 110 + 0.05 / 0.2 x 100 = 135 s, against 60 s.
    assert half['16']['speedup']['seconds']['value'] == pytest.approx(2.25)
    recipe_full = next(g for g in out['groups']
                       if (g['arm'], g['fraction']) == ('recipe', 1.0))
    assert recipe_full['top1']['16']['mean'] == pytest.approx(0.65)
    assert recipe_full['seconds']['mean'] == pytest.approx(210)
    # Deterministic bootstrap: the same interval again, around the value.
    again = tool.summarize(RUNS, [16, 8], chance=0.05)
    s = full['16']['speedup']['seconds']
    assert again['comparisons'][0]['16']['speedup']['seconds'] == s
    assert s['low'] < s['value'] < s['high']
    text = tool.report(out)
    assert 'speed-up at equal top-1: time 1.75x [' in text
    # The share of the FLOP saving that became time: 1.75 / 2.0625.
    assert 'FLOPs 2.06x [' in text and '; time saving 0.85 of the FLOP' in text
    assert '  verdict: worse: multigrid - recipe -0.070' in text


def test_speedup_bounds_and_interval_by_value(tool):
    recipe = [[_run('recipe', f, s, y, x, x * 1e10) for s in (0, 1)]
              for f, y, x in ((0.5, 0.4, 100), (1.0, 0.6, 200))]
    # Seeds alike within each group: every bootstrap draw is the value.
    mg = [_run('multigrid', 1.0, s, 0.5, 75, 0) for s in (0, 1)]
    s = tool.speedup(recipe, mg, 'seconds', '16')
    assert s == dict(value=pytest.approx(2.0), bound=None,
                     low=pytest.approx(2.0), high=pytest.approx(2.0))
    # Above the recipe's best point: its full time (200 s) is a lower bound.
    above = [_run('multigrid', 1.0, s, 0.7, 100, 0) for s in (0, 1)]
    assert tool.speedup(recipe, above, 'seconds', '16')['bound'] == (
        'at least')
    assert tool.speedup(recipe, above, 'seconds', '16')['value'] == 2.0
    assert tool.report(dict(clip_lens=[16], groups=[], comparisons=[dict(
        arm='multigrid', fraction=1.0, **{'16': dict(speedup=dict(
            seconds=dict(value=2.0, bound='at least', low=2.0, high=2.0),
            flops=dict(value=1.0, bound='at most', low=1.0,
                       high=1.0)))})])).endswith(
        'time >= 2.00x [2.00, 2.00], FLOPs <= 1.00x [1.00, 1.00]')


@pytest.mark.parametrize('low,high,recipe,expected', [
    (-0.03, 0.04, 0.28, 'undecided: the recipe reaches top-1 0.280, less '
                        'than 0.25 above chance (0.05)'),
    (0.01, 0.05, 0.60, 'better: multigrid - recipe +0.030 [+0.010, +0.050] '
                       'excludes 0'),
    (-0.09, -0.01, 0.60, 'worse: multigrid - recipe -0.050 [-0.090, -0.010] '
                         'excludes 0'),
    (-0.03, 0.05, 0.60, 'parity: multigrid - recipe +0.010 [-0.030, '
                        '+0.050] lies within +-0.05'),
    (-0.08, 0.04, 0.60, 'undecided: multigrid - recipe -0.020 [-0.080, '
                        '+0.040] covers 0 but not within +-0.05; this run '
                        'detects 0.090 (80 % power)'),
])
def test_verdict_rules(tool, low, high, recipe, expected):
    difference = dict(summary=dict(mean=(low + high) / 2, low=low, high=high),
                      detectable=0.09)
    assert tool.verdict(recipe, difference, chance=0.05) == expected


def test_summary_refuses_a_seed_twice(tool):
    with pytest.raises(ValueError, match='each seed once'):
        tool.summarize(RUNS[:1] * 2, [16, 8], chance=0.05)


def test_plan_runs_counts_seeds_and_orders_longest_first(tool):
    runs = tool.plan_runs([0, 1, 2, 3, 4], [0.25, 0.5, 0.75, 1.0], 3,
                          [1.0, 0.5], ['paper', 'constant'], 32)
    count = {}
    for r in runs:
        key = (r['arm'], r['epochs'])
        count[key] = count.get(key, 0) + 1
    assert count == {('recipe', 8): 3, ('recipe', 16): 3, ('recipe', 24): 3,
                     ('recipe', 32): 5, ('paper', 32): 5, ('paper', 16): 5,
                     ('constant', 32): 5, ('constant', 16): 5}
    assert [(r['arm'], r['epochs'], r['seed']) for r in runs[:4]] == [
        ('constant', 32, 0), ('paper', 32, 0), ('recipe', 32, 0),
        ('constant', 32, 1)]
    assert [r['epochs'] for r in runs] == sorted(
        (r['epochs'] for r in runs), reverse=True)


def test_runs_of_an_earlier_json_are_reused_under_their_new_arm(
        tool, tmp_path):
    """A JSON of the lr_rule arms: its 'multigrid-sqrt' runs are the
    'paper' arm's; runs of the same key are taken, nothing trains."""
    args = SimpleNamespace(
        work_dir=str(tmp_path), jobs=1, threads=1, cfg_options=None,
        config='c.py', device='cpu', channels_last=False, compile=None,
        amp=None, repeat_aug=None, reuse=[str(tmp_path / 'old.json')])
    runs = tool.plan_runs([0, 1], [1.0], 1, [1.0], ['paper'], 4)
    old = []
    for run in runs:
        arm = 'multigrid-sqrt' if run['arm'] == 'paper' else 'recipe'
        key = dict(run, arm=arm, clip_lens=[16, 8],
                   **{k: getattr(args, k) for k in tool.RUN_KEYS})
        key['cfg_options'] = {'randomness.seed': run['seed']}
        old.append(dict(run, arm=arm, key=key, top1=0.5))
    (tmp_path / 'old.json').write_text(json.dumps(dict(runs=old)))
    done = tool.launch(runs, args, [16, 8])
    assert sorted((r['arm'], r['seed']) for r in done) == [
        ('paper', 0), ('paper', 1), ('recipe', 0), ('recipe', 1)]
    assert {r['reused_from'] for r in done} == {str(tmp_path / 'old.json')}
    assert not list(tmp_path.glob('*/spec.json'))


def test_shorter_schedules_scale_milestones_and_warm_up(tool):
    from mmengine.config import Config
    from multigrid_speedup import shorten_schedule
    cfg = Config(dict(
        train_cfg=dict(max_epochs=32), default_hooks=dict(),
        param_scheduler=[
            dict(type='LinearLR', begin=0, end=2),
            dict(type='MultiStepLR', begin=0, end=32, milestones=[20, 28])]))
    shorten_schedule(cfg, 8)
    warm, step = cfg.param_scheduler
    assert (warm.begin, warm.end) == (0, 0.5)
    assert (step.milestones, step.end) == ([5, 7], 8)
    assert cfg.train_cfg.max_epochs == 8


def test_load_sampler_counts_the_cpu_time_of_the_process_tree():
    import subprocess
    import time

    from bench_utils import LoadSampler
    burn = ('import time\nt = time.process_time()\n'
            'while time.process_time() - t < 0.5: pass')
    start = time.perf_counter()
    with LoadSampler(interval=0.05) as sampler:
        subprocess.run([sys.executable, '-c', burn], check=True)
        begin = time.process_time()
        while time.process_time() - begin < 0.3:
            pass
    wall = time.perf_counter() - start
    # The child's 0.5 s and this process's 0.3 s, at most 2 cores' worth.
    assert 0.8 <= sampler.cpu_seconds <= 2 * wall


def test_report_and_plot_from_json(tool, tmp_path):
    result = tool.summarize(RUNS, [16, 8], chance=0.05)
    path = tmp_path / 'accuracy.json'
    path.write_text(json.dumps(result))
    proc = run_tool([sys.executable, TOOL, '--from-json', str(path)])
    assert tool.report(json.loads(path.read_text())) in proc.stdout
    assert (tmp_path / 'accuracy.png').stat().st_size > 10_000


@pytest.mark.parametrize('args,message', [
    (['--config', 'configs/demo/recognizer3d_r18_demo-video.py'],
     'has no MultigridHook in custom_hooks'),
    (['--jobs', '0'], '--jobs must be >= 1, got 0'),
    (['--seeds', '1', '1'], '--seeds: at least 2 distinct seeds >= 0'),
    (['--curve-seeds', '0'], '--curve-seeds must be >= 1, got 0'),
    (['--fractions', '0.5', '0.75'], 'must hold 1 (the full schedule)'),
    (['--mg-fractions', '0.3'], 'and every --mg-fractions [0.3]'),
    (['--epochs', '2'], 'each needs its own number of epochs >= 1'),
    (['--cfg-options', 'custom_hooks.0.epoch_factor=0.1'],
     'long-cycle at 1 of 32 epochs'),
])
def test_bad_options_stop_before_training(tmp_path, args, message):
    assert_refused_before_training(
        [sys.executable, TOOL, '--work-dir', str(tmp_path)] + args, message)


@pytest.mark.slow
def test_tiny_protocol_end_to_end(tmp_path, shared_data):
    """2 seeds, the recipe at 1/2 and 1 of 4 epochs, multigrid at 1, on 41
    train and 21 val clips with a 4-channel model at batch 2."""
    root = f'{shared_data}/msr_action3d'
    for name, every in (('train', 7), ('val', 13)):
        with open(f'{root}/{name}.txt') as f:
            lines = f.readlines()[::every]
        (tmp_path / f'{name}.txt').write_text(''.join(lines))
    proc = run_tool([
        sys.executable, TOOL, '--seeds', '0', '1', '--fractions', '0.5', '1',
        '--mg-fractions', '1', '--arms', 'paper', '--epochs', '4', '--json',
        '--work-dir',
        str(tmp_path / 'out'), '--cfg-options',
        'model.backbone.base_channels=4', 'model.cls_head.in_channels=32',
        'train_dataloader.batch_size=2', 'custom_hooks.0.bn_base_size=2',
        f'train_dataloader.dataset.ann_file={tmp_path}/train.txt',
        f'val_dataloader.dataset.ann_file={tmp_path}/val.txt'],
        env=dict(MMEXT_DATA_ROOT=shared_data))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted((r['arm'], r['epochs'], r['seed']) for r in out['runs']) == [
        ('paper', 4, 0), ('paper', 4, 1), ('recipe', 2, 0),
        ('recipe', 2, 1), ('recipe', 4, 0), ('recipe', 4, 1)]
    flops = {k: v * 1e9 for k, v in out['clip_gflops'].items()}
    for r in out['runs']:
        assert set(r['top1_at']) == {'16', '8'}
        assert all(0 <= v <= 1 for v in r['top1_at'].values())
        assert r['cpu_seconds'] > 0 and 0 <= r['data_share'] <= 1
        assert r['flops'] == pytest.approx(sum(
            s['iters'] * s['batch'] * flops[f'{s["clip_len"]}x'
                                            f'{s["crop_size"]}']
            for s in r['shapes']))
        assert sum(s['iters'] * s['batch'] for s in r['shapes']) == r['clips']
    # 41 clips a recipe epoch.
    recipe = [r for r in out['runs'] if r['arm'] == 'recipe']
    assert {r['clips'] for r in recipe} == {82, 164}
    mg = [r for r in out['runs'] if r['arm'] == 'paper']
    diff = out['comparisons'][0]['16']['difference']['differences']
    assert diff == pytest.approx([
        m['top1_at']['16'] - r['top1_at']['16']
        for m, r in zip(sorted(mg, key=lambda r: r['seed']), sorted(
            (r for r in recipe if r['epochs'] == 4), key=lambda r: r['seed']))
    ])
    assert 'verdict' in out['comparisons'][0]
    assert (tmp_path / 'out' / 'accuracy.png').stat().st_size > 10_000
    again = run_tool([sys.executable, TOOL, '--from-json',
                      str(tmp_path / 'out' / 'accuracy.json')])
    assert _report_lines(proc.stdout) == _report_lines(again.stdout)


def _report_lines(stdout):
    """The report's lines of a tool's output (from the table's header to the
    last verdict)."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith(
        'arm'))
    end = max(i for i, ln in enumerate(lines) if 'verdict:' in ln)
    return lines[start:end + 1]
