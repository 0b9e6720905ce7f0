"""mmext.runner: mmext.Runner (effective batch in auto_scale_lr, resume
guards, trusted checkpoint loads, ann_file, dropped base hooks) on toy
runs."""
import atexit
import os
import os.path as osp
import re
import warnings

import pytest
import torch
from bench_utils import build_runner, run_processes
from helpers import (REPO_ROOT, ToyRegressionData, ToyRegressor,
                     logged_errors)
from mmengine.config import Config
from mmengine.registry import DATASETS, MODELS
from mmengine.runner import Runner as MMEngineRunner

from mmext.agvm import AGVMOptimWrapper
from mmext.runner import (DATA_ROOT_VARIABLES, Runner, register_resume_guard,
                          restart_hint)


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
    assert 'effective batch 4 (loader batch 2 x world size 1 x ' in log
    assert "accumulative_counts 2); auto_scale_lr rule='linear'" in log
    assert 'LR x 0.5 = 4 / base_batch_size 8' in log


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


# Two param groups of different LRs (bias_lr_mult), every group checked.
PARAMWISE = dict(bias_lr_mult=2.)
OPTIMIZERS = {'SGD': dict(type='SGD', lr=0.1, momentum=0.9),
              'AdamW': dict(type='AdamW', lr=1e-3, weight_decay=0.05)}


@pytest.mark.parametrize('optimizer', ['SGD', 'AdamW'])
@pytest.mark.parametrize('counts', [1, 2])
@pytest.mark.parametrize('rule, factors', [
    # Effective batch 2 x 1 x K against base_batch_size 8.
    ('linear', {1: 0.25, 2: 0.5}),
    ('sqrt', {1: 0.5, 2: 0.5**0.5}),
])
def test_auto_scale_lr_rule_sets_every_group(tmp_path, optimizer, counts,
                                             rule, factors):
    opt = OPTIMIZERS[optimizer]
    cfg = _cfg(tmp_path, auto_scale_lr=dict(AUTO, rule=rule),
               optim_wrapper=dict(optimizer=opt, paramwise_cfg=PARAMWISE,
                                  accumulative_counts=counts))
    runner = build_runner(cfg)
    runner.train()
    factor = factors[counts]
    groups = runner.optim_wrapper.optimizer.param_groups
    # One group per parameter: weight, bias of backbone and head.
    assert [g['params'][0].dim() for g in groups] == [2, 1, 2, 1]
    assert [g['lr'] for g in groups] == pytest.approx(
        [opt['lr'] * factor * mult for mult in (1, 2, 1, 2)])
    log = open(glob_log(tmp_path)).read()
    assert f'effective batch {2 * counts} (loader batch 2' in log
    ratio = f'{2 * counts} / base_batch_size 8'
    shown = ratio if rule == 'linear' else f'sqrt({ratio})'
    assert f"auto_scale_lr rule='{rule}': LR x {factor:g} = {shown}" in log


@pytest.mark.parametrize('optimizer, counts, auto, warned', [
    ('AdamW', 4, {}, True),             # effective batch 8: LR x 8
    ('AdamW', 2, {}, False),            # LR x 4: not more than 4x
    ('AdamW', 4, dict(rule='linear'), False),  # the rule chosen
    ('AdamW', 4, dict(rule='sqrt'), False),
    ('SGD', 4, {}, False),
])
def test_adam_scaled_linearly_beyond_4x_suggests_sqrt(
        tmp_path, optimizer, counts, auto, warned):
    cfg = _cfg(tmp_path, auto_scale_lr=dict(enable=True, base_batch_size=1,
                                            **auto),
               optim_wrapper=dict(optimizer=OPTIMIZERS[optimizer],
                                  accumulative_counts=counts))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        build_runner(cfg).train()
    suggested = [str(w.message) for w in caught if 'sqrt' in str(w.message)]
    assert len(suggested) == warned
    if warned:
        assert "AdamW's LR by 8 (linear rule): consider rule='sqrt'" in (
            suggested[0])
        assert suggested[0] in open(glob_log(tmp_path)).read()


