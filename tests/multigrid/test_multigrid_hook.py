"""mmext.multigrid.hook: end-to-end multigrid training on the embedded demo
data (real loader), the resume record and its checks, the data-wait watch,
and the safeguards under mmengine's own Runner."""
import glob
import logging
import math
import os
import os.path as osp
import re
import subprocess
import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
# bench_utils also registers Float32HeadHook (test_amp_multigrid_run).
from bench_utils import RunRecorder, find_free_port
from helpers import CUDA_MARKS, logged_errors
from mg_helpers import (PIPE, ROOT, STATS, STEP, TINY, TINY_HOOK,
                        load_random_stats, read_shapes, recorded,
                        tiny_runner)
from mmcv.transforms import BaseTransform
from mmengine.hooks import Hook
from mmengine.optim import OptimWrapper

from mmext.compat import set_validation_epochs
from mmext.multigrid import (MultigridHook, MultigridOptions, MultigridPlan,
                             build_multigrid_schedule)
from mmext.multigrid.hook import (_check_repeat_collate,
                                  reads_bn_statistics_after_epoch)
from mmext.multigrid.report import DataWaitWatch
from mmext.multigrid.resume import (CHECKPOINT_KEY, check_resume,
                                    resume_signature)
from mmext.multigrid.schedule import iterations_per_epoch

pytestmark = pytest.mark.usefixtures('demo_data')

# tiny_mg.py: base (B, T, S) = (4, 16, 56), 4 epochs, milestone 2, long
# cycle (T/2, S/sqrt2) then base; 64 clips.
LR, BASE_B, CLIPS = 0.05, 4, 64


def _train(work_dir, **options):
    options.setdefault('custom_hooks', recorded())
    tiny_runner(work_dir, **options).train()
    return read_shapes(work_dir)


def _expected(batch_policy='paper'):
    """(epoch, batch, T, S, lr) per iteration from the pure schedule."""
    stages = build_multigrid_schedule(16, 56, [0, 2], 4, gamma=0.1,
                                      long_cycle_factors=[(0.5, 0.5**0.5),
                                                          (1, 1)],
                                      batch_policy=batch_policy)
    rows, it = [], 0
    total = sum(
        s.num_epochs * iterations_per_epoch(
            CLIPS, [BASE_B * x.batch_factor for x in s.short_cycle])
        for s in stages)
    for s in stages:
        sizes = [BASE_B * x.batch_factor for x in s.short_cycle]
        n = iterations_per_epoch(CLIPS, sizes)
        for epoch in range(s.start_epoch, s.end_epoch):
            for i in range(n):
                x = s.short_cycle[i % len(s.short_cycle)]
                rows.append((epoch, sizes[i % 3], x.clip_len, x.crop_size,
                             it, s))
                it += 1
    return stages, rows, total


@pytest.fixture(scope='module')
def full(tmp_path_factory, demo_data_dir):
    """The whole tiny run (checkpoints after every epoch)."""
    work_dir = tmp_path_factory.mktemp('mg_full')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('MMEXT_DEMO_DATA', demo_data_dir)
        records = _train(work_dir)
    return SimpleNamespace(records=records, work_dir=work_dir)


@pytest.fixture(scope='module')
def full_run(full):
    return full.records


@pytest.fixture(scope='module')
def checkpoints(full, tmp_path_factory):
    """The epoch-3 checkpoint of the full run, and the same without the
    hook's schedule record (what a run without multigrid writes)."""
    ckpt = osp.join(full.work_dir, 'epoch_3.pth')
    state = torch.load(ckpt, weights_only=False)
    assert state['meta'].pop(CHECKPOINT_KEY)['max_epochs'] == 6
    plain = str(tmp_path_factory.mktemp('plain') / 'plain.pth')
    torch.save(state, plain)
    return dict(multigrid=ckpt, plain=plain, iters=state['meta']['iter'])


@pytest.fixture(scope='module', params=['constant', 'sqrt'])
def policy_run(request, tmp_path_factory, demo_data_dir):
    """The whole tiny run under another batch_policy: its policy, records
    and work dir."""
    work_dir = tmp_path_factory.mktemp(f'mg_{request.param}')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('MMEXT_DEMO_DATA', demo_data_dir)
        records = _train(work_dir, custom_hooks=recorded(
            batch_policy=request.param))
    return SimpleNamespace(policy=request.param, records=records,
                           work_dir=work_dir)


def test_policy_batches_steps_and_lr_per_iteration(policy_run):
    """Under 'constant' every iteration has the recipe's 4 clips (16 steps
    per epoch, the recipe's) at the paper's shapes and epochs, the LR
    unscaled; under 'sqrt' the coarse shape's factor 4 gives batch 8 and
    LR x 2 (the linear rule on the batch trained), its short cycle 12, 8, 8
    (round(sqrt 8) = 3, round(sqrt 3.92) = 2)."""
    stages, rows, total = _expected(policy_run.policy)
    paper, _, _ = _expected()
    assert [(s.start_epoch, s.end_epoch) for s in stages] == [
        (s.start_epoch, s.end_epoch) for s in paper]
    coarse = {'constant': [4, 4, 4], 'sqrt': [12, 8, 8]}[policy_run.policy]
    assert [r[1] for r in rows[:3]] == coarse
    records = policy_run.records
    assert [(r['epoch'], r['batch'], r['shapes']) for r in records] == [
        (e, b, [[1, 3, t, s, s]]) for e, b, t, s, _, _ in rows]
    if policy_run.policy == 'constant':
        assert len(records) == 6 * 16  # 6 epochs x 64 / 4
    assert [r['lr'] for r in records] == pytest.approx(
        _expected_lrs(policy_run.policy), rel=1e-6)
    # The coarse stage's LR over the recipe's at the same iteration.
    factor = {'constant': 1, 'sqrt': 2}[policy_run.policy]
    assert {round(r['lr'] / lr, 6) for r, lr in zip(records, _expected_lrs(
        policy_run.policy)) if r['epoch'] == 0} == {1.0}
    assert rows[0][5].shape.batch_factor == factor


def test_policy_run_resumes_exactly(policy_run, tmp_path):
    """Interrupted after epoch 3 (a checkpoint epoch of the tiny recipe)
    and resumed: the same iterations, shapes and LRs as the uninterrupted
    run."""
    hooks = dict(batch_policy=policy_run.policy)
    first = _train(tmp_path, custom_hooks=recorded(stop_after_epoch=3,
                                                   **hooks))
    tiny_runner(tmp_path, custom_hooks=recorded(**hooks), resume=True,
                load_from=osp.join(tmp_path, 'epoch_3.pth'),
                experiment_name='resumed').train()
    assert first + read_shapes(tmp_path) == policy_run.records


