"""mmext.multigrid.hook: end-to-end multigrid training on the embedded demo
data (real loader)."""
import json
import logging
import math
import os
import os.path as osp
import subprocess
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from helpers import CUDA_MARKS
from mg_helpers import PIPE, ROOT, STATS, TINY, load_random_stats
from mmcv.transforms import BaseTransform
from mmengine.hooks import Hook
from mmengine.optim import OptimWrapper

import mmext  # noqa: F401
from mmext.cli import build_runner, load_run_config
from mmext.multigrid import (MultigridHook, MultigridPlan,
                             build_multigrid_schedule, iterations_per_epoch)
from bench_utils import find_free_port
from bench_utils import RunRecorder

pytestmark = pytest.mark.usefixtures('demo_data')

# tiny_mg.py: base (B, T, S) = (4, 16, 56), 4 epochs, milestone 2, long
# cycle (T/2, S/sqrt2) then base; 64 clips.
LR, BASE_B, CLIPS = 0.05, 4, 64


def _train(work_dir, **options):
    os.chdir(ROOT)
    # Its own message hub: runners of one config built within the same
    # second share mmengine's experiment name, hence the hub's runtime info.
    options.setdefault('experiment_name', osp.basename(work_dir))
    cfg = load_run_config(TINY, options, str(work_dir))
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
def full_run(tmp_path_factory, demo_data_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('MMEXT_DEMO_DATA', demo_data_dir)
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
    results = []
    for hooks in (None, []):
        cfg = load_run_config(
            TINY, None if hooks is None else dict(custom_hooks=hooks),
            str(tmp_path_factory.mktemp('mg_te')))
        cfg.load_from = osp.join(work_dir, 'epoch_4.pth')
        results.append(build_runner(cfg).test()['acc/top1'])
    # The same as the recipe without the hook tests the same weights.
    assert results[0] == results[1]


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




def test_auto_scale_lr_with_accumulation_needs_mmext_runner(tmp_path):
    """mmengine's own runner would scale by loader batch x world size only."""
    with pytest.raises(ValueError, match="Set runner_type='mmext.Runner'"):
        _train(tmp_path, runner_type='Runner',
               auto_scale_lr=dict(enable=True, base_batch_size=4),
               optim_wrapper=dict(accumulative_counts=2))


@pytest.mark.slow
@pytest.mark.usefixtures('demo_data')
def test_training_with_frozen_stages_keeps_loaded_statistics(tmp_path):
    """End to end: a run with precise BN and one without, both from a
    checkpoint with non-trivial statistics and ``frozen_stages=1``."""
    from mmaction.registry import MODELS
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    from mmext.cli import build_runner, load_run_config
    init_default_scope('mmaction')
    model = MODELS.build(Config.fromfile(TINY).model)
    with torch.no_grad():
        load_random_stats(model, seed=2)
    ckpt = str(tmp_path / 'pretrained.pth')
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    finals = {}
    for iters in (2, 0):
        os.chdir(ROOT)
        work_dir = tmp_path / f'precise{iters}'
        hooks = [dict(type='mmext.MultigridHook',
                      long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                      bn_base_size=4, precise_bn_iters=iters)]
        cfg = load_run_config(TINY, dict(
            custom_hooks=hooks, model=dict(backbone=dict(frozen_stages=1)),
            load_from=ckpt), str(work_dir))
        build_runner(cfg).train()
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
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(
        custom_hooks=[dict(type='mmext.MultigridHook',
                           long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                           bn_base_size=4, precise_bn_iters=0,
                           skip_broken_clips=True)],
        train_cfg=dict(max_epochs=2, val_interval=10),
        param_scheduler=[],
        train_dataloader=dict(
            sampler=dict(type='DefaultSampler', shuffle=False),
            dataset=dict(ann_file=ann, data_prefix=dict(video='')))),
        str(tmp_path / 'work'))
    runner = build_runner(cfg)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    runner.logger.addHandler(handler)
    try:
        with pytest.warns(UserWarning, match=str(broken)):
            runner.train()
    finally:
        runner.logger.removeHandler(handler)
    messages = [r.getMessage() for r in records
                if 'broken' in r.getMessage()]
    assert runner.epoch == 3
    assert messages == [
        f'Multigrid: epoch {epoch} skipped 1 broken clips '
        f'(skip_broken_clips=True; the warnings name the files)'
        for epoch in range(3)
    ]
    assert records[[r.getMessage() for r in records].index(
        messages[0])].levelno == logging.WARNING


