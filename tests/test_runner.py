"""mmext.runner: mmext.Runner (effective batch, auto_scale_lr, scheduler
warnings, resume guards, trusted checkpoint loads) on toy runs."""
import os
import os.path as osp
import re
import warnings

import pytest
import torch
from helpers import ToyRegressionData, ToyRegressor
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.registry import DATASETS, MODELS
from mmengine.runner import Runner as MMEngineRunner
from torch import nn

from mmext.agvm import AGVMOptimWrapper
from mmext.cli import build_runner
from mmext.runner import Runner, register_resume_guard, restart_hint


@pytest.fixture(autouse=True)
def fresh_message_hub():
    """Runners leave their message hub (with their config) current; later
    tests in this process get a clean one."""
    yield
    import uuid
    from mmengine.logging import MessageHub
    MessageHub.get_instance(f'clean_hub_{uuid.uuid4().hex}')


MODELS.register_module(name='RunnerToyModel', module=ToyRegressor, force=True)
DATASETS.register_module(name='RunnerToyData', module=ToyRegressionData,
                         force=True)


AGVM_WRAPPER = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    optimizer=dict(type='SGD', lr=0.1),
    module_names=['backbone', 'head'],
    accumulative_counts=2)


def _cfg(work_dir, **kwargs):
    cfg = dict(
        model=dict(type='RunnerToyModel'),
        work_dir=str(work_dir),
        experiment_name=f'{osp.basename(osp.dirname(work_dir))}_'
        f'{osp.basename(work_dir)}',
        train_dataloader=dict(
            dataset=dict(type='RunnerToyData'),
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='pseudo_collate'),
            batch_size=2, num_workers=0),
        train_cfg=dict(by_epoch=True, max_epochs=1),
        optim_wrapper=AGVM_WRAPPER,
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=1)),
        launcher='none',
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
        randomness=dict(seed=0))
    cfg.update(kwargs)
    return Config(cfg)


def _lrs(runner):
    return [g['lr'] for g in runner.optim_wrapper.optimizer.param_groups]


AUTO = dict(enable=True, base_batch_size=8)


@pytest.mark.parametrize('build', ['tools', 'from_cfg'])
def test_auto_scale_lr_uses_the_effective_batch_with_agvm(tmp_path, build):
    """One process, loader batch 2, 2 accumulated micro-batches (AGVM's
    halves): effective batch 4, so base_batch_size 8 halves the LR (mmengine
    alone would quarter it). Built by mmext's tools (``runner_type`` set) or
    directly (no ``runner_type`` in the config)."""
    cfg = _cfg(tmp_path, auto_scale_lr=AUTO)
    runner = build_runner(cfg) if build == 'tools' else Runner.from_cfg(cfg)
    assert type(runner) is Runner
    runner.train()
    assert isinstance(runner.optim_wrapper, AGVMOptimWrapper)
    assert _lrs(runner) == [pytest.approx(0.05)] * 2
    assert runner.message_hub.get_scalar('train/lr').current() == (
        pytest.approx(0.05))
    log = open(glob_log(tmp_path)).read()
    assert ('effective batch 4 (loader batch 2 x world size 1 x '
            'accumulative_counts 2); auto_scale_lr: LR x 0.5') in log


def glob_log(work_dir):
    import glob
    logs = glob.glob(osp.join(str(work_dir), '*', '*.log'))
    assert len(logs) == 1, logs
    return logs[0]


def test_plain_wrapper_with_accumulation_is_scaled_alike(tmp_path):
    runner = build_runner(_cfg(
        tmp_path, auto_scale_lr=AUTO,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1),
                           accumulative_counts=2)))
    runner.train()
    assert _lrs(runner) == [pytest.approx(0.05)]


def test_mmengine_runner_with_accumulation_is_refused(tmp_path):
    """The toolboxes' tools/train.py builds mmengine's Runner, which scales
    the LR by loader batch 2 x world size 1 / 8: the AGVM wrapper sees the
    scaled LRs and stops before the first step."""
    runner = MMEngineRunner.from_cfg(_cfg(tmp_path, auto_scale_lr=AUTO))
    with pytest.raises(ValueError) as err:
        runner.train()
    assert ("leaving out optim_wrapper.accumulative_counts=2. Set "
            "runner_type='mmext.Runner'") in str(err.value)
    assert runner.iter == 0