def test_observed_shapes_and_bookkeeping(full_run):
    stages, rows, total = _expected()
    assert stages[-1].end_epoch == 6
    observed = [(r['epoch'], r['batch'], r['shapes']) for r in full_run]
    expected = [(e, b, [[1, 3, t, s, s]]) for e, b, t, s, _, _ in rows]
    assert observed == expected
    # The 3 short-cycle sizes really reach the loader in consecutive iters.
    assert {tuple(r['shapes'][0][-2:]) for r in full_run} >= {(28, 28),
                                                              (40, 40),
                                                              (56, 56)}
    assert all(r['max_iters'] == total for r in full_run)
    assert len(full_run) == total


def _expected_lrs(batch_policy='paper'):
    """LR per iteration: the recipe LR on the multigrid axis x the
    long-cycle batch factor (linear rule)."""
    stages, rows, total = _expected(batch_policy)
    # Warm-up (recipe epochs [0, 1) of LR stage [0, 2)) maps to the first
    # half of multigrid LR stage 0, in iterations of the real epoch lengths.
    stage0_end = [s.end_epoch for s in stages if s.lr_stage == 0][-1]
    warm_end_epoch = stage0_end / 2
    cum = [0]
    for s in stages:
        n = iterations_per_epoch(
            CLIPS, [BASE_B * x.batch_factor for x in s.short_cycle])
        cum += [cum[-1] + n * (k + 1) for k in range(s.num_epochs)]
    k = int(warm_end_epoch)
    warm_iters = round(cum[k] + (warm_end_epoch - k) * (cum[k + 1] - cum[k]))
    # mmengine's LinearLR reaches end_factor at its last step, end - 1.
    warm_last = warm_iters - 1
    return [LR * (0.1 + 0.9 * min(it, warm_last) / warm_last)
            * 0.1**stage.lr_stage * stage.shape.batch_factor
            for _, _, _, _, it, stage in rows]


def test_lr_per_iteration(full_run):
    """LR = recipe LR on the multigrid axis x long-cycle batch factor."""
    assert [r['lr'] for r in full_run] == pytest.approx(_expected_lrs(),
                                                        rel=1e-6)


def test_sqrt_lr_rule_scales_by_the_root_of_the_batch_factor(full_run,
                                                             tmp_path):
    """Epoch 0 trains the coarse shape, batch factor 4: the optimizer sees
    the scheduled LR x 2 under lr_rule='sqrt', x 4 under the default
    (whose values test_lr_per_iteration checks)."""
    sqrt = _train(tmp_path, custom_hooks=recorded(stop_after_epoch=1,
                                                  lr_rule='sqrt'))
    linear = [r for r in full_run if r['epoch'] == 0]
    assert len(sqrt) == len(linear) == 3
    for a, b in zip(sqrt, linear):
        assert a['lr'] == pytest.approx(b['lr'] / 4 * 2, rel=1e-6)
    [log] = glob.glob(osp.join(tmp_path, '*', '*.log'))
    with open(log) as f:
        assert "(lr_rule='sqrt')" in f.read()


def _recipe_model():
    from mmaction.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    init_default_scope('mmaction')
    return MODELS.build(Config.fromfile(TINY).model)


def test_checkpoint_is_plain_recipe_model(full):
    ckpt = torch.load(osp.join(full.work_dir, 'epoch_3.pth'),
                      map_location='cpu', weights_only=False)
    _recipe_model().load_state_dict(ckpt['state_dict'], strict=True)
    assert not any('split_bn' in k for k in ckpt['state_dict'])


def test_test_with_the_multigrid_config(full, tmp_path):
    """tools/test.py with the training config: the hook stays out of it."""
    results = []
    for hooks in ([TINY_HOOK], []):
        runner = tiny_runner(tmp_path / f'test{len(hooks)}',
                             custom_hooks=hooks, load_from=osp.join(
                                 full.work_dir, 'epoch_5.pth'))
        results.append(runner.test()['acc/top1'])
    # The same as the recipe without the hook tests the same weights.
    assert results[0] == results[1]


def test_resume_equivalence(full_run, tmp_path):
    first = _train(tmp_path, custom_hooks=recorded(stop_after_epoch=5))
    runner = tiny_runner(tmp_path, custom_hooks=recorded(), resume=True,
                         load_from=osp.join(tmp_path, 'epoch_5.pth'),
                         experiment_name='resumed')
    runner.train()
    assert first + read_shapes(tmp_path) == full_run


def test_iteration_loop_rejected(tmp_path):
    with pytest.raises(ValueError, match='needs an epoch-based loop'):
        _train(tmp_path, train_cfg=dict(
            _delete_=True, type='IterBasedTrainLoop', max_iters=4))


def test_unsplittable_batch_rejected(tmp_path):
    with pytest.raises(ValueError, match='bn_base_size=4 cannot split the '
                       'batch of 6 clips'):
        _train(tmp_path, train_dataloader=dict(batch_size=6))


def test_dist_train_two_processes(tmp_path):
    config = tmp_path / 'recorded.py'
    config.write_text(
        f'_base_ = {TINY!r}\n'
        "custom_imports = dict(imports=['mg_helpers'], "
        'allow_failed_imports=False)\n'
        f'custom_hooks = {recorded()!r}\n')
    env = dict(os.environ, PORT=str(find_free_port()), OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(
                   [osp.join(ROOT, 'tests'),
                    osp.join(ROOT, 'tests', 'multigrid')]))
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', str(config), '2', '--work-dir',
         str(tmp_path), '--cfg-options', 'train_cfg.max_epochs=2',
         'param_scheduler.1.end=2', 'param_scheduler.1.milestones=[1]'],
        cwd=ROOT, env=env, timeout=600, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    key = [[(x['epoch'], x['batch'], x['shapes'], x['lr'])
            for x in read_shapes(tmp_path, r)] for r in range(2)]
    assert key[0] == key[1] and len(key[0]) > 0
    assert len({tuple(x[2][0]) for x in key[0]}) >= 3


def test_dataset_smaller_than_a_batch_rejected(tmp_path):
    with pytest.raises(ValueError, match='12 clips per process < batch 32'):
        _train(tmp_path, train_dataloader=dict(dataset=dict(indices=12)))


def test_dataset_wrapper_rejected(tmp_path):
    from mmengine.config import Config
    dataset = Config.fromfile(TINY).train_dataloader.dataset
    with pytest.raises(ValueError, match='got a RepeatDataset'):
        _train(tmp_path, train_dataloader=dict(dataset=dict(
            _delete_=True, type='RepeatDataset', times=2, dataset=dataset)))