@pytest.mark.parametrize('auto, error, fragment', [
    (dict(base_batch_size=None), TypeError, 'base_batch_size=None'),
    (dict(), TypeError, 'base_batch_size=None'),
    (dict(base_batch_size=0), ValueError, 'base_batch_size=0: expected fin'),
    (dict(base_batch_size=8, rule='Sqrt'), ValueError, "rule='Sqrt'"),
    (dict(base_batch_size=8, rules='sqrt'), TypeError, "key 'rules'"),
])
def test_a_bad_auto_scale_lr_is_refused_before_training(
        tmp_path, auto, error, fragment):
    """In the run's log file too (issue 33: base_batch_size=None was
    mmengine's TypeError from a division)."""
    runner = build_runner(_cfg(tmp_path, auto_scale_lr=dict(enable=True,
                                                             **auto)))
    with pytest.raises(error, match=re.escape(fragment)):
        runner.train()
    assert runner.iter == 0
    [line] = logged_errors(tmp_path)
    assert f'{error.__name__}: auto_scale_lr' in line and fragment in line


def test_mmengine_runner_with_accumulation_is_refused(tmp_path):
    """The toolboxes' tools/train.py builds mmengine's Runner, which scales
    the LR by loader batch 2 x world size 1 / 8: the AGVM wrapper sees the
    scaled LRs and stops before the first step."""
    runner = MMEngineRunner.from_cfg(_cfg(tmp_path, auto_scale_lr=AUTO))
    with pytest.raises(ValueError) as err:
        runner.train()
    refused = "accumulative_counts=2. Set runner_type='mmext.Runner'"
    assert refused in str(err.value)
    assert runner.iter == 0
    # In the run's log file too, with mmengine's own Runner.
    [line] = logged_errors(tmp_path)
    assert refused in line and 'ValueError: auto_scale_lr is leaving' in line


@pytest.mark.parametrize('wrapper,error,fragment', [
    (dict(module_names=['backbon']), ValueError, "'backbon' is not"),
    (dict(update_interval=0), ValueError, 'update_interval=0'),
    (dict(paramwise_cfg=['x']), TypeError, 'paramwise_cfg should be'),
])
def test_agvm_refusals_reach_the_log_with_mmengines_runner(
        tmp_path, wrapper, error, fragment):
    """The constructor and the wrapper (built in Runner.train) log what
    stops a run from their own lifecycle, without mmext.Runner."""
    runner = MMEngineRunner.from_cfg(_cfg(
        tmp_path, optim_wrapper=dict(AGVM_WRAPPER, **wrapper)))
    with pytest.raises(error, match=re.escape(fragment)):
        runner.train()
    [line] = logged_errors(tmp_path)
    assert f'{error.__name__}: ' in line and fragment in line


def test_mmengine_runner_ignoring_the_sqrt_rule_is_refused(tmp_path):
    """mmengine's Runner scales linearly whatever the rule: the AGVM
    wrapper stops the run before the first step."""
    runner = MMEngineRunner.from_cfg(_cfg(
        tmp_path, auto_scale_lr=dict(AUTO, rule='sqrt'),
        optim_wrapper=dict(AGVM_WRAPPER, accumulative_counts=2)))
    with pytest.raises(ValueError, match=re.escape(
            "rule='sqrt' needs runner_type='mmext.Runner'")):
        runner.train()
    assert runner.iter == 0
    [line] = logged_errors(tmp_path)
    assert "ValueError: auto_scale_lr.rule='sqrt' needs" in line


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
    assert runner.iter == 0
    [line] = logged_errors(tmp_path / 'second')  # the guard's refusal
    assert f'ValueError: {ckpt} has AGVM state' in line


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
            f'refused, or start from its weights with load_from={ckpt}')):
        runner.train()
    assert seen == [(1, ckpt, True)] and runner.iter == 0


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


