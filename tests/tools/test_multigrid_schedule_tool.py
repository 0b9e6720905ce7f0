"""tools/analysis/multigrid_schedule.py prints what the hook trains."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

import mmext  # noqa: F401

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CFG = osp.join(ROOT, 'configs', 'multigrid',
               'slowfast_r50_multigrid_8xb8-8x8x1-steplr-239e_'
               'kinetics400-rgb.py')
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
I3D = osp.join(ROOT, 'configs', 'multigrid',
               'i3d_r50_multigrid_8xb8-32x2x1-100e_kinetics400-rgb.py')
I3D_MILESTONES = (
    "MultiStepLR milestones [40, 80] lie outside the recipe's 2 epochs, so "
    'they are not LR stages of the multigrid schedule (LR stages start at '
    '[0, 2]).')


def _run(config, *args):
    return subprocess.run(
        [sys.executable, 'tools/analysis/multigrid_schedule.py', config,
         *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
        # tiny_mg.py imports its recorder hook from its own folder.
        env=dict(os.environ, PYTHONPATH=osp.dirname(TINY)))


def test_reference_table_json_and_text():
    out = json.loads(_run(CFG, '--json', '--no-model-check',
                          '--world-size', '8').stdout)
    stages = out['stages']
    assert [s['end_epoch'] for s in stages][-3:] == [329, 343, 358]
    assert (stages[0]['batch_size'], stages[0]['clip_len'],
            stages[0]['crop_size']) == (64, 8, 158)
    # The recipe's 8 GPUs x 8 clips: the effective batch of the first stage.
    assert stages[0]['effective_batch_size'] == 512
    assert out['base']['effective_batch_size'] == 64
    assert out['exact'] is False and out['iters'] is None
    assert round(out['iteration_saving'], 2) == 3.42
    text = _run(CFG, '--no-model-check').stdout
    assert '3.42x fewer iterations' in text and 'estimate' in text
    assert ('eff. batch = batch x world size 1 x accumulative_counts 1'
            in text)


def test_plot_is_written(tmp_path):
    out = tmp_path / 'schedule.png'
    _run(CFG, '--no-model-check', '--plot', str(out))
    assert out.stat().st_size > 10000


@pytest.mark.usefixtures('repo_demo_data')
def test_exact_count_matches_the_hook(tmp_path):
    """The tool's exact count is what the hook trains (partial batches
    dropped), and differs from the estimate."""
    from mmext.cli import build_runner, load_run_config
    exact = json.loads(_run(TINY, '--dataset', '--json').stdout)
    estimate = json.loads(_run(TINY, '--json').stdout)
    cfg = load_run_config(TINY, None, str(tmp_path))
    runner = build_runner(cfg)
    # What Runner.train() builds before its before_run hooks.
    loop = runner.train_loop
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.param_schedulers = runner.build_param_scheduler(
        runner.param_schedulers)
    runner.call_hook('before_run')
    assert exact['exact'] is True
    assert exact['iters'] == loop.max_iters
    per_epoch = exact['clips_per_process'] / cfg.train_dataloader.batch_size
    assert sum(s['estimated_iters'] for s in estimate['stages']) * \
        per_epoch > exact['iters']


def _tool(config, *args):
    return subprocess.run(
        [sys.executable, 'tools/analysis/multigrid_schedule.py', config,
         *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=osp.dirname(TINY)))


def test_tool_warns_like_the_plan():
    proc = _tool(I3D, '--json', '--no-model-check', '--cfg-options',
                 'train_cfg.max_epochs=2', 'custom_hooks.0.long_cycle=False')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)['warnings'] == [I3D_MILESTONES]


def test_tool_errors_exit_non_zero():
    proc = _tool(I3D, '--no-model-check', '--cfg-options',
                 'train_cfg.max_epochs=2')
    assert proc.returncode == 1
    assert proc.stderr.rstrip().endswith(
        'Recipe values the schedule cannot honour: ' + I3D_MILESTONES)
    # The model is built and checked as the hook does: T/4 = 4 < 8.
    proc = _tool(I3D, '--cfg-options',
                 'train_dataloader.dataset.pipeline.1.clip_len=16')
    assert proc.returncode == 1
    assert proc.stderr.rstrip().splitlines()[-1] == (
        'error: ResNet3d needs clip lengths T >= 8 (temporal strides of '
        'conv1, pool1 and pool2); the multigrid schedule uses T=[4]. Use '
        'larger t factors in long_cycle_factors or a longer '
        'SampleFrames.clip_len.')


@pytest.mark.usefixtures('repo_demo_data')
def test_hook_runs_the_same_checks_as_the_tool(tmp_path):
    from mmext.cli import build_runner, load_run_config
    option = 'param_scheduler.0.end=5'
    proc = _tool(TINY, '--json', '--dataset', '--cfg-options', option)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tool = json.loads(proc.stdout)['warnings']
    assert tool == [
        "The LinearLR warm-up ends at recipe epoch 5, after the recipe's 4 "
        'epochs: it is cut at the end of the run and never reaches its final '
        'value. Shorten it (end) or raise train_cfg.max_epochs.'
    ]
    os.chdir(ROOT)
    cfg = load_run_config(TINY, None, str(tmp_path))
    cfg.param_scheduler[0].end = 5
    runner = build_runner(cfg)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.param_schedulers = runner.build_param_scheduler(
        runner.param_schedulers)
    with pytest.warns(UserWarning) as record:
        runner.call_hook('before_run')
    assert [str(w.message) for w in record
            if 'LR' in str(w.message)] == tool


def test_config_inheriting_through_the_mmext_prefix(tmp_path):
    """mmengine adds ``_scope_`` to the hook inherited through ``mmext::``;
    the tool reads the config as training does."""
    child = tmp_path / 'child.py'
    child.write_text(
        "_base_ = 'mmext::multigrid/slowfast_r50_multigrid_8xb8-8x8x1-"
        "steplr-239e_kinetics400-rgb.py'\n")
    out = json.loads(_run(str(child), '--json', '--no-model-check').stdout)
    assert [s['end_epoch'] for s in out['stages']][-3:] == [329, 343, 358]


def test_bad_lr_steps_give_the_real_error_only(tmp_path):
    proc = _tool(I3D, '--no-model-check', '--cfg-options',
                 'custom_hooks.0.lr_steps=[3]')
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == (
        'error: lr_steps must start at 0 and increase strictly, one entry '
        'per LR stage start in recipe epochs (e.g. [0] + the MultiStepLR '
        'milestones: [0, 40, 80]); got [3]')


def test_dropped_long_cycle_shapes_warn(tmp_path):
    """2 recipe epochs with an LR step at 1: LR stage 0 keeps 2 of the 4
    default long-cycle shapes."""
    short = tmp_path / 'short.py'
    short.write_text(
        f'_base_ = {I3D!r}\n'
        'train_cfg = dict(max_epochs=2)\n'
        'param_scheduler = [dict(type="MultiStepLR", by_epoch=True, begin=0,'
        ' end=2, milestones=[1])]\n')
    proc = _tool(str(short), '--json', '--no-model-check')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)['warnings'] == [
        'The multigrid schedule rounds the long-cycle shapes [(32, 16, 158), '
        '(8, 32, 224)] (per-process batch, T, S) of LR stage 0 (recipe '
        'epochs 0-1) to 0 epochs, so they are not trained. Raise '
        'train_cfg.max_epochs or epoch_factor, or list fewer '
        'long_cycle_factors (about 6 recipe epochs per LR stage train all 4 '
        'default shapes).']