def test_two_multigrid_hooks_are_refused(tmp_path):
    from mmengine.config import Config
    hooks = Config.fromfile(TINY).custom_hooks
    mg = next(h for h in hooks if h['type'] == 'mmext.MultigridHook')
    with pytest.raises(ValueError, match='2 MultigridHooks in custom_hooks'):
        _train(tmp_path, custom_hooks=list(hooks) + [dict(mg, epoch_factor=2)])


@pytest.mark.parametrize('hooks,fragment', [
    ([dict(TINY_HOOK, lr_rule='cube')], "or 'sqrt', got 'cube'"),  # __init__
    ([TINY_HOOK, dict(TINY_HOOK, epoch_factor=2)], '2 MultigridHooks'),
])
def test_refusals_reach_the_log_with_mmengines_runner(tmp_path, hooks,
                                                      fragment):
    """The hook logs what stops a run from its own lifecycle, without
    mmext.Runner."""
    with pytest.raises(ValueError, match=re.escape(fragment)):
        tiny_runner(tmp_path, runner_type='Runner',
                    custom_hooks=hooks).train()
    [line] = logged_errors(tmp_path)
    assert 'ValueError: ' in line and fragment in line


class _Stop(Exception):
    """Raised by :class:`_StopBeforeTraining`."""


class _StopBeforeTraining(Hook):
    """Ends ``runner.train()`` after ``before_run`` and the resume, before
    the first iteration."""

    priority = 'LOWEST'

    def before_train(self, runner):
        raise _Stop


RUNNERS = ['mmext.Runner', 'Runner']


@pytest.mark.parametrize('runner_type', RUNNERS)
def test_dropped_recipe_values_warn_with_any_runner(runner_type, tmp_path):
    """The warm-up longer than the recipe's 4 epochs warns before training,
    on stderr and in the run's log file, also without mmext.Runner."""
    runner = tiny_runner(tmp_path, runner_type,
                         **{'param_scheduler.0.end': 5})
    runner.register_hook(_StopBeforeTraining())
    with pytest.warns(UserWarning, match='LinearLR.* recipe epoch 5'):
        with pytest.raises(_Stop):
            runner.train()
    [log] = glob.glob(osp.join(tmp_path, '*', '*.log'))
    with open(log) as f:
        assert 'LinearLR ends at recipe epoch 5' in f.read()


def test_a_validation_clip_that_cannot_be_read_is_named(ann_file,
                                                       tmp_path):
    from mmext.multigrid.data import BrokenClipError
    ann, broken = ann_file
    runner = tiny_runner(tmp_path, val_dataloader=dict(dataset=dict(
        ann_file=ann, data_prefix=dict(video=''))))
    runner.register_hook(_StopBeforeTraining())
    with pytest.raises(_Stop):
        runner.train()
    with pytest.raises(BrokenClipError, match=re.escape(
            f'Cannot load clip {broken} (index 0): ')) as error:
        next(iter(runner.val_loop.dataloader))
    assert str(error.value).endswith('; fix or remove the file.')


def test_precise_bn_without_a_bn_layer_that_trains_warns(tmp_path):
    """norm_eval=True: no BN layer trains, precise BN has nothing to do."""
    runner = tiny_runner(tmp_path, model=dict(backbone=dict(norm_eval=True)))
    runner.register_hook(_StopBeforeTraining())
    with pytest.warns(UserWarning, match='precise_bn_iters=2 has no effect'):
        with pytest.raises(_Stop):
            runner.train()


@pytest.mark.parametrize('runner_type', RUNNERS)
def test_auto_scale_lr_with_accumulation(runner_type, tmp_path):
    """mmengine's own runner would scale by loader batch x world size only:
    refused before training; mmext.Runner counts the accumulation."""
    runner = tiny_runner(tmp_path, runner_type,
                         auto_scale_lr=dict(enable=True, base_batch_size=4),
                         optim_wrapper=dict(accumulative_counts=2))
    runner.register_hook(_StopBeforeTraining())
    if runner_type == 'Runner':
        with pytest.raises(ValueError, match="runner_type='mmext.Runner'"):
            runner.train()
    else:
        with pytest.raises(_Stop):
            runner.train()
        # Effective batch 4 x 2 over base 4: LR x 2.
        assert runner.optim_wrapper.optimizer.param_groups[0][
            'initial_lr'] == pytest.approx(2 * LR)


@pytest.mark.parametrize('runner_type', RUNNERS)
def test_plain_checkpoint_into_multigrid_config(checkpoints, tmp_path,
                                                runner_type, monkeypatch):
    # mmengine's runner loads with torch's weights_only (DESIGN.md).
    monkeypatch.setenv('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')
    runner = tiny_runner(tmp_path, runner_type, resume=True,
                         load_from=checkpoints['plain'])
    with pytest.raises(ValueError, match='Not a multigrid checkpoint: use '
                       'load_from=CKPT'):
        runner.train()
    # Resumed, then stopped before the first iteration.
    assert runner.iter == checkpoints['iters'] > 0


def test_multigrid_checkpoint_into_plain_config(checkpoints, tmp_path):
    """The one guard that needs mmext.Runner."""
    ckpt = checkpoints['multigrid']
    with pytest.raises(ValueError) as err:
        tiny_runner(tmp_path, resume=True, load_from=ckpt,
                    custom_hooks=[]).train()
    msg = str(err.value)
    assert msg.startswith(f'{ckpt} is a multigrid checkpoint: resume it ')
    assert 'with its MultigridHook' in msg
    assert f'load_from={ckpt} (no --resume)' in msg


def test_multigrid_checkpoint_with_another_schedule(checkpoints, tmp_path):
    with pytest.raises(ValueError, match=re.escape(
            'epoch_factor 1.5 (config 2.0), multigrid epochs 6 (')):
        tiny_runner(tmp_path, resume=True, load_from=checkpoints['multigrid'],
                    custom_hooks=[dict(TINY_HOOK, epoch_factor=2.0)]).train()


def test_plain_weights_into_multigrid_run_with_load_from(checkpoints,
                                                         tmp_path):
    """Starting from the weights (no resume) is what the errors advise."""
    runner = tiny_runner(tmp_path, load_from=checkpoints['plain'],
                         custom_hooks=recorded(stop_after_epoch=1))
    runner.train()
    assert runner.epoch == 1