def _video_loader(ann_file, **dataset):
    return dict(batch_size=1, num_workers=0,
                sampler=dict(type='DefaultSampler', shuffle=False),
                dataset=dict(type='VideoDataset', ann_file=str(ann_file),
                             pipeline=[], **dataset))


def test_a_missing_or_empty_annotation_list_is_named(tmp_path, monkeypatch):
    from mmengine.registry import DefaultScope
    for name in DATA_ROOT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(REPO_ROOT)
    with DefaultScope.overwrite_default_scope('mmaction'):
        with pytest.raises(FileNotFoundError, match=re.escape(
                f'train.txt does not exist in {REPO_ROOT}: get the dataset')
        ) as err:
            Runner.build_dataloader(_video_loader('no/such/folder/train.txt'))
        assert 'MMEXT' not in str(err.value)  # the config reads none
        # mmext's configs' default folders: how to make or move them.
        for folder, fix in [('data/demo', 'run make demo-data in the'),
                            ('../shared/data', 'set MMEXT_DATA_ROOT to its')]:
            with pytest.raises(FileNotFoundError, match=re.escape(fix)):
                Runner.build_dataloader(_video_loader(
                    osp.join(folder, 'no-such-set', 'train.txt')))
        # From elsewhere, a file of the project: run from its root.
        monkeypatch.chdir(tmp_path)
        with pytest.raises(FileNotFoundError, match=re.escape(
                f': run from the project root {REPO_ROOT}')):
            Runner.build_dataloader(_video_loader('setup.cfg'))
        missing = str(tmp_path / 'absent.txt')
        with pytest.raises(FileNotFoundError,
                           match=f'^ann_file {re.escape(missing)} does not '
                           'exist$'):
            Runner.build_dataloader(_video_loader(missing))
        for text in ('', '\n \n'):
            (tmp_path / 'empty.txt').write_text(text)
            with pytest.raises(ValueError,
                               match='empty.txt lists no samples'):
                Runner.build_dataloader(_video_loader(tmp_path / 'empty.txt'))


def test_a_missing_ann_file_is_in_the_run_log(tmp_path):
    cfg = _cfg(tmp_path)
    cfg.train_dataloader.dataset.ann_file = 'no/such/train.txt'
    runner = build_runner(cfg)
    with pytest.raises(FileNotFoundError):
        runner.train()
    [line] = logged_errors(tmp_path)
    assert 'FileNotFoundError: ann_file no/such/train.txt does not' in line


@pytest.mark.parametrize('config, variable', [
    ('configs/multigrid/recognizer3d_r18_multigrid_fight.py',
     'MMEXT_DATA_ROOT'),  # ann_file under data_root
    ('configs/agvm/fpn_r18_agvm_camvid-cpu.py', 'MMEXT_DATA_ROOT'),
    ('configs/demo/faster-rcnn_r18_fpn_demo-det.py', 'MMEXT_DEMO_DATA'),
])
def test_a_wrong_data_root_variable_is_named(tmp_path, monkeypatch, config,
                                             variable):
    """Issue 33: the variable set to a folder without the data was reported
    as a missing file only."""
    from mmengine.registry import DefaultScope
    wrong = str(tmp_path / 'wrong')
    monkeypatch.setenv(variable, wrong)
    root = osp.dirname(osp.dirname(osp.abspath(__file__)))
    cfg = Config.fromfile(osp.join(root, config))
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        for loader in (cfg.train_dataloader, cfg.val_dataloader):
            with pytest.raises(FileNotFoundError, match=re.escape(
                    f'does not exist: check {variable}={wrong}')) as err:
                Runner.build_dataloader(loader)
            assert f'ann_file {wrong}' in str(err.value)


