"""What a new user meets with the small-data setting, through the tools on
configs: each refusal names a fix that works for the values given, the
shipped configs run without warnings about themselves, a refusal is one
line on the console and the log keeps the full record."""
import glob
import importlib.util
import os.path as osp
import subprocess
import sys
import uuid

import pytest
from helpers import REPO_ROOT, logged_errors

from mmext.multigrid import MultigridPlan
from mmext.multigrid.data import BrokenClipError

SPEC = importlib.util.spec_from_file_location(
    'train_tool', osp.join(REPO_ROOT, 'tools', 'train.py'))
train_tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(train_tool)

MSR = 'configs/multigrid/recognizer3d_r18_adamw_multigrid_msr-action3d.py'
FIGHT = 'configs/multigrid/recognizer3d_r18_multigrid_fight.py'
DEMO = 'configs/demo/recognizer3d_r18_multigrid_demo-video.py'
SMOKE = 'configs/smoke/recognizer3d_r18_multigrid_demo-video-smoke.py'
TINY = osp.join(REPO_ROOT, 'tests', 'multigrid', 'tiny_mg.py')


@pytest.fixture(autouse=True)
def keep_sys_argv(monkeypatch):
    """The train tool sets ``sys.argv`` for the toolbox's parser."""
    monkeypatch.setattr(sys, 'argv', list(sys.argv))


def _run(*args, env=None):
    """A tool run from the project root (the environment the test's)."""
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _schedule(config, *args):
    return _run('tools/analysis/multigrid_schedule.py', config, *args)


def _error(proc) -> str:
    """The one line of a refusal: exit 1, no traceback."""
    assert proc.returncode == 1, proc.stdout[-500:] + proc.stderr[-2000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-2000:]
    return proc.stderr.rstrip().splitlines()[-1]


def _config(tmp_path, text: str) -> str:
    path = tmp_path / f'{uuid.uuid4().hex[:8]}.py'
    path.write_text(text)
    return str(path)


def test_a_too_short_schedule_names_the_next_that_works():
    """The README's 4 epochs on the MSR config (the long cycle alone): 5 is
    named, and 5 is accepted; both cycles accept 4."""
    line = _error(_schedule(MSR, '--no-model-check', '--cfg-options',
                            'train_cfg.max_epochs=4'))
    assert 'with 4 recipe epochs leaves no epoch at the base shape' in line
    assert '; use train_cfg.max_epochs=5 (the shortest' in line
    for options in (['train_cfg.max_epochs=5'],
                    ['train_cfg.max_epochs=4', 'custom_hooks.0.short_cycle='
                     'True']):
        proc = _schedule(MSR, '--no-model-check', '--cfg-options', *options)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_fix_named_skips_longer_schedules_that_fail():
    """Per-stage rounding: on MSR's schedule 7 fails where 5, 6 and 8 pass."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(REPO_ROOT, MSR))
    cfg.train_cfg.max_epochs = 7
    with pytest.raises(ValueError, match=r'use train_cfg\.max_epochs=8 '):
        MultigridPlan.from_config(cfg)
    cfg.train_cfg.max_epochs = 8
    assert MultigridPlan.from_config(cfg).max_epochs == 12


@pytest.mark.usefixtures('demo_data')
def test_a_short_cycle_batch_too_large_names_short_cycle_false():
    """16 of the 64 demo clips: the short cycle's batch of 24 does not fit,
    every long-cycle batch (16 at most) does."""
    subset = ['--dataset', '--no-model-check', '--cfg-options',
              'train_dataloader.dataset.indices=16']
    line = _error(_schedule(DEMO, *subset, 'custom_hooks.0.short_cycle=True',
                            'custom_hooks.0.short_cycle_factors=[0.6,0.7]'))
    assert 'make a batch of 24 > 16 clips per process' in line
    assert line.endswith('; use short_cycle=False or factors closer to 1.')
    assert _schedule(DEMO, *subset).returncode == 0  # the demo's own


def test_a_relative_resize_before_the_crop_is_named(tmp_path):
    pipeline = ("[dict(type='DecordInit'), dict(type='SampleFrames', "
                "clip_len=16, frame_interval=2, num_clips=1), "
                "dict(type='DecordDecode'), dict(type='Resize', scale=0.5), "
                "dict(type='CenterCrop', crop_size=64), "
                "dict(type='FormatShape', input_format='NCTHW'), "
                "dict(type='PackActionInputs')]")
    config = _config(tmp_path, f"_base_ = '{TINY}'\ntrain_dataloader = dict("
                     f'dataset=dict(pipeline={pipeline}))\n')
    line = _error(_schedule(config, '--no-model-check'))
    assert 'CenterCrop(64) crops the raw frame' in line
    assert 'Resize(scale=0.5) is relative' in line
    assert line.endswith('give its scale in pixels, e.g. (-1, 64).')
    fixed = _schedule(config, '--no-model-check', '--cfg-options',
                      'train_dataloader.dataset.pipeline.3.scale=(-1,64)')
    assert fixed.returncode == 0, fixed.stderr[-2000:]


def test_a_final_non_square_resize_is_named():
    line = _error(_schedule(TINY, '--no-model-check', '--cfg-options',
                            'train_dataloader.dataset.pipeline.5.scale='
                            '(64,48)'))
    assert 'ends with Resize(scale=(64, 48), keep_ratio=False)' in line
    assert 'no square crop' in line


@pytest.mark.usefixtures('demo_data')
def test_an_option_at_another_hooks_index_names_both(tmp_path):
    """The docs' ``custom_hooks.0.batch_policy`` where the multigrid hook is
    second: refused before anything is built, by both tools."""
    config = _config(tmp_path, f"_base_ = '{TINY}'\ncustom_hooks = ["
                     "dict(type='EMAHook'), dict(type='mmext.MultigridHook', "
                     "long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)], "
                     "bn_base_size=4)]\n")
    refused = ("custom_hooks.0.batch_policy reaches EMAHook, which takes no "
               "'batch_policy': mmext.MultigridHook is custom_hooks.1.")
    assert _error(_schedule(config, '--no-model-check', '--cfg-options',
                            'custom_hooks.0.batch_policy=constant')) == (
        'error: ' + refused)
    with pytest.raises(ValueError) as error:
        train_tool.main('train', [config, '--work-dir', str(tmp_path / 'w'),
                                  '--cfg-options',
                                  'custom_hooks.0.batch_policy=constant'])
    assert str(error.value) == refused
    proc = _schedule(config, '--no-model-check', '--cfg-options',
                     'custom_hooks.1.batch_policy=constant')
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize('config', [DEMO, SMOKE])
@pytest.mark.usefixtures('demo_data')
def test_the_shipped_demo_gives_no_warning_about_itself(config):
    """The checks the hook runs before training, on the demo's 64 clips."""
    proc = _schedule(config, '--dataset')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'warning' not in proc.stdout + proc.stderr