def test_multigrid_checkpoint_into_a_smaller_dataset(checkpoints, tmp_path):
    """Refused before the first iteration (48 clips per process instead of
    64 change every epoch's iterations, as a world size does)."""
    with pytest.raises(ValueError, match=re.escape(
            'samples_per_rank 64 (config 48), max_iters 27 (config 18)')):
        tiny_runner(tmp_path, resume=True, load_from=checkpoints['multigrid'],
                    train_dataloader=dict(dataset=dict(indices=48))).train()


@pytest.mark.slow
def test_one_process_checkpoint_resumed_on_two(checkpoints, tmp_path):
    """With the real launcher: refused with the fix."""
    env = dict(os.environ, PORT=str(find_free_port()), OMP_NUM_THREADS='1')
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', TINY, '2', '--work-dir',
         str(tmp_path), '--resume', checkpoints['multigrid']],
        cwd=ROOT, env=env, timeout=600, capture_output=True, text=True)
    assert proc.returncode != 0
    assert 'world_size 1 (config 2), samples_per_rank 64 (config 32)' in (
        proc.stderr)


# What earlier releases saved (plain lists and tuples, no iteration axis).
OLD_SIGNATURE = dict(long_cycle=True, short_cycle=True, epoch_factor=1.5,
                     long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                     short_cycle_factors=[0.5, 0.5**0.5],
                     short_cycle_mode='absolute', lr_steps=[0, 2],
                     recipe_epochs=4, max_epochs=6)


def _plan(samples_per_rank=None, world_size=1, **options):
    options = dict(dict(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)]),
                   **options)
    return MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank,
                         world_size=world_size,
                         options=MultigridOptions(**options))


def test_signature_in_the_format_checkpoints_hold():
    """Checkpoints of earlier releases still resume; the signature adds the
    iteration axis, lr_rule and bn_base_size."""
    plan = _plan(64)
    assert resume_signature(plan) == dict(
        OLD_SIGNATURE, world_size=1, batch_size=4, samples_per_rank=64,
        max_iters=plan.max_iters, batch_policy='paper', lr_rule='linear',
        bn_base_size=8)
    check_resume(plan, OLD_SIGNATURE)
    check_resume(plan, resume_signature(plan))
    with pytest.raises(ValueError, match=r'epoch_factor 2 \(config 1\.5\)'):
        check_resume(plan, dict(OLD_SIGNATURE, epoch_factor=2))


@pytest.mark.parametrize('options, differ', [
    (dict(lr_rule='sqrt'), "lr_rule 'linear' (config 'sqrt')"),
    (dict(bn_base_size=4), 'bn_base_size 8 (config 4)'),
    (dict(bn_base_size=0), 'bn_base_size 8 (config None)'),
])
def test_resume_with_another_lr_rule_or_bn_base_size_is_refused(options,
                                                                differ):
    """Both change the training (the LR, the BN statistics); a checkpoint
    from before they were recorded is not checked for them."""
    plan = _plan(64, **options)
    with pytest.raises(ValueError, match=re.escape(
            f'another multigrid schedule: {differ}. Resume')):
        check_resume(plan, resume_signature(_plan(64)))
    check_resume(plan, OLD_SIGNATURE)


@pytest.mark.parametrize('options, unused', [
    (dict(short_cycle=False),
     dict(short_cycle_factors=[0.6, 0.5**0.5], short_cycle_mode='relative')),
    (dict(long_cycle=False), dict(long_cycle_factors=[(0.5, 1), (1, 1)],
                                  lr_rule='sqrt')),
    (dict(batch_policy='constant'), dict(lr_rule='sqrt')),
])
def test_options_that_do_nothing_are_not_in_the_signature(options, unused):
    """Editing them never blocks a resume: the checkpoints of the old
    format, which recorded them, resume without them."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # set, they warn
        edited = _plan(64, **options, **unused)
        plan = _plan(64, **options)
    assert set(resume_signature(plan)).isdisjoint(unused)
    assert resume_signature(edited) == resume_signature(plan)
    old = {k: v for k, v in resume_signature(plan).items()
           if k not in ('lr_rule', 'bn_base_size')}
    check_resume(plan, dict(old, **unused))


def test_resume_with_another_batch_policy_is_refused():
    """The policy sets every coarse stage's batch and so the iteration axis;
    a checkpoint from before the option trained the paper's batches."""
    constant = _plan(64, batch_policy='constant')
    with pytest.raises(ValueError, match="batch_policy 'paper' "
                       r"\(config 'constant'\)"):
        check_resume(constant, OLD_SIGNATURE)
    check_resume(constant, resume_signature(constant))


def test_resume_on_another_world_size_is_refused():
    """64 clips on 1 process, resumed on 2 (32 clips each): every stage
    has other iteration counts, so the schedulers' restored iteration
    bounds (warm-up, cosine) would be another run's."""
    one, two = _plan(64), _plan(32, world_size=2)
    # 1 x 64 clips: 3 epochs of 3 iterations at batches [32, 16, 16], 3
    # of 6 at [16, 8, 4]; 2 x 32 clips: 1 and 3 iterations per epoch.
    assert one.cum_iters == [0, 3, 6, 9, 15, 21, 27]
    assert two.cum_iters == [0, 1, 2, 3, 6, 9, 12]
    with pytest.raises(ValueError) as err:
        check_resume(two, resume_signature(one), 1, one.cum_iters[1])
    assert str(err.value).split(': ')[1].split('. ')[0].split(', ') == [
        'world_size 1 (config 2)', 'samples_per_rank 64 (config 32)',
        'max_iters 27 (config 12)']
    check_resume(one, resume_signature(one), 1, one.cum_iters[1])


def test_a_checkpoint_saved_under_the_old_signature_resumes(
        full, full_run, tmp_path):
    """The run's epoch-5 checkpoint with the schedule record of earlier
    releases (no lr_rule, no bn_base_size) resumes and trains what the
    uninterrupted run trained."""
    state = torch.load(osp.join(full.work_dir, 'epoch_5.pth'),
                       weights_only=False)
    record = state['meta'][CHECKPOINT_KEY]
    assert (record.pop('lr_rule'), record.pop('bn_base_size')) == ('linear',
                                                                    4)
    old = str(tmp_path / 'old.pth')
    torch.save(state, old)
    tiny_runner(tmp_path, custom_hooks=recorded(), resume=True,
                load_from=old).train()
    assert read_shapes(tmp_path) == [r for r in full_run if r['epoch'] == 5]


