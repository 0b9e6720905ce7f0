"""tools/benchmark/multigrid_speedup.py: JSON figures and their arithmetic.

A 4-channel model at batch 8 on synthetic clips (no data files needed). With
240 clips and 1 recipe epoch, the schedule (MultigridPlan) trains 2 epochs:
epoch 0 at batches [64, 32, 32] (T=8; S=56, 79, 79) -> 64+32+32+64+32 = 224
clips in 5 iterations; epoch 1 at [32, 16, 8] (T=16; S=56, 79, 112) -> 4
cycles of 56 clips in 12 iterations. The recipe trains 240 / 8 = 30.
"""
import json
import math
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, run_tool

TOOL = 'tools/benchmark/multigrid_speedup.py'
TINY = ['--threads', '1', '--cfg-options', 'model.backbone.base_channels=4',
        'model.cls_head.in_channels=32', 'train_dataloader.batch_size=8',
        'train_dataloader.dataset.ann_file=no-such-file.txt']


def _json(proc):
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_synthetic_run_figures(tmp_path):
    # The warm-up over the whole run: one recipe epoch of 40 leaves
    # LinearLR's 1-epoch warm-up under one iteration (mmengine refuses it).
    proc = run_tool([sys.executable, TOOL, '--synthetic', '--epochs', '1',
                     '--clips', '240', '--warmup', '1', '--json',
                     '--work-dir', str(tmp_path)] + TINY +
                    ['param_scheduler.0.end=40'])
    out = _json(proc)
    base, mg = out['baseline'], out['multigrid']
    assert out['mode'] == 'synthetic' and out['device'] == 'cpu'
    assert out['settings']['dtype'] == 'float32'
    # Each shape's FLOP rate over its steady steps, beside the baseline's.
    base_rate = base['shapes'][0]['tflops_per_s']
    assert base['shapes'][0]['rate_vs_base'] == pytest.approx(1.0)
    for s in mg['shapes']:
        assert s['rate_vs_base'] == pytest.approx(s['tflops_per_s'] /
                                                  base_rate)
    assert (base['iters'], base['clips']) == (30, 240)
    assert (mg['iters'], mg['clips']) == (17, 448)
    assert base['top1'] is None and mg['top1'] is None
    assert out['iteration_saving'] == pytest.approx(30 / 17)
    assert out['speedup'] == pytest.approx(base['seconds'] / mg['seconds'])
    assert out['ratio'] == pytest.approx(out['speedup'] / (30 / 17))
    # Both runs keep glibc's freed memory (the hook's setting), so only
    # multigrid differs.
    assert base['kept_freed_memory'] is mg['kept_freed_memory'] is True
    for run in (base, mg):
        excess = [max(0, x['first_iter_s'] - x['steady_s_per_iter'])
                  for x in run['shapes']]
        assert run['first_iter_excess_seconds'] == pytest.approx(sum(excess))
    assert out['speedup_net_of_first_iters'] == pytest.approx(
        (base['seconds'] - base['first_iter_excess_seconds'])
        / (mg['seconds'] - mg['first_iter_excess_seconds']))
    for run in (base, mg):
        assert run['data_seconds'] + run['compute_seconds'] + run[
            'other_seconds'] == pytest.approx(run['seconds'])
        assert run['clips_per_s'] == pytest.approx(run['clips'] /
                                                   run['seconds'])
        assert run['bound'] == ('data' if run['data_share'] > 0.2 else
                                'compute')
        assert sum(s['iters'] for s in run['shapes']) == run['iters']
    shapes = {(s['batch'], s['clip_len'], s['crop_size']): s['iters']
              for s in mg['shapes']}
    assert shapes == {(64, 8, 56): 2, (32, 8, 79): 3, (32, 16, 56): 4,
                      (16, 16, 79): 4, (8, 16, 112): 4}
    assert [(s['batch'], s['clip_len'], s['crop_size'])
            for s in base['shapes']] == [(8, 16, 112)]
    s = mg['shapes'][0]
    assert s['compute_ms_per_clip'] == pytest.approx(
        1000 * s['compute_s_per_iter'] / s['batch'])
    # FLOPs counted on the model by the hook's check; the load each arm and
    # each shape ran under, sampled during the run.
    assert out['flops_counted'] is True
    assert out['flop_limit_share'] == pytest.approx(
        out['speedup'] / out['flop_saving'])
    for run in (base, mg):
        assert set(run['load']) == {'load_average', 'other_cores'}
        assert all('other_cores' in x for x in run['shapes'])
    assert [r['ratio'] for r in out['repeats']] == [out['ratio']]
    assert out['median_ratio'] == out['ratio']