@pytest.mark.usefixtures('demo_data')
def test_a_refusal_is_one_line_and_the_log_keeps_its_traceback(
        tmp_path, monkeypatch):
    work = tmp_path / 'work'
    argv = [TINY, '--work-dir', str(work), '--cfg-options',
            'custom_hooks.0.epoch_factor=0']
    refused = 'ValueError: epoch_factor must be a number > 0, got 0'
    proc = _run('tools/train.py', *argv)
    assert _error(proc) == refused
    [line] = logged_errors(work)
    assert line.rstrip().endswith(refused)
    [log] = glob.glob(str(work / '*' / '*.log'))
    with open(log) as f:
        assert 'Traceback of the error above:\nTraceback' in f.read()
    monkeypatch.setenv(train_tool.TRACEBACK_VARIABLE, '1')
    with pytest.raises(ValueError, match='epoch_factor must be'):
        train_tool.main('train', argv, one_line_refusals=True)


@pytest.mark.usefixtures('demo_data')
def test_a_hinted_option_is_one_line_too(tmp_path):
    """The registry's hint, not its chained TypeError."""
    with pytest.raises(SystemExit) as error:
        train_tool.main('train', [
            TINY, '--work-dir', str(tmp_path / 'work'), '--cfg-options',
            'custom_hooks.0.batch_polcy=constant'], one_line_refusals=True)
    assert error.value.code.startswith('TypeError: MultigridHook got ')
    assert error.value.code.endswith(": did you mean 'batch_policy'?")


@pytest.mark.usefixtures('demo_data')
def test_a_run_and_its_resume_read_as_their_logs(tmp_path):
    """Warnings on the console as the log's lines; precise BN's cap logged
    with both numbers; the checkpoint loader's name in mmengine's log line;
    a refused resume in one line."""
    work = tmp_path / 'work'
    run = ['tools/train.py', TINY, '--work-dir', str(work), '--cfg-options',
           'train_cfg.max_epochs=2', 'custom_hooks.0.precise_bn_iters=200']
    proc = _run(*run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ' - mmengine - WARNING - Batch 32 is 50% of 64 clips' in (
        proc.stderr)
    package = osp.join(REPO_ROOT, 'mmext')
    assert package not in proc.stderr and 'warn(message)' not in proc.stderr
    assert 'precise BN over 16 batches (precise_bn_iters=200, one' in (
        proc.stdout)
    assert 'one pass 16) at epoch 2 ' in proc.stdout
    resumed = _run(*run, 'custom_hooks.0.epoch_factor=2.0', '--resume')
    assert _error(resumed).startswith('ValueError: ')
    assert 'Loads checkpoint by local backend from path' in resumed.stdout
    assert 'ted_local' not in resumed.stdout


@pytest.mark.usefixtures('demo_data')
def test_a_broken_clip_is_named_in_the_logs_error_line(ann_file, tmp_path):
    """Read in a loader worker: torch re-raises it as 'Caught
    BrokenClipError in DataLoader worker process 0.'."""
    ann, broken = ann_file
    work = tmp_path / 'work'
    with pytest.raises(BrokenClipError):
        train_tool.main('train', [
            TINY, '--work-dir', str(work), '--cfg-options',
            f'train_dataloader.dataset.ann_file={ann}',
            'train_dataloader.num_workers=1',
            'train_dataloader.sampler.shuffle=False'])
    [line] = logged_errors(work)
    assert f'BrokenClipError: Cannot load clip {broken} (index 0): ' in line


def test_missing_data_is_one_message_for_both_tools(tmp_path, monkeypatch):
    missing = str(tmp_path / 'no_data')
    monkeypatch.setenv('MMEXT_DATA_ROOT', missing)
    message = (f'ann_file {missing}/fight/train.txt does not exist: check '
               f'MMEXT_DATA_ROOT={missing}')
    assert _error(_schedule(FIGHT, '--dataset', '--no-model-check')) == (
        f'error: {message}')
    with pytest.raises(FileNotFoundError) as error:
        train_tool.main('train', [FIGHT, '--work-dir', str(tmp_path / 'w')])
    assert str(error.value) == message