def test_mmengine_runner_without_auto_scale_lr_trains_agvm(tmp_path):
    runner = MMEngineRunner.from_cfg(_cfg(tmp_path))
    runner.train()
    assert runner.iter == 8 and _lrs(runner) == [0.1, 0.1]


def _train_and_checkpoint(tmp_path, **kwargs):
    runner = build_runner(_cfg(tmp_path / 'first', **kwargs))
    runner.train()
    return str(tmp_path / 'first' / 'epoch_1.pth')


def _resume(tmp_path, ckpt, **kwargs):
    cfg = _cfg(tmp_path / 'second', **kwargs)
    cfg.train_cfg.max_epochs = 2
    cfg.resume, cfg.load_from = True, ckpt
    return build_runner(cfg)


def test_resume_agvm_checkpoint_into_plain_config(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path)
    runner = _resume(tmp_path, ckpt, optim_wrapper=dict(
        optimizer=dict(type='SGD', lr=0.1)))
    with pytest.raises(ValueError) as err:
        runner.train()
    msg = str(err.value)
    assert f'{ckpt} has AGVM state' in msg
    assert "type='mmext.AGVMOptimWrapper'" in msg


def test_resume_plain_checkpoint_into_agvm_config(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path, optim_wrapper=dict(
        optimizer=dict(type='SGD', lr=0.1)))
    with pytest.raises(ValueError, match='no AGVM state'):
        _resume(tmp_path, ckpt).train()


def test_resume_with_other_module_names(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path)
    with pytest.raises(ValueError, match=re.escape(
            "checkpoint has module_names=['backbone', 'head']")):
        _resume(tmp_path, ckpt, optim_wrapper=dict(
            AGVM_WRAPPER, module_names=['head', 'backbone'])).train()


def test_resume_with_other_param_groups(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path)
    wrapper = dict(AGVM_WRAPPER, paramwise_cfg=dict(bias_lr_mult=2.))
    with pytest.raises(ValueError) as err:
        _resume(tmp_path, ckpt, optim_wrapper=wrapper).train()
    saved = "[('backbone', 2), ('head', 2)]"
    now = "[('backbone', 1), ('backbone', 1), ('head', 1), ('head', 1)]"
    assert f'{saved} in the checkpoint, {now} now' in str(err.value)


def test_mmext_runner_resumes_without_the_tools(tmp_path):
    """mmext.Runner built from a config (the toolboxes' train.py) trusts its
    own checkpoint loads: torch >= 2.6 would refuse the message hub."""
    ckpt = _train_and_checkpoint(tmp_path)
    cfg = _cfg(tmp_path / 'second')
    cfg.train_cfg.max_epochs = 2
    cfg.resume, cfg.load_from = True, ckpt
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.epoch == 2 and runner.iter == 16
    # The effective batch is this run's: no warning about loading it.
    log = open(glob_log(tmp_path / 'second')).read()
    assert 'resumed epoch: 1, iter: 8' in log
    assert 'effective_batch_size' not in log


def test_registered_resume_guard_runs_before_any_state(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path)
    seen = []

    @register_resume_guard
    def refuse(runner, checkpoint, filename, resume_optimizer):
        if runner.cfg.get('refuse_resume'):
            seen.append((checkpoint['meta']['epoch'], filename,
                         resume_optimizer))
            raise ValueError('refused, ' + restart_hint(filename))

    runner = _resume(tmp_path, ckpt, refuse_resume=True)
    with pytest.raises(ValueError, match=re.escape(
            f'refused, or start from its weights with load_from={ckpt} (no '
            f'--resume).')):
        runner.train()
    assert seen == [(1, ckpt, True)] and runner.iter == 0