class _FakeClock:
    """Stands in for ``time`` in the hook: only loading advances it."""

    now = 0.0

    @classmethod
    def perf_counter(cls):
        return cls.now


class SlowLoadingForDataWaitTest(BaseTransform):
    """Loading a clip takes 0.1 s on the fake clock; compute takes none."""

    def transform(self, results):
        _FakeClock.now += 0.1
        return results


@pytest.mark.slow
def test_data_bound_run_warns_once(tmp_path, monkeypatch):
    from mmaction.registry import TRANSFORMS

    import mmext.multigrid.hook as hook_module
    TRANSFORMS.register_module(module=SlowLoadingForDataWaitTest, force=True)
    logged = []
    monkeypatch.setattr(hook_module, 'time', _FakeClock)
    monkeypatch.setattr(
        hook_module, 'print_log',
        lambda msg, logger=None, level=logging.INFO: logged.append(
            (level, msg)))
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(default_hooks=dict(checkpoint=dict(
        interval=100, save_last=False))), str(tmp_path))
    cfg.train_cfg.update(max_epochs=2, val_begin=100)
    cfg.param_scheduler[1].update(end=2, milestones=[1])
    cfg.train_dataloader.dataset.pipeline.insert(
        -1, dict(type='SlowLoadingForDataWaitTest'))
    cfg.custom_hooks[0].update(data_wait_threshold=0.3, data_wait_iters=2)
    runner = build_runner(cfg)
    runner.train()
    hook = next(h for h in runner.hooks
                if type(h).__name__ == 'MultigridHook')

    warnings = [m for level, m in logged if level == logging.WARNING]
    assert len(warnings) == 1
    assert 'this run is data-bound' in warnings[0]
    assert 'threshold 30%' in warnings[0]
    # All time on the fake clock is loading.
    assert warnings[0].startswith(
        'Multigrid: waiting for data took 100% of the iteration time at '
        'epoch 0 (batches ')

    # One stage-change summary per loader rebuild (every stage here has at
    # least 1 + 2 iterations), naming the epoch the new shapes start.
    plan = hook.plan
    rebuilds = [s.start_epoch for i, s in enumerate(plan.stages)
                if i == 0 or s.short_cycle != plan.stages[i - 1].short_cycle]
    summaries = [m for level, m in logged
                 if level == logging.INFO and 'stage change at' in m]
    assert [int(m.split('at epoch ')[1].split(' ')[0])
            for m in summaries] == rebuilds
    assert all('loader rebuild 0.00 s' in m and 'data wait 100%' in m
               for m in summaries)
    # Neither validation nor checkpoints: precise BN only after the last
    # epoch.
    precise = [m for _, m in logged if 'precise BN over 2 batches' in m]
    assert len(rebuilds) == 2 and len(precise) == 1
    assert precise[0].startswith(
        f'Multigrid: precise BN over 2 batches at epoch '
        f'{plan.max_epochs - 1} ')


def test_shape_changes_and_precise_bn_reach_the_visualizer(
        full_run, tmp_path_factory):
    """At iterations 0 and 9 the loader changes to the stage's long-cycle
    shape; precise BN (2 batches) runs after epochs 2 and 5 (iterations 9
    and 27)."""
    from mmext.multigrid import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN,
                                 SCALAR_CROP_SIZE)
    work_dir = [p for p in tmp_path_factory.getbasetemp().iterdir()
                if p.name.startswith('mg_full')][0]
    [path] = work_dir.glob('*/vis_data/scalars.json')
    records = [json.loads(line) for line in path.read_text().splitlines()]
    shapes = [(r['step'], r[SCALAR_BATCH_SIZE], r[SCALAR_CLIP_LEN],
               r[SCALAR_CROP_SIZE]) for r in records
              if SCALAR_CROP_SIZE in r]
    assert shapes == [(0, 16, 8, 40), (9, 4, 16, 56)]
    assert _precise_bn_steps(work_dir) == [(9, 2), (27, 2)]