def test_old_checkpoints_are_checked_by_where_they_stand():
    one, two = _plan(64), _plan(32, world_size=2)
    check_resume(one, OLD_SIGNATURE, 2, one.cum_iters[2])
    check_resume(one, OLD_SIGNATURE, 6, one.max_iters)
    with pytest.raises(ValueError, match=re.escape(
            'iteration 6 is outside epoch 2 [2, 3)')):
        check_resume(two, OLD_SIGNATURE, 2, one.cum_iters[2])


@pytest.mark.slow
def test_training_with_frozen_stages_keeps_loaded_statistics(tmp_path):
    """End to end: a run with precise BN and one without, both from a
    checkpoint with non-trivial statistics and ``frozen_stages=1``."""
    model = _recipe_model()
    with torch.no_grad():
        load_random_stats(model, seed=2)
    ckpt = str(tmp_path / 'pretrained.pth')
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    finals = {}
    for iters in (2, 0):
        work_dir = tmp_path / f'precise{iters}'
        tiny_runner(work_dir, custom_hooks=[dict(
            TINY_HOOK, precise_bn_iters=iters)], model=dict(backbone=dict(
                frozen_stages=1)), load_from=ckpt).train()
        finals[iters] = torch.load(work_dir / 'epoch_6.pth',
                                   map_location='cpu',
                                   weights_only=False)['state_dict']
    loaded = model.state_dict()
    frozen = [k for k in loaded if k.startswith(('backbone.conv1.bn',
                                                 'backbone.layer1.'))
              and k.rsplit('.', 1)[-1] in STATS]
    assert len(frozen) == 3 * 5  # conv1.bn + 2 blocks x 2 BN
    for key in frozen:
        assert torch.equal(finals[2][key], loaded[key]), key
        assert torch.equal(finals[0][key], loaded[key]), key
    trained = 'backbone.layer4.1.conv2.bn.running_mean'
    assert not torch.equal(finals[2][trained], finals[0][trained])
    assert finals[2][trained.replace('running_mean',
                                     'num_batches_tracked')].item() == 2


def test_hook_lr_scaling_keeps_tensor_lrs_on_their_device():
    """A tensor LR (e.g. capturable optimizers) stays on its device."""
    param = nn.Parameter(torch.zeros(2, device='meta'))
    lr = torch.tensor(0.1, device='meta')
    optimizer = torch.optim.SGD([param], lr=0.1)
    optimizer.param_groups[0]['lr'] = lr  # SGD's own check calls .item()
    runner = SimpleNamespace(epoch=0, optim_wrapper=OptimWrapper(optimizer))
    hook = MultigridHook(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)])
    hook.plan = MultigridPlan(
        PIPE, 4, 4, [dict(type='MultiStepLR', milestones=[2])],
        options=hook.options)
    assert hook.plan.stage_at(0).shape.batch_factor == 4
    hook.before_train_iter(runner, 0)
    scaled = optimizer.param_groups[0]['lr']
    assert torch.is_tensor(scaled) and scaled.device.type == 'meta'
    hook.after_train_iter(runner, 0)
    assert optimizer.param_groups[0]['lr'] is lr


def test_hook_logs_skipped_clips_per_epoch(ann_file, tmp_path):
    """Unshuffled, the broken clip (index 0) is in every epoch once."""
    ann, broken = ann_file
    runner = tiny_runner(
        tmp_path, custom_hooks=[dict(TINY_HOOK, precise_bn_iters=0,
                                     skip_broken_clips=True)],
        train_cfg=dict(max_epochs=2, val_interval=10), param_scheduler=[],
        train_dataloader=dict(
            sampler=dict(type='DefaultSampler', shuffle=False),
            dataset=dict(ann_file=ann, data_prefix=dict(video=''))))
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    runner.logger.addHandler(handler)
    try:
        with pytest.warns(UserWarning, match=str(broken)):
            runner.train()
    finally:
        runner.logger.removeHandler(handler)
    messages = [r for r in records if 'broken clips' in r.getMessage()]
    assert runner.epoch == 3
    assert [r.getMessage().split(' skipped ') for r in messages] == [
        [f'Multigrid: epoch {epoch}', '1 broken clips (skip_broken_clips=True)']
        for epoch in range(3)]
    assert {r.levelno for r in messages} == {logging.WARNING}


class _FakeClock:
    """Stands in for ``time`` in mmengine's IterTimerHook and in the hook:
    only loading advances it."""

    now = 0.0

    @classmethod
    def time(cls):
        return cls.now

    perf_counter = time


class SlowLoadingForDataWaitTest(BaseTransform):
    """Loading a clip takes 0.1 s on the fake clock; compute takes none."""

    def transform(self, results):
        _FakeClock.now += 0.1
        return results