def test_a_hook_that_remaps_the_schedulers_silences_the_warning(tmp_path):

    class Remaps(Hook):
        remaps_param_schedulers = True

    runner = build_runner(_cfg(tmp_path, param_scheduler=[dict(
        type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
        end=50)]))
    runner.register_hook(Remaps())
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        runner.train()
    assert not [w for w in caught if 'param_scheduler' in str(w.message)]


def test_mmext_method_configs_use_mmext_runner():
    import glob
    root = osp.dirname(osp.dirname(osp.abspath(__file__)))
    paths = (glob.glob(osp.join(root, 'configs', 'agvm', '*.py')) +
             glob.glob(osp.join(root, 'configs', 'multigrid', '*.py')) +
             glob.glob(osp.join(root, 'configs', 'demo', '*agvm*.py')) +
             glob.glob(osp.join(root, 'configs', 'demo', '*multigrid*.py')))
    assert len(paths) >= 10
    for path in paths:
        assert Config.fromfile(path).runner_type == 'mmext.Runner', path


def test_runner_warns_about_a_warm_up_longer_than_the_run(tmp_path):
    runner = build_runner(_cfg(tmp_path, param_scheduler=[dict(
        type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
        end=50)]))
    with pytest.warns(UserWarning, match='param_scheduler LinearLR ends at '
                      r'iteration 50, after the end of training \(8 '
                      r'iterations\)'):
        runner.train()


WARM_UP = [dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0,
                end=1, convert_to_iter_based=True),
           dict(type='MultiStepLR', by_epoch=True, milestones=[1])]
SGD = dict(optimizer=dict(type='SGD', lr=0.1))


def test_resume_onto_another_effective_batch_warns(tmp_path):
    """The warm-up converted to iterations at effective batch 2 (8
    iterations per epoch) is resumed as is by mmengine; at batch 4 an epoch
    has 4 iterations, so it would last 2 epochs."""
    from mmext.runner import EFFECTIVE_BATCH_KEY
    ckpt = _train_and_checkpoint(tmp_path, optim_wrapper=SGD,
                                 param_scheduler=WARM_UP)
    assert torch.load(ckpt, weights_only=False)['meta'][
        EFFECTIVE_BATCH_KEY] == {'': 2}
    loader = dict(_cfg(tmp_path).train_dataloader, batch_size=4)
    runner = _resume(tmp_path, ckpt, optim_wrapper=SGD,
                     param_scheduler=WARM_UP, train_dataloader=loader)
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        runner.train()
    assert [str(w.message) for w in caught if 'effective batch' in str(
        w.message)] == [
        f'{ckpt} was trained with effective batch 2 (loader batch x world '
        'size x accumulative_counts), this run has 4: its iteration-based '
        'param schedulers keep the bounds computed for that batch (LinearLR '
        'iterations [0, 8)), so they end elsewhere than the config says. '
        "Resume with the checkpoint's world size, train_dataloader."
        'batch_size and accumulative_counts, or start from its weights with '
        f'load_from={ckpt} (no --resume).']
    # The same effective batch resumes silently.
    same = _resume(tmp_path / 'same', ckpt, optim_wrapper=SGD,
                   param_scheduler=WARM_UP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        same.train()
    assert not [w for w in caught if 'effective batch' in str(w.message)]


@MODELS.register_module(force=True)
class RunnerNormEvalToy(ToyRegressor):
    """RunnerToyModel with a BN in its backbone that ``norm_eval`` keeps in
    eval mode while training (as mmdet's ResNet does)."""

    def __init__(self, backbone=dict(norm_eval=False)):
        super().__init__()
        self.norm_eval = backbone['norm_eval']
        self.backbone = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4))

    def train(self, mode=True):
        super().train(mode)
        if mode and self.norm_eval:
            self.backbone[1].eval()
        return self


