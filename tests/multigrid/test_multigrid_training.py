"""End-to-end multigrid training on the embedded demo data (real loader)."""
import json
import os
import os.path as osp
import subprocess

import pytest
import torch

import mmext  # noqa: F401
from mmext.multigrid import build_multigrid_schedule, iterations_per_epoch
from mmext.cli import build_runner, load_run_config
from mmext.testing import find_free_port

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')

pytestmark = pytest.mark.usefixtures('repo_demo_data')

# tiny_mg.py: base (B, T, S) = (4, 16, 56), 4 epochs, milestone 2, long
# cycle (T/2, S/sqrt2) then base; 64 clips.
LR, BASE_B, CLIPS = 0.05, 4, 64


def _train(work_dir, **options):
    os.chdir(ROOT)
    cfg = load_run_config(TINY, options or None, str(work_dir))
    build_runner(cfg).train()
    with open(osp.join(work_dir, 'shapes_rank0.json')) as f:
        return json.load(f)


def _expected():
    """(epoch, batch, T, S, lr) per iteration from the pure schedule."""
    stages = build_multigrid_schedule(16, 56, [0, 2], 4, gamma=0.1,
                                      long_cycle_factors=[(0.5, 0.5**0.5),
                                                          (1, 1)])
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
def full_run(tmp_path_factory, repo_demo_data):
    return _train(tmp_path_factory.mktemp('mg_full'))


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


def test_lr_per_iteration(full_run):
    """LR = recipe LR on the multigrid axis x long-cycle batch factor."""
    stages, rows, total = _expected()
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
    for (epoch, _, _, _, it, stage), rec in zip(rows, full_run):
        warm = 0.1 + 0.9 * min(it, warm_last) / warm_last
        decay = 0.1 ** stage.lr_stage
        expected = LR * warm * decay * stage.shape.batch_factor
        assert rec['lr'] == pytest.approx(expected, rel=1e-6), (epoch, it)


def test_checkpoint_is_plain_recipe_model(full_run, tmp_path_factory):
    from mmaction.registry import MODELS
    from mmengine.config import Config
    work_dir = [p for p in tmp_path_factory.getbasetemp().iterdir()
                if p.name.startswith('mg_full')][0]
    ckpt = torch.load(osp.join(work_dir, 'epoch_1.pth'), map_location='cpu',
                      weights_only=False)
    cfg = Config.fromfile(TINY)
    model = MODELS.build(cfg.model)
    model.load_state_dict(ckpt['state_dict'], strict=True)
    assert not any('split_bn' in k for k in ckpt['state_dict'])


def test_test_with_the_multigrid_config(full_run, tmp_path_factory):
    """tools/test.py with the training config: the hook stays out of it."""
    work_dir = [p for p in tmp_path_factory.getbasetemp().iterdir()
                if p.name.startswith('mg_full')][0]
    os.chdir(ROOT)
    cfg = load_run_config(TINY, None, str(tmp_path_factory.mktemp('mg_te')))
    cfg.load_from = osp.join(work_dir, 'epoch_4.pth')
    metrics = build_runner(cfg).test()
    assert 0 <= metrics['acc/top1'] <= 1


def test_resume_equivalence(full_run, tmp_path):
    hooks = [
        dict(type='mmext.MultigridHook',
             long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)], bn_base_size=4,
             precise_bn_iters=2),
        dict(type='ShapeRecorderHook', stop_after_epoch=4)
    ]
    first = _train(tmp_path, custom_hooks=hooks)
    hooks[1] = dict(type='ShapeRecorderHook')
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(custom_hooks=hooks), str(tmp_path))
    cfg.resume, cfg.load_from = True, osp.join(tmp_path, 'epoch_4.pth')
    build_runner(cfg).train()
    with open(osp.join(tmp_path, 'shapes_rank0.json')) as f:
        second = json.load(f)
    assert first + second == full_run


def test_iteration_loop_rejected(tmp_path):
    with pytest.raises(TypeError, match='epoch-based train loop'):
        _train(tmp_path, train_cfg=dict(
            _delete_=True, type='IterBasedTrainLoop', max_iters=4))


def test_unsplittable_batch_rejected(tmp_path):
    with pytest.raises(ValueError, match='Sub-batch BN cannot split'):
        _train(tmp_path, train_dataloader=dict(batch_size=6))


def test_dist_train_two_processes(tmp_path):
    env = dict(os.environ, PORT=str(find_free_port()), OMP_NUM_THREADS='1',
               PYTHONPATH=osp.join(ROOT, 'tests', 'multigrid'))
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', TINY, '2', '--work-dir',
         str(tmp_path), '--cfg-options', 'train_cfg.max_epochs=2',
         'param_scheduler.1.end=2', 'param_scheduler.1.milestones=[1]'],
        cwd=ROOT, env=env, timeout=600, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = []
    for r in range(2):
        with open(osp.join(tmp_path, f'shapes_rank{r}.json')) as f:
            ranks.append(json.load(f))
    key = [[(x['epoch'], x['batch'], x['shapes'], x['lr'])
            for x in recs] for recs in ranks]
    assert key[0] == key[1] and len(key[0]) > 0
    assert len({tuple(x[2][0]) for x in key[0]}) >= 3


def test_dataset_smaller_than_a_batch_rejected(tmp_path):
    with pytest.raises(ValueError, match='train 0 iterations'):
        _train(tmp_path, train_dataloader=dict(dataset=dict(indices=12)))


def test_dataset_wrapper_rejected(tmp_path):
    from mmengine.config import Config
    dataset = Config.fromfile(TINY).train_dataloader.dataset
    with pytest.raises(ValueError, match='dataset wrappers'):
        _train(tmp_path, train_dataloader=dict(dataset=dict(
            _delete_=True, type='RepeatDataset', times=2, dataset=dataset)))


@pytest.mark.parametrize('options, match', [
    (dict(bn_base_size=-4), 'bn_base_size'),
    (dict(precise_bn_iters=-1), 'precise_bn_iters'),
])
def test_bad_hook_options_rejected_at_build(options, match):
    from mmext.multigrid import MultigridHook
    with pytest.raises(ValueError, match=match):
        MultigridHook(**options)


def test_auto_scale_lr_with_accumulation_needs_mmext_runner(tmp_path):
    """mmengine's own runner would scale by loader batch x world size only."""
    with pytest.raises(ValueError, match="Set runner_type='mmext.Runner'"):
        _train(tmp_path, runner_type='Runner',
               auto_scale_lr=dict(enable=True, base_batch_size=4),
               optim_wrapper=dict(accumulative_counts=2))