def test_projection_arithmetic(tmp_path):
    """Full 40-epoch recipe: 420 multigrid iterations against 1200."""
    proc = run_tool([sys.executable, TOOL, '--project', '--project-iters',
                     '1', '--project-seconds', '0', '--warmup', '1',
                     '--samples-per-rank', '240', '--json',
                     '--work-dir', str(tmp_path)] + TINY)
    out = _json(proc)
    base, mg = out['baseline'], out['multigrid']
    assert (base['iters'], mg['iters']) == (1200, 420)
    assert out['iteration_saving'] == pytest.approx(1200 / 420)
    rows = {(*r['timed_shape'], r['sub_bn_splits']): r for r in out['shapes']}
    # bn_base_size 4: every batch has batch / 4 sub-BN splits, so a shape
    # of two stages is one row (64 clips: 48 + 44 iterations).
    assert {k: r['iters'] for k, r in rows.items()} == {
        (64, 8, 56, 16): 92, (32, 8, 79, 8): 116, (16, 8, 112, 4): 44,
        (32, 16, 56, 8): 56, (16, 16, 79, 4): 56, (8, 16, 112, 2): 56}
    # Precise BN (4 batches) at the end of each long-cycle shape: epochs 19,
    # 36, 44, 49, 54 and 60 (the LR drops at 56 and 58 keep the shape).
    ends = [(32, 8, 79, 8), (16, 8, 112, 4), (8, 16, 112, 2)] * 2
    assert [tuple(k) for k in mg['precise_bn_passes']] == [e[:3]
                                                            for e in ends]
    # Every timed shape has a time; their iterations make the whole run.
    assert all(r['s_per_iter'] > 0 and r['forward_s_per_iter'] > 0
               for r in rows.values())
    assert sum(r['iters'] for r in rows.values()) == mg['iters']
    assert out['base_shape'] == [8, 16, 112]


@pytest.mark.parametrize('cached', [False, True])
def test_projection_gives_the_loader_per_shape(tmp_path, demo_data,
                                               cached):
    """Per shape, the loader's ms per clip in each transform of the demo's
    pipeline (4 clips, one process) beside the compute's (the step over its
    batch): decord's decode, or the frame cache's."""
    options = ['train_dataloader.dataset.type=mmext.CachedVideoDataset',
               f'train_dataloader.dataset.cache_dir={tmp_path}/cache'] * cached
    proc = run_tool([sys.executable, TOOL, '--project', '--project-iters',
                     '1', '--project-seconds', '0', '--warmup', '0',
                     '--loader-clips', '4', '--json', '--work-dir',
                     str(tmp_path), '--config',
                     'configs/demo/recognizer3d_r18_multigrid_demo-video.py'] +
                    TINY[:-1] + options)
    decode = 'CachedDecordDecode' if cached else 'DecordDecode'
    for row in _json(proc)['shapes']:
        costs = row['loader_transforms_ms']
        assert list(costs) == [decode.replace('Decode', 'Init'),
                               'SampleFrames', decode, 'Resize',
                               'MultiScaleCrop', 'Resize#2',
                               'FormatShape', 'PackActionInputs']
        assert row['loader_ms_per_clip'] == pytest.approx(
            sum(costs.values()))
        assert row['compute_ms_per_clip'] == pytest.approx(
            1e3 * row['s_per_iter'] / row['timed_shape'][0])
        shape = str(tuple(row['full_shape']))
        line = next(ln for ln in proc.stdout.splitlines()
                    if ln.endswith('loader workers') and shape + ':' in ln)
        most = max(costs, key=costs.get)
        assert f'({most} {costs[most]:.1f}), compute' in line