@pytest.mark.parametrize('norm_eval', [True, False])
def test_runner_warns_about_bn_in_eval_mode_without_weights(tmp_path,
                                                            norm_eval):
    runner = build_runner(_cfg(
        tmp_path, model=dict(type='RunnerNormEvalToy',
                             backbone=dict(norm_eval=norm_eval)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1))))
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        runner.train()
    frozen = [str(w.message) for w in caught if 'BN layers' in str(w.message)]
    if not norm_eval:
        assert frozen == []
        return
    assert frozen == [
        'model.backbone: 1 of 1 BN layers stay in eval mode while training '
        '(their running mean and variance never update), but no weights are '
        'loaded into it (no Pretrained init_cfg, no load_from), so they keep '
        'their random initialisation. Set by model.backbone.norm_eval=True. '
        'Train them with model.backbone.norm_eval=False, or load pretrained '
        "weights (init_cfg=dict(type='Pretrained', checkpoint=...) or "
        'load_from).'
    ]


def _scheduler_bounds(runner):
    return [(type(s).__name__, s.begin, s.end,
             sorted(getattr(s, 'milestones', {})))
            for s in runner.param_schedulers]


def test_auto_scale_schedule_on_an_iteration_based_recipe(tmp_path):
    """Loader batch 4 (K 2: 8 images per step) against a recipe written for
    1 image per iteration: every iteration count / 4 (warm-up, milestones,
    end, checkpoints, AGVM's window), as detectron2's REFERENCE_WORLD_SIZE
    does; the warm-up keeps its images."""
    cfg = _cfg(
        tmp_path,
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=64,
                       val_interval=32),
        param_scheduler=[
            dict(type='LinearLR', start_factor=0.25, by_epoch=False,
                 begin=0, end=16),
            dict(type='MultiStepLR', by_epoch=False, milestones=[32, 48],
                 gamma=0.5)],
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           by_epoch=False, interval=32)),
        optim_wrapper=dict(AGVM_WRAPPER, start_iter=20,
                           clip_grad=dict(max_norm=10.0),
                           clip_grad_window=(4, 20)),
        auto_scale_schedule=dict(enable=True, base_batch_size=1))
    cfg.train_dataloader.sampler = dict(type='InfiniteSampler', shuffle=False)
    cfg.train_dataloader.batch_size = 4
    runner = build_runner(cfg)
    lrs = []
    runner.register_hook(_LrRecorder(lrs))
    runner.train()
    assert runner.iter == 16
    warmup, steps = _scheduler_bounds(runner)
    assert warmup == ('LinearLR', 0, 4, []) and steps[3] == [8, 12]
    # LR per iteration: linear warm-up over 4 iterations, halved at 8, 12.
    expected = ([0.1 * (0.25 + 0.75 * t / 3) for t in range(4)] +
                [0.1] * 4 + [0.05] * 4 + [0.025] * 4)
    assert lrs == pytest.approx(expected)
    schedule = runner.optim_wrapper.schedule
    assert (schedule.start_iter, schedule.clip_grad_window) == (5, (1, 5))
    assert sorted(osp.basename(p) for p in glob_ckpts(tmp_path)) == [
        'iter_16.pth', 'iter_8.pth']
    log = open(glob_log(tmp_path)).read()
    assert ('auto_scale_schedule: iteration counts / 4 (4 images per runner '
            "iteration; the recipe's: base_batch_size 1 / "
            'base_accumulative_counts 1): train_cfg.max_iters 64 -> 16; '
            'train_cfg.val_interval [32] -> [8]; CheckpointHook.interval 32 '
            '-> 8; optim_wrapper.start_iter 20 -> 5; '
            'optim_wrapper.clip_grad_window (4, 20) -> (1, 5); param '
            'schedulers when built') in log
    assert ('auto_scale_schedule: param_scheduler LinearLR.end 16 -> 4; '
            'MultiStepLR.milestones [32, 48] -> [8, 12]') in log
    assert ('auto_scale_schedule: warm-up LinearLR: 16 iterations x 1 = 16 '
            'images in the recipe, 4 x 4 = 16 images in this run') in log