def test_a_custom_hooks_override_that_drops_a_base_hook_warns(tmp_path):
    """On stderr and in the run's log file (the runner's logger exists)."""
    from bench_utils import load_run_config
    base = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))),
                    'configs/demo/recognizer3d_r18_multigrid_demo-video.py')
    child = tmp_path / 'child.py'
    child.write_text(f"_base_ = '{base}'\n"
                     "custom_hooks = [dict(type='mmext.NaNGuardHook')]\n")
    dropped = 'custom_hooks of child.py drop mmext.MultigridHook of '
    with pytest.warns(UserWarning, match=dropped):
        runner = build_runner(load_run_config(str(child), None,
                                              str(tmp_path / 'work')))
    with open(osp.join(runner.log_dir, f'{runner.timestamp}.log')) as f:
        assert dropped in f.read()
    child.write_text(child.read_text().replace(
        "[dict(type='mmext.NaNGuardHook')]",
        "[dict(type='mmext.NaNGuardHook'), dict(type='mmext.MultigridHook')]"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        build_runner(load_run_config(str(child), None, str(tmp_path / 'w2')))
    assert not [w for w in caught if 'drop' in str(w.message)]


# Threads of a process group: gloo's workers and I/O loop, a TCPStore's.
GROUP_THREADS = ('pt_gloo_runloop', 'gloo_tcp_loop', 'pt_tcpstore_uv')


def _thread_names(path):
    """Write the names of the process's threads to ``path`` (Linux)."""
    with open(path, 'w') as f:
        f.write('\n'.join(
            open(f'/proc/self/task/{task}/comm').read().strip()
            for task in os.listdir('/proc/self/task')))


def _train_with_zero(rank, world_size, work_dir):
    """One epoch with mmengine's ZeroRedundancyOptimizer; each rank saves
    the momentum buffers of its own shard, by parameter name, and at the
    interpreter's exit the names of its threads."""
    cfg = _cfg(osp.join(work_dir, 'run'), optim_wrapper=dict(
        optimizer=dict(type='ZeroRedundancyOptimizer', optimizer_type='SGD',
                       lr=0.1, momentum=0.9)))
    runner = Runner.from_cfg(cfg)
    runner.train()
    optimizer = runner.optim_wrapper.optimizer
    names = {param: name for name, param in runner.model.named_parameters()}
    torch.save({names[param]: state['momentum_buffer']
                for param, state in optimizer.optim.state.items()},
               osp.join(work_dir, f'shard{rank}.pth'))
    atexit.register(_thread_names, osp.join(work_dir, f'threads{rank}.txt'))


@pytest.mark.skipif(not osp.isdir('/proc/self/task'),
                    reason='thread names from /proc (Linux)')
def test_a_zero_checkpoint_gathers_every_rank_shard(tmp_path):
    """mmengine 0.10.7 saves on rank 0 only, where ZeRO gathers the shards
    by a collective call: without mmext.Runner's gathering the 2 ranks
    hang. The checkpoint holds each rank's momentum buffers.

    No thread of the process group outlives it to the interpreter's exit:
    the runner and its optimizer, a reference cycle, held the group after
    destroy_process_group, and a gloo thread still running at exit aborted
    a loaded run ("terminate called without an active exception")."""
    run_processes(_train_with_zero, 2, (str(tmp_path), ), timeout=600)
    for rank in (0, 1):
        left = (tmp_path / f'threads{rank}.txt').read_text().split('\n')
        assert not set(left) & set(GROUP_THREADS), (rank, left)
    shards = [torch.load(tmp_path / f'shard{rank}.pth') for rank in (0, 1)]
    assert shards[0] and shards[1] and not set(shards[0]) & set(shards[1])
    checkpoint = torch.load(tmp_path / 'run' / 'epoch_1.pth',
                            weights_only=False)['optimizer']
    names = [name for name, _ in ToyRegressor().named_parameters()]
    saved = {names[index]: state['momentum_buffer']
             for index, state in checkpoint['state'].items()}
    gathered = {**shards[0], **shards[1]}
    assert saved.keys() == gathered.keys() == set(names)
    for name, buffer in gathered.items():
        torch.testing.assert_close(saved[name], buffer)