def _precise_bn_steps(work_dir):
    from mmext.multigrid import SCALAR_PRECISE_BN
    [path] = work_dir.glob('*/vis_data/scalars.json')
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [(r['step'], r[SCALAR_PRECISE_BN]) for r in records
            if SCALAR_PRECISE_BN in r]


def test_precise_bn_only_where_its_statistics_are_read(tmp_path):
    """Without validation or a checkpoint after the first shape's end
    (epoch 2), only the last epoch gets precise BN: the second shape's
    training would overwrite the first one's statistics unread. The full
    run above (checkpoint every epoch) gets it after both."""
    _train(tmp_path, train_cfg=dict(val_interval=100),
           default_hooks=dict(checkpoint=dict(interval=100)))
    assert _precise_bn_steps(tmp_path) == [(27, 2)]


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
    """Issue 18: splits were set once per long-cycle stage, so the short
    cycle's 32-clip batches had 8 clips per split and the base stage's
    16-clip batch none; now every iteration has 4 per split."""
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(
        default_hooks=dict(checkpoint=dict(interval=100, save_last=False))),
        str(tmp_path))
    cfg.train_cfg.update(max_epochs=2, val_begin=100)
    cfg.param_scheduler[1].update(end=2, milestones=[1])
    cfg.custom_hooks[0].update(precise_bn_iters=0)
    runner = build_runner(cfg)
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
    os.chdir(ROOT)
    cfg = load_run_config(TINY, dict(optim_wrapper=dict(
        type='AmpOptimWrapper', dtype=dtype, loss_scale='dynamic')),
        str(tmp_path))
    runner = build_runner(cfg)
    recorder, times = _AmpRecorder(), RunRecorder()
    runner.register_hook(recorder)
    runner.register_hook(times)
    runner.train()
    with open(osp.join(tmp_path, 'shapes_rank0.json')) as f:
        records = json.load(f)
    assert records == full_run
    assert recorder.conv_dtypes >= {(True, getattr(torch, dtype))}
    assert recorder.bn_dtypes == {torch.float32}
    losses = [r.loss for r in times.iters]
    assert len(losses) == len(full_run) and all(map(math.isfinite, losses))
    from mmaction.registry import MODELS
    from mmengine.config import Config
    model = MODELS.build(Config.fromfile(TINY).model)
    state = torch.load(osp.join(tmp_path, 'epoch_6.pth'), map_location='cpu',
                       weights_only=False)['state_dict']
    model.load_state_dict(state, strict=True)
    assert all(v.dtype in (torch.float32, torch.int64) for v in state.values())


@pytest.mark.parametrize('collate', [
    None, dict(type='pseudo_collate'), dict(type='default_collate')])
def test_repeat_aug_dataset_needs_its_collate(collate):
    """Without repeat_pseudo_collate a RepeatAugDataset batch reaches the
    model as lists of clip dicts (AttributeError in the first forward)."""
    from mmext.multigrid.hook import _check_repeat_collate
    cfg = dict(batch_size=2) if collate is None else dict(
        batch_size=2, collate_fn=collate)
    name = 'pseudo_collate' if collate is None else collate['type']
    with pytest.raises(ValueError) as info:
        _check_repeat_collate(cfg, 2)
    assert str(info.value) == (
        f'train_dataloader.dataset is a RepeatAugDataset (2 clips per '
        f'video), whose items are lists of clips that collate_fn {name!r} '
        f"cannot batch. Set train_dataloader.collate_fn = "
        f"dict(type='repeat_pseudo_collate').")
    from mmaction.datasets.repeat_aug_dataset import repeat_pseudo_collate
    for ok in ('repeat_pseudo_collate', 'mmaction.repeat_pseudo_collate',
               repeat_pseudo_collate):
        _check_repeat_collate(dict(collate_fn=dict(type=ok)), 2)
    # mmengine also takes the function itself.
    _check_repeat_collate(dict(collate_fn=repeat_pseudo_collate), 2)
    with pytest.raises(ValueError, match="collate_fn 'pseudo_collate'"):
        from mmengine.dataset import pseudo_collate
        _check_repeat_collate(dict(collate_fn=pseudo_collate), 2)