def test_projection_in_bfloat16_channels_last_with_a_time_floor(tmp_path):
    """--project autocasts (bf16 on the CPU too) in channels_last_3d; each
    shape gets timed steps until it has 2 and 0.3 s; its FLOP rate is 3x
    the counted forward FLOPs per step, beside the base shape's."""
    proc = run_tool([sys.executable, TOOL, '--project', '--project-iters',
                     '2', '--project-seconds', '0.3', '--warmup', '1',
                     '--amp', 'bfloat16', '--channels-last',
                     '--samples-per-rank', '240', '--json', '--work-dir',
                     str(tmp_path)] + TINY)
    out = _json(proc)
    assert out['settings'] == dict(
        dtype='bfloat16', channels_last=True, tf32_matmul=False,
        tf32_cudnn=True, cudnn_benchmark=False, cudnn=None)
    assert 'ChannelsLastHook: ' in proc.stdout + proc.stderr
    for row in out['shapes']:
        assert row['timed_steps'] >= 2 and row['timed_seconds'] >= 0.3
        assert row['tflops_per_s'] > 0
        assert row['rate_vs_base'] == pytest.approx(
            row['tflops_per_s'] / out['base_tflops_per_s'])
    assert 'TFLOP/s x base rate' in proc.stdout
    assert 'settings: dtype bfloat16, channels_last True' in proc.stdout


def test_flop_rate():
    tool = _tool_module()
    flops = {(16, 112): 2e9}
    assert tool.flop_rate(flops, (8, 16, 112, 1), 0.5) == pytest.approx(
        3 * 8 * 2e9 / 0.5 / 1e12)
    assert tool.flop_rate(flops, (8, 8, 112), 0.5) is None
    assert tool.flop_rate(None, (8, 16, 112), 0.5) is None