def test_auto_scale_schedule_on_an_epoch_based_recipe(tmp_path):
    """An epoch-based recipe with an iteration-counted warm-up (mmdet's 1x
    form): the warm-up shrinks, epochs and epoch milestones stay."""
    runner = build_runner(_cfg(
        tmp_path, train_cfg=dict(by_epoch=True, max_epochs=2),
        param_scheduler=[
            dict(type='LinearLR', start_factor=0.25, by_epoch=False,
                 begin=0, end=8),
            dict(type='MultiStepLR', by_epoch=True, milestones=[1],
                 gamma=0.5)],
        auto_scale_lr=dict(enable=False, base_batch_size=1),
        auto_scale_schedule=dict(enable=True)))
    lrs = []
    runner.register_hook(_LrRecorder(lrs))
    runner.train()
    # 2 images per iteration / the recipe's 1: warm-up 8 -> 4 iterations;
    # 2 epochs of 8.
    assert runner.epoch == 2 and runner.iter == 16
    assert _scheduler_bounds(runner)[0] == ('LinearLR', 0, 4, [])
    expected = ([0.1 * (0.25 + 0.75 * t / 3) for t in range(4)] +
                [0.1] * 4 + [0.05] * 8)
    assert lrs == pytest.approx(expected)


def test_auto_scale_schedule_needs_a_base_batch(tmp_path):
    runner = build_runner(_cfg(tmp_path,
                               auto_scale_schedule=dict(enable=True)))
    with pytest.raises(ValueError, match='auto_scale_schedule.enable=True '
                       'needs auto_scale_schedule.base_batch_size'):
        runner.train()


def glob_ckpts(work_dir):
    import glob
    return glob.glob(osp.join(str(work_dir), '*.pth'))


class _LrRecorder(Hook):
    """Records the LR of the first param group at each iteration."""
    priority = 'LOWEST'

    def __init__(self, lrs):
        self.lrs = lrs

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        self.lrs.append(runner.optim_wrapper.optimizer.param_groups[0]['lr'])


def _video_loader(ann_file, **dataset):
    return dict(batch_size=1, num_workers=0,
                sampler=dict(type='DefaultSampler', shuffle=False),
                dataset=dict(type='VideoDataset', ann_file=str(ann_file),
                             pipeline=[], **dataset))


@pytest.mark.parametrize('lines, indices, warned', [
    (['a.mp4 0', 'b.mp4 0', 'c.mp4 1', 'd.mp4 1'], 2, 'label 0'),
    (['a.mp4 0', 'b.mp4 0', 'c.mp4 1', 'd.mp4 1'], [0, 2], None),
    (['a.mp4 0', 'b.mp4 0', 'c.mp4 1', 'd.mp4 1'], None, None),
])
def test_a_subset_of_one_class_warns(tmp_path, lines, indices, warned):
    from mmengine.registry import DefaultScope
    ann = tmp_path / 'train.txt'
    ann.write_text('\n'.join(lines) + '\n')
    with DefaultScope.overwrite_default_scope('mmaction'), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        loader = Runner.build_dataloader(_video_loader(ann, indices=indices))
    messages = [str(w.message) for w in caught if 'indices=' in str(
        w.message)]
    assert len(loader.dataset) == (indices if isinstance(indices, int) else
                                   len(indices or lines))
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warned in messages[0]
        assert 'Give indices spread over it' in messages[0]


def test_a_missing_or_empty_annotation_list_is_named(tmp_path):
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmaction'):
        with pytest.raises(FileNotFoundError, match=re.escape(
                'ann_file no/such/folder/train.txt does not exist (relative '
                f'to the current folder {os.getcwd()}')):
            Runner.build_dataloader(_video_loader('no/such/folder/train.txt'))
        with pytest.raises(FileNotFoundError, match=re.escape(
                "or set MMEXT_DATA_ROOT to mmext's small datasets")):
            Runner.build_dataloader(
                _video_loader('../shared/data/no-such-set/train.txt'))
        for text in ('', '\n \n'):
            (tmp_path / 'empty.txt').write_text(text)
            with pytest.raises(ValueError,
                               match='empty.txt lists no samples'):
                Runner.build_dataloader(_video_loader(tmp_path / 'empty.txt'))
