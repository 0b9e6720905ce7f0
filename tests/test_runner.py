"""mmext.runner: the per-step LR scaling of both methods, and mmext.Runner
(effective batch, auto_scale_lr, resume checks) on toy runs."""
import os.path as osp
import re

import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.dataset import BaseDataset
from mmengine.model import BaseModel
from mmengine.registry import DATASETS, MODELS
from mmengine.runner import Runner as MMEngineRunner
from torch import nn

from mmext.agvm import AGVMOptimWrapper
from mmext.runner import (EFFECTIVE_BATCH_INFO, Runner, build_runner,
                          check_auto_scale_lr, finish_distributed, scale_lrs,
                          scaled_lrs)
from mmext.testing import run_gloo_processes


@pytest.fixture(autouse=True)
def fresh_message_hub():
    """Runners leave their message hub (with their config) current; later
    tests in this process get a clean one."""
    yield
    import uuid
    from mmengine.logging import MessageHub
    MessageHub.get_instance(f'clean_hub_{uuid.uuid4().hex}')


def test_scale_and_restore():
    groups = [dict(lr=0.1), dict(lr=0.02)]
    restore = scale_lrs(groups, [2.0, 0.5])
    assert [g['lr'] for g in groups] == pytest.approx([0.2, 0.01])
    restore()
    assert [g['lr'] for g in groups] == [0.1, 0.02]


def test_context_restores_on_error():
    groups = [dict(lr=0.1)]
    with pytest.raises(RuntimeError):
        with scaled_lrs(groups, [3.0]):
            assert groups[0]['lr'] == pytest.approx(0.3)
            raise RuntimeError('step failed')
    assert groups[0]['lr'] == 0.1


def test_length_mismatch_rejected():
    with pytest.raises(ValueError, match='2 LR factors for 1 param groups'):
        scale_lrs([dict(lr=0.1)], [1.0, 2.0])


@MODELS.register_module(force=True)
class RunnerToyModel(BaseModel):

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Linear(2, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, inputs, labels=None, mode='tensor', **kwargs):
        out = self.head(torch.tanh(self.backbone(torch.stack(inputs))))
        if mode == 'loss':
            return dict(loss=((out - torch.stack(labels))**2).mean())
        return out


@DATASETS.register_module(force=True)
class RunnerToyData(BaseDataset):

    def __init__(self, **kwargs):
        super().__init__(serialize_data=False, **kwargs)

    def load_data_list(self):
        gen = torch.Generator().manual_seed(0)
        return [dict(inputs=torch.randn(2, generator=gen),
                     labels=torch.randn(1, generator=gen))
                for _ in range(16)]


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
    """The toolboxes' tools/train.py builds mmengine's Runner: the AGVM
    wrapper reads the running config and stops before the first step."""
    runner = MMEngineRunner.from_cfg(_cfg(tmp_path, auto_scale_lr=AUTO))
    with pytest.raises(ValueError) as err:
        runner.train()
    assert ("accumulative_counts=2, but mmengine's Runner.scale_lr scales "
            'the LR by loader batch x world size only, 2x too small') in str(
                err.value)
    assert "Set runner_type='mmext.Runner'" in str(err.value)
    assert runner.iter == 0


@pytest.mark.parametrize('auto, counts, info', [
    (None, 2, None), (dict(enable=False, base_batch_size=8), 2, None),
    (AUTO, 1, None), (AUTO, 2, {'': 4})])
def test_auto_scale_lr_check_passes(auto, counts, info):
    from mmengine.logging import MessageHub
    hub = MessageHub.get_instance(f'check_auto_scale_lr_{counts}_{info}')
    if info is not None:
        hub.update_info(EFFECTIVE_BATCH_INFO, info)
    check_auto_scale_lr(hub, auto, counts)


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
    assert f"{ckpt} comes from an AGVM run (module_names ['backbone', " \
        "'head'])" in msg
    assert "config's OptimWrapper cannot map" in msg
    assert f'load_from={ckpt} (no --resume)' in msg


def test_resume_plain_checkpoint_into_agvm_config(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path, optim_wrapper=dict(
        optimizer=dict(type='SGD', lr=0.1)))
    with pytest.raises(ValueError, match=re.escape(
            'the checkpoint has no AGVM state: it comes from a run without '
            'AGVM')):
        _resume(tmp_path, ckpt).train()


def test_resume_with_other_module_names(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path)
    with pytest.raises(ValueError, match=re.escape(
            "checkpoint AGVM modules ['backbone', 'head'] differ from "
            "module_names ['head', 'backbone']. Resume with "
            "optim_wrapper.module_names=['backbone', 'head']")):
        _resume(tmp_path, ckpt, optim_wrapper=dict(
            AGVM_WRAPPER, module_names=['head', 'backbone'])).train()


def test_resume_with_other_param_groups(tmp_path):
    ckpt = _train_and_checkpoint(tmp_path)
    wrapper = dict(AGVM_WRAPPER, paramwise_cfg=dict(bias_lr_mult=2.))
    with pytest.raises(ValueError) as err:
        _resume(tmp_path, ckpt, optim_wrapper=wrapper).train()
    assert ("the checkpoint's optimizer has 2 param groups (module, size) "
            "[('backbone', 2), ('head', 2)], this run 4: [('backbone', 1), "
            "('backbone', 1), ('head', 1), ('head', 1)]") in str(err.value)
    assert 'base_constructor, paramwise_cfg' in str(err.value)


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


def test_stock_i3d_schedule_on_a_short_run():
    """The I3D recipe's MultiStepLR (end 100, milestones [40, 80]) with
    max_epochs=2, and a 500-iteration warm-up in a 40-iteration run."""
    from mmext.runner import unused_scheduler_values
    schedulers = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
             end=500),
        dict(type='MultiStepLR', begin=0, end=100, by_epoch=True,
             milestones=[1, 40, 80], gamma=0.1),
        dict(type='CosineAnnealingLR', begin=5, by_epoch=True),
    ]
    assert unused_scheduler_values(schedulers, 2, 40) == [
        'param_scheduler LinearLR ends at iteration 500, after the end of '
        'training (40 iterations): it is cut short (a warm-up never reaches '
        'its target LR).',
        'param_scheduler MultiStepLR ends at epoch 100, after the end of '
        'training (2 epochs): it is cut short (a warm-up never reaches its '
        'target LR).',
        'param_scheduler MultiStepLR milestones [40, 80] lie at or after the '
        'end of training (2 epochs): those LR steps never happen.',
        'param_scheduler CosineAnnealingLR begins at epoch 5, not before the '
        'end of training (2 epochs): it never applies.',
    ]
    assert unused_scheduler_values(schedulers[1:2], 100, 4000) == []


def test_runner_warns_about_a_warm_up_longer_than_the_run(tmp_path):
    runner = build_runner(_cfg(tmp_path, param_scheduler=[dict(
        type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
        end=50)]))
    with pytest.warns(UserWarning, match='param_scheduler LinearLR ends at '
                      r'iteration 50, after the end of training \(8 '
                      r'iterations\)'):
        runner.train()


def _finish_and_report(rank, world_size, out_dir):
    finish_distributed()
    with open(osp.join(out_dir, f'rank{rank}'), 'w') as f:
        f.write(str(dist.is_initialized()))


def test_finish_distributed_destroys_the_process_group(tmp_path):
    finish_distributed()  # no process group: nothing to do
    run_gloo_processes(_finish_and_report, 2, (str(tmp_path), ))
    assert [(tmp_path / f'rank{r}').read_text() for r in range(2)] == [
        'False', 'False'
    ]