def test_project_needs_dataset_size(tmp_path):
    res = subprocess.run(
        [sys.executable, TOOL, '--project', '--work-dir', str(tmp_path)] +
        TINY, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode != 0
    assert '--samples-per-rank' in res.stderr


@pytest.mark.parametrize('args,message', [
    (['--config', 'configs/demo/recognizer3d_r18_demo-video.py'],
     'has no MultigridHook in custom_hooks'),
    (['--project', '--project-iters', '0'], '--project-iters must be >= 1'),
    (['--threads', '0'], '--threads must be >= 1, got 0'),
])
def test_bad_options_stop_before_training(tmp_path, args, message):
    res = subprocess.run(
        [sys.executable, TOOL, '--work-dir', str(tmp_path)] + args,
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert message in res.stderr
    assert 'Epoch(train)' not in res.stdout + res.stderr


@pytest.mark.parametrize('args,message', [
    (['--project', '--compile', '--channels-last'],
     '--compile: for the training runs only; --project times the shapes '
     'eagerly on random clips'),
    (['--warmup', '-1'], '--warmup -1, --project-seconds 2.0, --loader-clips '
     '30: must be >= 0'),
    (['--loader-clips', '-1'], '--loader-clips -1: must be >= 0'),
    (['--synthetic', '--clips', '0'], '--clips must be >= 1, got 0'),
    (['--synthetic', '--repeat-aug', '2'],
     '--repeat-aug needs the real clips'),
    (['--repeat-aug', '0'], '--repeat-aug must be >= 1, got 0'),
    (['--device', 'cpu', '--amp'],
     "--amp: mmengine's AmpOptimWrapper refuses to build without an "
     'accelerator'),
    (['--amp', 'float64'], "invalid choice: 'float64'"),
])
def test_bad_stack_options_stop_before_training(tmp_path, args, message):
    test_bad_options_stop_before_training(tmp_path, args, message)


def _tool_module():
    """The tool's module (tools/benchmark is on pytest's pythonpath)."""
    import multigrid_speedup
    return multigrid_speedup


@pytest.mark.parametrize('multigrid', [False, True])
def test_stack_options_reach_both_configs(multigrid):
    """Each speed option edits the baseline's and the multigrid run's
    config alike; the JSON's ``stack`` names them."""
    from argparse import Namespace

    from bench_utils import load_run_config
    tool = _tool_module()
    cfg = load_run_config(f'{REPO_ROOT}/{tool.DEFAULT_CONFIG}', None)
    if not multigrid:
        tool._drop_multigrid(cfg)
    hooks = [h['type'] for h in cfg.custom_hooks]
    batch, optim = cfg.train_dataloader.batch_size, cfg.optim_wrapper.copy()
    args = Namespace(channels_last=True, compile='aot_eager', amp='bfloat16',
                     repeat_aug=2)
    tool._apply_stack(cfg, args)
    assert [h['type'] for h in cfg.custom_hooks] == [
        'Float32HeadHook', 'ChannelsLastHook'] + hooks
    assert cfg.compile == dict(backend='aot_eager')
    assert cfg.optim_wrapper == dict(optim, type='AmpOptimWrapper',
                                     dtype='bfloat16')
    loader = cfg.train_dataloader
    assert (loader.batch_size, loader.collate_fn) == (
        batch // 2, dict(type='repeat_pseudo_collate'))
    assert (loader.dataset.type, loader.dataset.num_repeats) == (
        'RepeatAugDataset', 2)
    assert tool._stack(args) == dict(channels_last=True, compile='aot_eager',
                                     amp='bfloat16', repeat_aug=2)
    fp16 = load_run_config(f'{REPO_ROOT}/{tool.DEFAULT_CONFIG}', None)
    tool._apply_stack(fp16, Namespace(channels_last=False, compile=None,
                                      amp='float16', repeat_aug=None))
    assert fp16.optim_wrapper == dict(optim, type='AmpOptimWrapper',
                                      dtype='float16', loss_scale='dynamic')
    assert 'compile' not in fp16 and fp16.custom_hooks[0]['type'] != (
        'ChannelsLastHook')


@pytest.mark.slow
def test_compiled_channels_last_run(tmp_path):
    """--compile eager --channels-last on both runs: the JSON says so and
    counts each run's graphs; multigrid's run has none falling back."""
    proc = run_tool([sys.executable, TOOL, '--synthetic', '--epochs', '1',
                     '--compile', 'eager', '--channels-last', '--json',
                     '--work-dir', str(tmp_path)] + TINY +
                    ['param_scheduler.0.end=40'])  # as above
    out = _json(proc)
    assert out['stack'] == dict(channels_last=True, compile='eager',
                                amp=None, repeat_aug=None)
    base, mg = out['baseline']['compile'], out['multigrid']['compile']
    assert base['graphs'] > 0 and mg['graphs'] > base['graphs']
    assert mg == dict(graphs=mg['graphs'], fallbacks=[], fell_back=False)
    assert (out['multigrid']['iters'], out['baseline']['iters']) == (17, 30)


def test_a_load_gap_between_the_arms_warns():
    tool = _tool_module()
    quiet = dict(load=dict(load_average=2.0, other_cores=0.1))
    busy = dict(load=dict(load_average=3.5, other_cores=0.5))
    assert tool.load_warning(quiet, dict(load=dict(load_average=2.5,
                                                   other_cores=0.3))) is None
    message = tool.load_warning(quiet, busy)
    assert message.startswith('warning: the arms ran under different load ')
    assert ('(baseline vs multigrid: other cores 0.10 vs 0.50; ') in message
    assert 'load average 2.00 vs 3.50)' in message


def test_load_sampler_attributes_samples_to_iterations():
    from bench_utils import LoadSampler
    sampler = LoadSampler()
    sampler.samples = [(1.0, 2.0, 0.0), (2.0, 4.0, 1.0), (3.0, 6.0, 0.5)]
    # Each time takes the first sample after it (the last one past the end).
    assert sampler.during([0.5, 1.5]) == dict(load_average=3.0,
                                              other_cores=0.5)
    assert sampler.during([9.0]) == dict(load_average=6.0, other_cores=0.5)
    assert math.isnan(LoadSampler().during([1.0])['other_cores'])
    with LoadSampler(interval=0.05) as live:
        sum(i * i for i in range(10**6))
        import time
        time.sleep(0.2)
    assert live.samples and all(cores >= 0 for _, _, cores in live.samples)


def test_overall_against_the_iteration_and_flop_savings():
    from types import SimpleNamespace
    tool = _tool_module()
    run = dict(first_iter_excess_seconds=0.0,
               load=dict(load_average=1.0, other_cores=0.0))
    plan = SimpleNamespace(iteration_saving=lambda: 2.0,
                           flops_ratio=lambda: 0.25, flops_counted=True)
    out = tool._overall(dict(run, seconds=100.0), dict(run, seconds=40.0),
                        plan)
    assert out['speedup'] == pytest.approx(2.5)
    assert out['ratio'] == pytest.approx(1.25)
    assert out['flop_saving'] == pytest.approx(4.0)
    assert out['flop_limit_share'] == pytest.approx(0.625)
    assert out['load_warning'] is None


def test_repeat_aug_on_a_frame_cache_config_is_refused(tmp_path):
    """RepeatAugDataset would decode with decord: said before training."""
    res = subprocess.run(
        [sys.executable, TOOL, '--work-dir', str(tmp_path), '--config',
         'configs/multigrid/recognizer3d_r18_adamw_multigrid_msr-action3d.py',
         '--repeat-aug', '2'], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=300)
    assert res.returncode != 0
    assert 'decodes with decord, not from the frame cache' in res.stderr
    assert 'Epoch(train)' not in res.stdout + res.stderr