@pytest.mark.slow
def test_data_bound_run_warns_once(tmp_path, monkeypatch):
    from mmaction.registry import TRANSFORMS
    from mmengine.hooks import iter_timer_hook

    import mmext.multigrid.data as data_module
    import mmext.multigrid.hook as hook_module
    TRANSFORMS.register_module(module=SlowLoadingForDataWaitTest, force=True)
    logged = []
    monkeypatch.setattr(iter_timer_hook, 'time', _FakeClock)
    monkeypatch.setattr(hook_module, 'time', _FakeClock)
    monkeypatch.setattr(data_module, 'time', _FakeClock)
    monkeypatch.setattr(
        hook_module, 'print_log',
        lambda msg, logger=None, level=logging.INFO: logged.append(msg))
    from mmengine.config import Config
    pipeline = Config.fromfile(TINY).train_dataloader.dataset.pipeline
    pipeline.insert(-1, dict(type='SlowLoadingForDataWaitTest'))
    runner = tiny_runner(
        tmp_path, default_hooks=dict(checkpoint=dict(interval=100,
                                                     save_last=False)),
        train_cfg=dict(max_epochs=2, val_begin=100),
        train_dataloader=dict(dataset=dict(pipeline=pipeline)),
        **{'param_scheduler.1.end': 2, 'param_scheduler.1.milestones': [1]},
        custom_hooks=[dict(TINY_HOOK, data_wait_threshold=0.3,
                           data_wait_iters=2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        runner.train()
    plan = next(h for h in runner.hooks
                if isinstance(h, MultigridHook)).plan
    bound = [str(w.message) for w in caught if 'data-bound' in str(
        w.message)]
    assert len(bound) == 1
    # All time on the fake clock is loading.
    assert 'data-bound at epoch 0 (' in bound[0]
    assert 'data wait 100% > data_wait_threshold' in bound[0]
    assert 'data_wait_threshold 30%' in bound[0]
    # The loader's cost per clip names the transform that costs most.
    assert 'SlowLoadingForDataWaitTest costs 100.0 ms per clip' in bound[0]
    # One stage-change summary per loader rebuild (every stage here has at
    # least 1 + 2 iterations), naming the epoch the new shapes start.
    rebuilds = [s.start_epoch for i, s in enumerate(plan.stages)
                if i == 0 or s.short_cycle != plan.stages[i - 1].short_cycle]
    summaries = [m for m in logged if 'stage change at' in m]
    assert [int(m.split('at epoch ')[1].split(' ')[0])
            for m in summaries] == rebuilds
    assert all('loader rebuild 0.00 s' in m and 'data wait 100%' in m
               for m in summaries)
    assert all(m.endswith('(SlowLoadingForDataWaitTest 100.0), compute '
                          '0.0 ms') for m in summaries)
    assert all('per clip: loader 100.0 ms in a worker' in m
               for m in summaries)
    # Neither validation nor checkpoints: precise BN only after the last
    # epoch.
    precise = [m for m in logged if 'precise BN over 2 batches' in m]
    assert len(rebuilds) == 2 and len(precise) == 1
    assert f'at epoch {plan.max_epochs - 1} ' in precise[0]


def _feed(watch, iters):
    out = []
    for data, total in iters:
        out += watch.record(data, total)
    return out


def test_watch_summary_and_single_warning():
    watch = DataWaitWatch(threshold=0.2, iters=3, skip=1)
    # Stage 1 compute-bound: 0.5 s rebuild + 2 s first batch; then 1 s
    # iterations with 0.1 s wait -> 10 % share, no warning.
    watch.start_stage('epoch 0', rebuild_seconds=0.5)
    out = _feed(watch, [(2.0, 2.3), (0.1, 1.0), (0.1, 1.0)])
    assert out == []
    out = _feed(watch, [(0.1, 1.0)])
    assert len(out) == 1 and out[0][0] == logging.INFO
    line = out[0][1]
    assert line.startswith('Multigrid: stage change at epoch 0: 2.50 s (')
    assert '(loader rebuild 0.50 s, first 1 batch(es) 2.00 s) = ' in line
    assert '= 2.5 iterations of 1.000 s; data wait 10% ' in line
    assert line.endswith('10% of the next 3 iterations')
    # Iterations after the window are not measured.
    assert _feed(watch, [(5.0, 5.1)] * 4) == []
    # Stage 2 data-bound: 1 s wait per 2 s iteration -> 50 %.
    watch.start_stage('epoch 4')
    out = _feed(watch, [(0.0, 1.0)] + [(1.0, 2.0)] * 3)
    assert [level for level, _ in out] == [logging.INFO, logging.WARNING]
    assert 'data wait 50% of the next 3' in out[0][1]
    assert 'data-bound at epoch 4: data wait 50%' in out[1][1]
    for fix in ('data_wait_threshold 20%', 'num_workers'):
        assert fix in out[1][1]
    # Stage 3 data-bound again: figures, but no second warning.
    watch.start_stage('epoch 8')
    out = _feed(watch, [(0.0, 1.0)] + [(3.0, 4.0)] * 3)
    assert [level for level, _ in out] == [logging.INFO]
    assert 'data wait 75%' in out[0][1]
    # Timer noise can make the wait exceed the total by a hair.
    watch.start_stage('epoch 9')
    assert 'data wait 100%' in _feed(watch, [(0.0, 1.0)] + [
        (4.1, 4.0)] * 3)[0][1]


def test_watch_gives_the_loader_and_compute_costs_per_clip():
    """A stage of 40 clips per iteration: 1 s of each 2 s iteration waits
    for data, so compute is 1 s / 40 = 25 ms per clip; the workers' costs
    per transform come from the stage's dataset (40 x 30.5 ms = 1.22 s
    per batch in a worker, more than the wait: the pipeline is the fix)."""
    watch = DataWaitWatch(threshold=0.2, iters=3, skip=1)
    watch.start_stage('epoch 0', length=10, clips_per_iter=40)
    costs = {'DecordInit': 4.0, 'DecordDecode': 25.0, 'Resize': 1.5}
    out = []
    for data, total in [(3.0, 3.5)] + [(1.0, 2.0)] * 3:
        out += watch.record(data, total, lambda: costs)
    assert out[0][1].endswith('(DecordDecode 25.0), compute 25.0 ms')
    assert 'per clip: loader 30.5 ms in a worker' in out[0][1]
    assert 'DecordDecode costs 25.0 ms per clip; add num_workers' in (
        out[1][1])
    assert out[1][1].endswith('decode once (mmext.CachedVideoDataset).')
    # No clip timed (a RepeatAugDataset's views): no figures per clip.
    watch.start_stage('epoch 1', length=10, clips_per_iter=4)
    out = _feed(watch, [(0.0, 1.0)] * 4)
    assert out[0][1].endswith('of the next 3 iterations')
    # A cheap pipeline (4 x 30.5 ms = 0.122 s per batch) that cannot
    # explain a 1 s wait: the fix is not a faster pipeline.
    watch = DataWaitWatch(threshold=0.2, iters=3, skip=1)
    watch.start_stage('epoch 0', length=10, clips_per_iter=4)
    out = []
    for data, total in [(3.0, 3.5)] + [(1.0, 2.0)] * 3:
        out += watch.record(data, total, lambda: costs)
    assert 'the pipeline takes 0.122 s per batch: give' in out[1][1]
    # A costliest transform that is no video decoder (frames, the frame
    # cache filling): more workers, not the frame cache.
    for name in ('RawFrameDecode', 'CachedDecordDecode'):
        watch = DataWaitWatch(threshold=0.2, iters=3, skip=1)
        watch.start_stage('epoch 0', length=10, clips_per_iter=40)
        out = []
        for data, total in [(3.0, 3.5)] + [(1.0, 2.0)] * 3:
            out += watch.record(data, total, lambda: {name: 30.0})
        assert out[1][1].endswith(f'{name} costs 30.0 ms per clip; add '
                                  f'num_workers.')


def test_watch_disabled_and_short_stage():
    watch = DataWaitWatch(threshold=None, iters=2, skip=1)
    watch.start_stage('epoch 0')
    out = _feed(watch, [(0.0, 1.0), (9.0, 10.0), (9.0, 10.0)])
    assert [level for level, _ in out] == [logging.INFO]
    # Without its length, a stage shorter than skip + iters gives nothing.
    watch = DataWaitWatch(threshold=0.2, iters=5, skip=1)
    watch.start_stage('epoch 0')
    assert _feed(watch, [(9.0, 10.0)] * 5) == []


def test_watch_measures_a_short_stage_to_its_end():
    """A 4-iteration stage (MSR's coarse stages have 3-6) is measured over
    its last 3; one of 1 iteration over that one; both warn."""
    watch = DataWaitWatch(threshold=0.2, iters=10, skip=1)
    watch.start_stage('epoch 0', 0.5, length=4)
    out = _feed(watch, [(2.0, 3.0)] + [(0.6, 1.0)] * 3)
    assert [level for level, _ in out] == [logging.INFO, logging.WARNING]
    assert 'data wait 60% of the next 3 iterations' in out[0][1]
    assert 'first 1 batch(es) 2.00 s' in out[0][1]
    watch.start_stage('epoch 1', length=1)
    out = _feed(watch, [(0.3, 1.0)])
    assert 'first 0 batch(es) 0.00 s' in out[0][1]
    assert 'data wait 30% of the next 1 iterations' in out[0][1]


def test_shape_changes_and_precise_bn_reach_the_visualizer(full):
    """At iterations 0 and 9 the loader changes to the stage's long-cycle
    shape; precise BN (2 batches) runs before each checkpoint, after 3, 5
    and 6 epochs (iterations 9, 21 and 27), mid-shape at 5."""
    from mmext.multigrid import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN,
                                 SCALAR_CROP_SIZE)
    shapes = [(r['step'], r[SCALAR_BATCH_SIZE], r[SCALAR_CLIP_LEN],
               r[SCALAR_CROP_SIZE]) for r in _scalars(full.work_dir)
              if SCALAR_CROP_SIZE in r]
    assert shapes == [(0, 16, 8, 40), (9, 4, 16, 56)]
    assert _precise_bn_steps(full.work_dir) == [(9, 2), (21, 2), (27, 2)]


def test_validation_and_checkpoints_at_the_recipe_epochs(full):
    """The recipe validates after 3 and 4 of its 4 epochs and saves after
    each: recipe epochs 1, 2, 3, 4 end at multigrid epochs 2.5, 5, 5.5, 6
    (LR stage [0, 2) -> [0, 5), [2, 4) -> [5, 6)), rounded half up."""
    assert sorted(osp.basename(p) for p in glob.glob(
        osp.join(full.work_dir, 'epoch_*.pth'))) == [
            'epoch_3.pth', 'epoch_5.pth', 'epoch_6.pth']
    assert [r['step'] for r in _scalars(full.work_dir)
            if 'acc/top1' in r] == [6]
    [log] = glob.glob(osp.join(full.work_dir, '*', '*.log'))
    with open(log) as f:
        text = f.read()
    assert 'Multigrid: validation after epochs [6], ' in text
    assert 'checkpoints after epochs [3, 5, 6] of 6 (recipe epochs' in text


def _scalars(work_dir):
    import json
    [path] = glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))
    with open(path) as f:
        return [json.loads(line) for line in f.read().splitlines()]


