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
pytestmark = pytest.mark.usefixtures('repo_demo_data')


def _runner(work_dir, hooks, resume=None):
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(custom_hooks=hooks), str(work_dir))
    if resume:
        cfg.resume, cfg.load_from = True, resume
    return build_runner(cfg)


@pytest.fixture(scope='module')
def checkpoints(tmp_path_factory):
    """The epoch-1 checkpoint of a multigrid run, and the same without the
    hook's schedule record (what a run without multigrid writes)."""
    work_dir = tmp_path_factory.mktemp('multigrid')
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


def test_signature_in_the_format_checkpoints_hold():
    """Plain lists and tuples, as earlier releases saved them: their
    checkpoints still resume."""
    from mg_helpers import PIPE, STEP

    from mmext.multigrid import MultigridOptions, MultigridPlan
    from mmext.multigrid.resume import check_resume, resume_signature
    plan = MultigridPlan(PIPE, 4, 4, [STEP], options=MultigridOptions(
        long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]))
    saved = dict(long_cycle=True, short_cycle=True, epoch_factor=1.5,
                 long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                 short_cycle_factors=[0.5, 0.5**0.5],
                 short_cycle_mode='absolute', lr_steps=[0, 2],
                 recipe_epochs=4, max_epochs=6)
    assert resume_signature(plan) == saved
    check_resume(plan, saved)
    with pytest.raises(ValueError, match=r"epoch_factor: checkpoint 2, "
                       r"config 1\.5\)"):
        check_resume(plan, dict(saved, epoch_factor=2))
