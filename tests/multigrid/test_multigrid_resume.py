"""mmext.multigrid.resume (and the hook's resume guard): resuming across
multigrid on/off or another schedule gives clear errors."""
import os
import os.path as osp
import re

import pytest
import torch
from mg_helpers import ROOT, TINY

import mmext  # noqa: F401
from mmext.cli import build_runner, load_run_config
from mmext.multigrid.resume import CHECKPOINT_KEY

HOOK = dict(type='mmext.MultigridHook',
            long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)], bn_base_size=4,
            precise_bn_iters=2)
pytestmark = pytest.mark.usefixtures('demo_data')


def _runner(work_dir, hooks, resume=None):
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(custom_hooks=hooks), str(work_dir))
    if resume:
        cfg.resume, cfg.load_from = True, resume
    return build_runner(cfg)


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory, demo_data_dir):
    """The epoch-1 checkpoint of a multigrid run, and the same without the
    hook's schedule record (what a run without multigrid writes)."""
    work_dir = tmp_path_factory.mktemp('multigrid')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('MMEXT_DEMO_DATA', demo_data_dir)
        _runner(work_dir, [HOOK, dict(type='ShapeRecorderHook',
                                      stop_after_epoch=1)]).train()
    ckpt = osp.join(work_dir, 'epoch_1.pth')
    state = torch.load(ckpt, weights_only=False)
    assert state['meta'].pop(CHECKPOINT_KEY)['max_epochs'] == 6
    plain = osp.join(work_dir, 'plain.pth')
    torch.save(state, plain)
    return dict(multigrid=ckpt, plain=plain, iters=state['meta']['iter'])


def test_multigrid_checkpoint_into_plain_config(checkpoints, tmp_path):
    ckpt = checkpoints['multigrid']
    with pytest.raises(ValueError) as err:
        _runner(tmp_path, [], resume=ckpt).train()
    msg = str(err.value)
    assert (f'{ckpt} comes from a multigrid run: its epochs (of 6) and param '
            "scheduler states are on the multigrid schedule, not on the "
            "recipe's") in msg
    assert 'mmext.MultigridHook in custom_hooks' in msg
    assert f'load_from={ckpt} (no --resume)' in msg


def test_plain_checkpoint_into_multigrid_config(checkpoints, tmp_path):
    runner = _runner(tmp_path, [HOOK], resume=checkpoints['plain'])
    with pytest.raises(ValueError, match=re.escape(
            'resuming a checkpoint of a run without multigrid: its epoch, '
            'iteration and param scheduler states are on the recipe\'s '
            'schedule, not on the multigrid schedule of this config (6 '
            'epochs). Start the multigrid run from its weights with '
            'load_from=CKPT (no --resume)')):
        runner.train()
    # Resumed, then stopped before the first iteration.
    assert runner.iter == checkpoints['iters'] > 0


def test_multigrid_checkpoint_with_another_schedule(checkpoints, tmp_path):
    with pytest.raises(ValueError, match=re.escape(
            'the checkpoint was trained on another multigrid schedule '
            '(epoch_factor: checkpoint 1.5, config 2.0; multigrid epochs: '
            'checkpoint 6, config 8)')):
        _runner(tmp_path, [dict(HOOK, epoch_factor=2.0)],
                resume=checkpoints['multigrid']).train()


def test_plain_weights_into_multigrid_run_with_load_from(checkpoints,
                                                         tmp_path):
    """Starting from the weights (no resume) is what the errors advise."""
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(
        custom_hooks=[HOOK, dict(type='ShapeRecorderHook',
                                 stop_after_epoch=1)]), str(tmp_path))
    cfg.load_from = checkpoints['plain']
    runner = build_runner(cfg)
    runner.train()
    assert runner.epoch == 1


# What earlier releases saved (plain lists and tuples, no iteration axis).
OLD_SIGNATURE = dict(long_cycle=True, short_cycle=True, epoch_factor=1.5,
                     long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                     short_cycle_factors=[0.5, 0.5**0.5],
                     short_cycle_mode='absolute', lr_steps=[0, 2],
                     recipe_epochs=4, max_epochs=6)


def _plan(samples_per_rank=None, world_size=1):
    from mg_helpers import PIPE, STEP

    from mmext.multigrid import MultigridOptions, MultigridPlan
    return MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank,
                         world_size=world_size, options=MultigridOptions(
                             long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]))