def _precise_bn_steps(work_dir):
    from mmext.multigrid import SCALAR_PRECISE_BN
    return [(r['step'], r[SCALAR_PRECISE_BN]) for r in _scalars(work_dir)
            if SCALAR_PRECISE_BN in r]


def test_precise_bn_only_where_its_statistics_are_read(tmp_path):
    """Without validation or a checkpoint after the first shape's end
    (epoch 2), only the last epoch gets precise BN: the second shape's
    training would overwrite the first one's statistics unread. The full
    run above (checkpoint every epoch) gets it after both."""
    _train(tmp_path, train_cfg=dict(val_interval=100),
           default_hooks=dict(checkpoint=dict(interval=100)))
    assert _precise_bn_steps(tmp_path) == [(27, 2)]


def _epoch_end(epoch, max_epochs=10, val=True, val_begin=1, val_interval=3,
               dynamic_intervals=None, checkpoint=None):
    """A runner stub inside ``after_train_epoch`` of ``epoch`` (0-based)."""
    from mmengine.hooks import CheckpointHook
    from mmengine.runner.loops import calc_dynamic_intervals
    milestones, intervals = calc_dynamic_intervals(val_interval,
                                                   dynamic_intervals)
    loop = SimpleNamespace(max_epochs=max_epochs, val_begin=val_begin,
                           dynamic_milestones=milestones,
                           dynamic_intervals=intervals)
    hooks = [CheckpointHook(**checkpoint)] if checkpoint else []
    return SimpleNamespace(epoch=epoch, max_epochs=max_epochs,
                           train_loop=loop, val_loop=object() if val else None,
                           hooks=hooks)


@pytest.mark.parametrize('kwargs, epochs', [
    # Validation after epochs 3, 6, 9 and the last (10).
    (dict(), [2, 5, 8, 9]),
    (dict(val=False), [9]),
    (dict(val_begin=5), [5, 8, 9]),
    # Interval 3, then 2 from epoch 6 on (as EpochBasedTrainLoop decides).
    (dict(dynamic_intervals=[(6, 2)]), [2, 5, 7, 9]),
    (dict(val=False, checkpoint=dict(interval=4)), [3, 7, 9]),
    # mmengine saves at epoch save_begin (dividend 0) and every 4 after.
    (dict(val=False, checkpoint=dict(interval=4, save_begin=2)), [1, 5, 9]),
    (dict(val=False, checkpoint=dict(interval=4, by_epoch=False)), [9]),
])
def test_reads_bn_statistics_after_epoch_follows_the_loop(kwargs, epochs):
    assert [e for e in range(10) if reads_bn_statistics_after_epoch(
        _epoch_end(e, **kwargs))] == epochs


@pytest.mark.parametrize('epochs', [[], [10], [3, 5, 10], [1, 2, 3, 7, 10]])
def test_the_loop_validates_after_exactly_the_epochs_set(epochs):
    from mmengine.runner import EpochBasedTrainLoop
    loop = SimpleNamespace(max_epochs=10, val_begin=1, val_interval=1,
                           dynamic_milestones=[0], dynamic_intervals=[1])
    set_validation_epochs(loop, epochs)
    validated = []
    for done in range(1, 11):
        # What EpochBasedTrainLoop.run decides after each epoch.
        loop.epoch = done
        EpochBasedTrainLoop._decide_current_val_interval(loop)
        if done >= loop.val_begin and (done % loop.val_interval == 0
                                       or done == loop.max_epochs):
            validated.append(done)
    assert validated == epochs
    runner = SimpleNamespace(train_loop=loop, val_loop=object(), hooks=[])
    assert [e + 1 for e in range(9) if reads_bn_statistics_after_epoch(
        SimpleNamespace(**vars(runner), epoch=e))] == [
            v for v in epochs if v < 10]