def test_signature_in_the_format_checkpoints_hold():
    """Checkpoints of earlier releases still resume; the signature adds the
    iteration axis."""
    from mmext.multigrid.resume import check_resume, resume_signature
    plan = _plan(64)
    assert resume_signature(plan) == dict(
        OLD_SIGNATURE, world_size=1, batch_size=4, samples_per_rank=64,
        max_iters=plan.max_iters)
    check_resume(plan, OLD_SIGNATURE)
    check_resume(plan, resume_signature(plan))
    with pytest.raises(ValueError, match=r"epoch_factor: checkpoint 2, "
                       r"config 1\.5\)"):
        check_resume(plan, dict(OLD_SIGNATURE, epoch_factor=2))


def test_resume_on_another_world_size_is_refused():
    """64 clips on 1 process, resumed on 2 (32 clips each): every stage
    has other iteration counts, so the schedulers' restored iteration
    bounds (warm-up, cosine) would be another run's."""
    from mmext.multigrid.resume import check_resume, resume_signature
    one, two = _plan(64), _plan(32, world_size=2)
    # 1 x 64 clips: 3 epochs of 3 iterations at batches [32, 16, 16], 3
    # of 6 at [16, 8, 4]; 2 x 32 clips: 1 and 3 iterations per epoch.
    assert one.cum_iters == [0, 3, 6, 9, 15, 21, 27]
    assert two.cum_iters == [0, 1, 2, 3, 6, 9, 12]
    with pytest.raises(ValueError) as err:
        check_resume(two, resume_signature(one), 1, one.cum_iters[1])
    assert str(err.value) == (
        'the checkpoint was trained on another multigrid iteration axis (1 '
        'process(es), 4 clips per process and batch, 64 clips per process '
        'and epoch: 27 iterations; this run: 2 process(es), 4 clips per '
        'process and batch, 32 clips per process and epoch: 12 iterations). '
        "Multigrid's iterations per epoch follow the clips per process, so "
        'the stages, the iteration counter and the resumed iteration-based '
        'param scheduler bounds (warm-up, cosine with '
        'convert_to_iter_based=True) would not match this run. Resume with 1 '
        'process(es), the same train_dataloader.batch_size and dataset '
        '(tools/dist_train.sh CONFIG N --resume), or start from its weights '
        'with load_from=CKPT (no --resume).')
    check_resume(one, resume_signature(one), 1, one.cum_iters[1])


def test_old_checkpoints_are_checked_by_where_they_stand():
    from mmext.multigrid.resume import check_resume
    one, two = _plan(64), _plan(32, world_size=2)
    check_resume(one, OLD_SIGNATURE, 2, one.cum_iters[2])
    check_resume(one, OLD_SIGNATURE, 6, one.max_iters)
    with pytest.raises(ValueError, match=re.escape(
            'another multigrid iteration axis (iteration 6 in epoch 2, '
            'which this run trains in iterations [2, 3); this run: 2 '
            'process(es)')):
        check_resume(two, OLD_SIGNATURE, 2, one.cum_iters[2])


def test_multigrid_checkpoint_into_a_smaller_dataset(checkpoints, tmp_path):
    """The hook refuses before the first iteration (48 clips per process
    instead of 64 change every epoch's iterations, as a world size does)."""
    cfg_dataset = dict(indices=48)
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(
        custom_hooks=[HOOK], train_dataloader=dict(dataset=cfg_dataset)),
        str(tmp_path))
    cfg.resume, cfg.load_from = True, checkpoints['multigrid']
    with pytest.raises(ValueError, match=re.escape(
            '64 clips per process and epoch: 27 iterations; this run: 1 '
            'process(es), 4 clips per process and batch, 48 clips per '
            'process and epoch: 18 iterations)')):
        build_runner(cfg).train()


@pytest.mark.slow
def test_one_process_checkpoint_resumed_on_two(checkpoints, tmp_path):
    """The issue's case, with the real launcher: refused with the fix."""
    import subprocess

    from bench_utils import find_free_port
    env = dict(os.environ, PORT=str(find_free_port()), OMP_NUM_THREADS='1',
               PYTHONPATH=osp.join(ROOT, 'tests', 'multigrid'))
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', TINY, '2', '--work-dir',
         str(tmp_path), '--resume', checkpoints['multigrid']],
        cwd=ROOT, env=env, timeout=600, capture_output=True, text=True)
    assert proc.returncode != 0
    assert ('another multigrid iteration axis (1 process(es), 4 clips per '
            'process and batch, 64 clips per process and epoch: 27 '
            'iterations; this run: 2 process(es), 4 clips per process and '
            'batch, 32 clips per process and epoch: 12 iterations)') in (
                proc.stderr)