class _SplitRecorder(Hook):
    """Per training iteration: the batch and whether every block of
    ``size`` consecutive clips was normalised on its own by the first BN
    layer that trains (its output, less the affine transform, has mean 0
    and biased variance 1 per channel over the block)."""

    priority = 'LOWEST'

    def __init__(self, size):
        self.size = size
        self.records = []
        self._handle = None

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        bn = runner.model.backbone.conv1.bn  # looked up anew every time

        def record(module, args, out):
            z = (out - module.bias.view(-1, 1, 1, 1)) / module.weight.view(
                -1, 1, 1, 1)
            blocks = z.detach().split(self.size)
            ok = all(
                torch.allclose(b.mean((0, 2, 3, 4)), torch.zeros(1),
                               atol=1e-4)
                and torch.allclose(b.var((0, 2, 3, 4), unbiased=False),
                                   torch.ones(1), atol=1e-2)
                for b in blocks)
            self.records.append((len(out), ok))

        self._handle = bn.register_forward_hook(record)

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        self._handle.remove()


def test_sub_bn_keeps_bn_base_size_clips_per_split_at_every_iteration(
        tmp_path):
    """Every iteration, the short cycle's 32-clip batches included, has 4
    clips per split."""
    runner = tiny_runner(
        tmp_path, default_hooks=dict(checkpoint=dict(interval=100,
                                                     save_last=False)),
        train_cfg=dict(max_epochs=2, val_begin=100),
        custom_hooks=[dict(TINY_HOOK, precise_bn_iters=0)],
        **{'param_scheduler.1.end': 2, 'param_scheduler.1.milestones': [1]})
    recorder = _SplitRecorder(size=4)
    runner.register_hook(recorder)
    runner.train()
    batches = [n for n, _ in recorder.records]
    # Long cycle (T/2) then base, each with its short cycle.
    assert sorted(set(batches)) == [4, 8, 16, 32]
    assert len(batches) == runner.iter
    assert [ok for _, ok in recorder.records] == [True] * len(batches)


class _AmpRecorder(Hook):
    """Dtypes inside training iterations: the first convolution's output
    (autocast) and every BN buffer and parameter after each step."""

    priority = 'LOWEST'

    def __init__(self):
        self.conv_dtypes, self.bn_dtypes = set(), set()

    def before_run(self, runner):
        runner.model.backbone.conv1.conv.register_forward_hook(
            lambda m, args, out: self.conv_dtypes.add(
                (m.training, out.dtype)))

    def after_train_iter(self, runner, batch_idx, data_batch=None,
                         outputs=None):
        from mmext.compat import BatchNormBase
        for m in runner.model.modules():
            if isinstance(m, BatchNormBase):
                self.bn_dtypes.update(
                    t.dtype for t in (m.running_mean, m.running_var,
                                      m.weight))


@pytest.mark.parametrize('device,dtype', [
    ('cpu', 'bfloat16'),
    pytest.param('cuda', 'float16', marks=CUDA_MARKS),
    pytest.param('cuda', 'bfloat16', marks=CUDA_MARKS),
])
def test_amp_multigrid_run(device, dtype, full_run, tmp_path, monkeypatch):
    """AmpOptimWrapper across the long and short cycle: the same shapes and
    LRs (schedule x long-cycle batch factor) per iteration as the float32
    run, the forward in the AMP dtype, sub-BN statistics and parameters in
    float32, finite losses, a checkpoint of the recipe model."""
    if device == 'cpu':
        if torch.cuda.is_available():
            pytest.skip('the runner trains on CUDA when it is visible; the '
                        'cuda cases run AMP there')
        # mmengine's AmpOptimWrapper asserts an accelerator; its autocast
        # and the rest of the path run on the CPU with bfloat16 (torch's
        # GradScaler disables itself there, bf16 needs no loss scaling).
        from mmengine.optim.optimizer import amp_optimizer_wrapper
        monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available',
                            lambda: True)
        # oneDNN's bfloat16 conv3d weight gradient of torch 2.13 is NaN in
        # about 1 call of 4 on CPUs with avx512_bf16 (seen on AMD EPYC; fine
        # without oneDNN and for conv2d): use torch's own kernels.
        monkeypatch.setattr(torch.backends.mkldnn, 'enabled', False)
    # mmaction2's top-k accuracy (numpy) takes no bfloat16 class scores.
    cast = [dict(type='Float32HeadHook')] if dtype == 'bfloat16' else []
    runner = tiny_runner(tmp_path, custom_hooks=cast + recorded(),
                         optim_wrapper=dict(type='AmpOptimWrapper',
                                            dtype=dtype,
                                            loss_scale='dynamic'))
    recorder, times = _AmpRecorder(), RunRecorder()
    runner.register_hook(recorder)
    runner.register_hook(times)
    runner.train()
    assert read_shapes(tmp_path) == full_run
    assert recorder.conv_dtypes >= {(True, getattr(torch, dtype))}
    assert recorder.bn_dtypes == {torch.float32}
    losses = [r.loss for r in times.iters]
    assert len(losses) == len(full_run) and all(map(math.isfinite, losses))
    state = torch.load(osp.join(tmp_path, 'epoch_6.pth'), map_location='cpu',
                       weights_only=False)['state_dict']
    _recipe_model().load_state_dict(state, strict=True)
    assert all(v.dtype in (torch.float32, torch.int64) for v in state.values())


@pytest.mark.parametrize('collate', [
    None, dict(type='pseudo_collate'), dict(type='default_collate')])
def test_repeat_aug_dataset_needs_its_collate(collate):
    """Without repeat_pseudo_collate a RepeatAugDataset batch reaches the
    model as lists of clip dicts (AttributeError in the first forward)."""
    cfg = dict(batch_size=2) if collate is None else dict(
        batch_size=2, collate_fn=collate)
    name = 'pseudo_collate' if collate is None else collate['type']
    with pytest.raises(ValueError, match=re.escape(
            f"(type='repeat_pseudo_collate'), got {name!r}.")):
        _check_repeat_collate(cfg)
    from mmaction.datasets.repeat_aug_dataset import repeat_pseudo_collate
    for ok in ('repeat_pseudo_collate', 'mmaction.repeat_pseudo_collate',
               repeat_pseudo_collate):
        _check_repeat_collate(dict(collate_fn=dict(type=ok)))
    # mmengine also takes the function itself.
    _check_repeat_collate(dict(collate_fn=repeat_pseudo_collate))
    with pytest.raises(ValueError, match="got 'pseudo_collate'"):
        from mmengine.dataset import pseudo_collate
        _check_repeat_collate(dict(collate_fn=pseudo_collate))
