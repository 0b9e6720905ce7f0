"""tools/train.py and tools/test.py: the toolbox's own tool for the config's
scope, with what mmext adds (runner, AGVM's --amp, gloo on CPU)."""
import argparse
import importlib.util
import os.path as osp
import re
import sys
import uuid

import pytest
import torch
from helpers import REPO_ROOT, ToyRegressionData, ToyRegressor, logged_errors
from mmengine.config import Config, DictAction
from mmengine.registry import DATASETS, MODELS

SPEC = importlib.util.spec_from_file_location(
    'train_tool', osp.join(REPO_ROOT, 'tools', 'train.py'))
tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tool)

DET = osp.join(REPO_ROOT, 'configs/demo/faster-rcnn_r18_fpn_demo-det.py')
AGVM_DET = osp.join(REPO_ROOT,
                    'configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py')
VIDEO = osp.join(REPO_ROOT, 'configs/demo/recognizer3d_r18_demo-video.py')

MODELS.register_module(name='ToolToyModel', module=ToyRegressor, force=True)
DATASETS.register_module(name='ToolToyData', module=ToyRegressionData,
                         force=True)
TOY = """
default_scope = 'mmdet'
model = dict(type='ToolToyModel')
train_dataloader = dict(
    dataset=dict(type='ToolToyData'), batch_size=2, num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='pseudo_collate'))
train_cfg = dict(by_epoch=True, max_epochs=1)
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1))
default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
"""


@pytest.fixture(autouse=True)
def keep_sys_argv(monkeypatch):
    """The tool sets ``sys.argv`` for the toolbox's parser."""
    monkeypatch.setattr(sys, 'argv', list(sys.argv))


def _args(**kwargs):
    return argparse.Namespace(**dict(dict(launcher='none'), **kwargs))


def _merged(cfg, options):
    """``cfg`` with ``--cfg-options`` pairs applied as the toolboxes do."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    cfg.merge_from_dict(parser.parse_args(['--cfg-options',
                                           *options]).cfg_options)
    return cfg


def test_the_config_is_the_first_config_file_argument():
    assert tool.config_argument(
        ['--local-rank=0', 'a.py', 'w.pth', '--cfg-options', 'x=b.py']) == (
            'a.py')
    assert tool.config_argument(['--work-dir', 'out', 'c.yaml']) == 'c.yaml'
    assert tool.config_argument(['--resume', 'w.pth']) is None


@pytest.mark.parametrize('scope', ['mmdet', 'mmaction', 'mmseg'])
@pytest.mark.parametrize('name', ['train', 'test'])
def test_each_toolbox_drives_its_own_tool(scope, name):
    path = tool.toolbox_tool(Config(dict(default_scope=scope)), name)
    assert path.endswith(osp.join(scope, '.mim', 'tools', f'{name}.py'))
    assert osp.isfile(path)


@pytest.mark.parametrize('scope', [None, 'mmext', 'no_such_toolbox'])
def test_a_scope_without_a_tool_is_named(scope):
    with pytest.raises(SystemExit, match=f'default_scope={scope!r}'):
        tool.toolbox_tool(Config(dict(default_scope=scope)), 'train')


def test_mmext_runner_unless_the_config_names_one():
    assert tool.mmext_options(_args(), Config()) == [
        'runner_type=mmext.Runner']
    assert tool.mmext_options(_args(), Config(dict(runner_type='Runner'))) == []


def test_amp_selects_agvms_variant_and_leaves_others_to_the_toolbox():
    cfg = Config.fromfile(AGVM_DET)
    assert tool.mmext_options(_args(amp=True), cfg) == [
        'optim_wrapper.type=mmext.AGVMAmpOptimWrapper',
        'optim_wrapper.loss_scale=dynamic']
    cfg.optim_wrapper.loss_scale = 512.
    assert tool.mmext_options(_args(amp=True), cfg)[1:] == []
    assert tool.mmext_options(_args(amp=True), Config.fromfile(DET)) == [
        'runner_type=mmext.Runner']


def test_amp_reaches_the_toolbox_as_the_agvm_variant():
    """mmdet's --amp would set AmpOptimWrapper: it is dropped, and the
    parsed options carry mmext's variant."""
    module, argv, _ = tool.toolbox_arguments(
        'train', [AGVM_DET, '--amp', '--cfg-options', 'a=1'])
    sys.argv = [module.__file__, *argv]
    args = module.parse_args()
    assert args.amp is False
    assert args.cfg_options == {
        'a': 1, 'optim_wrapper.type': 'mmext.AGVMAmpOptimWrapper',
        'optim_wrapper.loss_scale': 'dynamic'}


DEFAULT_DDP = dict(type='MMDistributedDataParallel', broadcast_buffers=False,
                   find_unused_parameters=True, device_ids=None)


@pytest.mark.parametrize('existing, expected', [
    (dict(), DEFAULT_DDP),
    (dict(model_wrapper_cfg=None), DEFAULT_DDP),
    (dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel',
                                 broadcast_buffers=True)),
     dict(type='MMDistributedDataParallel', broadcast_buffers=True,
          device_ids=None)),
])
def test_cpu_launch_wraps_the_model_without_device_ids(monkeypatch, existing,
                                                       expected):
    """mmengine's wrap_model would give DDP the local GPU's index."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    cfg = Config(dict(runner_type='mmext.Runner', find_unused_parameters=True,
                      **existing))
    options = tool.mmext_options(_args(launcher='pytorch'), cfg)
    assert _merged(cfg, options).model_wrapper_cfg == expected


@pytest.mark.parametrize('launcher', ['slurm', 'mpi'])
def test_cpu_launch_other_than_torchrun_is_refused(monkeypatch, launcher):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(SystemExit, match=f'--launcher {launcher} needs CUDA'):
        tool.start_cpu_process_group(launcher)


def test_help_is_the_toolboxs(capsys):
    with pytest.raises(SystemExit) as done:
        tool.main('train', [VIDEO, '-h'])
    assert done.value.code == 0
    assert '--no-validate' in capsys.readouterr().out  # mmaction2's option
    with pytest.raises(SystemExit):
        tool.main('train', [DET, '-h'])
    assert '--no-validate' not in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        tool.main('test', [DET, 'w.pth', '--no-validate'])
    assert done.value.code == 2
    assert 'unrecognized arguments: --no-validate' in capsys.readouterr().err


def test_without_a_config_the_usage(capsys):
    with pytest.raises(SystemExit) as done:
        tool.main('train', ['-h'])
    assert done.value.code == 0
    assert 'usage: tools/train.py CONFIG' in capsys.readouterr().err


def test_train_and_resume_through_the_toolbox(tmp_path, capsys):
    """mmdet's train.py on a toy config: --work-dir, --cfg-options and
    --resume as mmdet applies them, on mmext.Runner; the tool prints where
    the run wrote."""
    config = tmp_path / 'toy.py'
    config.write_text(TOY)
    work_dir = tmp_path / 'work'

    def train(*argv):
        tool.main('train', [str(config), '--work-dir', str(work_dir), *argv,
                            '--cfg-options',
                            f'experiment_name={uuid.uuid4().hex}',
                            'optim_wrapper.optimizer.lr=0.05'])

    train('--cfg-options', 'train_cfg.max_epochs=2')
    printed = dict(line.split(maxsplit=1) for line in
                   capsys.readouterr().out.splitlines()[-4:])
    assert printed['work_dir'] == str(work_dir)
    assert osp.isfile(printed['log']) and printed['log'].startswith(
        str(work_dir)) and printed['log'].endswith('.log')
    assert printed['metrics'] == osp.join(osp.dirname(printed['log']),
                                          'vis_data', 'scalars.json')
    assert osp.isfile(printed['metrics'])
    assert printed['checkpoint'] == str(work_dir / 'epoch_2.pth')
    dumped = Config.fromfile(str(work_dir / 'toy.py'))
    assert (dumped.runner_type, dumped.optim_wrapper.optimizer.lr) == (
        'mmext.Runner', 0.05)
    first = torch.load(work_dir / 'epoch_2.pth', weights_only=False)
    assert (first['meta']['epoch'], first['meta']['iter']) == (2, 16)
    train('--resume', '--cfg-options', 'train_cfg.max_epochs=3')
    resumed = torch.load(work_dir / 'epoch_3.pth', weights_only=False)
    assert (resumed['meta']['epoch'], resumed['meta']['iter']) == (3, 24)


def _toy_run(tmp_path, *argv):
    config = tmp_path / 'toy.py'
    config.write_text(TOY)
    tool.main('train', [str(config), '--work-dir', str(tmp_path / 'work'),
                        *argv, '--cfg-options',
                        f'experiment_name={uuid.uuid4().hex}'])


def test_a_refusal_reaches_the_log_file_once(tmp_path):
    """Refused by mmext (mmext.log.refuse), seen again by the tool."""
    with pytest.raises(ValueError, match='base_batch_size=0'):
        _toy_run(tmp_path, '--cfg-options', 'auto_scale_lr.enable=True',
                 'auto_scale_lr.base_batch_size=0')
    [line] = logged_errors(tmp_path / 'work')
    assert 'ValueError: auto_scale_lr.base_batch_size=0' in line


def test_any_failure_of_a_run_reaches_its_log_file(tmp_path):
    """Not raised by mmext: the tool writes it (mmdet's --resume of a
    checkpoint that does not exist)."""
    missing = str(tmp_path / 'no_such.pth')
    with pytest.raises(FileNotFoundError):
        _toy_run(tmp_path, '--resume', missing)
    [line] = logged_errors(tmp_path / 'work')
    assert f'FileNotFoundError: {missing} can not be found' in line


def test_a_test_run_prints_its_log_and_metrics(tmp_path):
    """``<work_dir>/<timestamp>/<timestamp>.json`` holds a test run's
    metrics; a checkpoint of an earlier training is not this run's."""
    from mmengine.logging import MMLogger
    log_dir = tmp_path / 'work' / '20261203_000000'
    log_dir.mkdir(parents=True)
    (log_dir / '20261203_000000.json').write_text('{}')
    (tmp_path / 'work' / 'last_checkpoint').write_text('epoch_1.pth')
    logger = MMLogger.get_instance(
        f'test_run_files_{uuid.uuid4().hex}',
        log_file=str(log_dir / '20261203_000000.log'))
    assert tool.run_files(logger, 'test') == [
        ('work_dir', str(tmp_path / 'work')),
        ('log', str(log_dir / '20261203_000000.log')),
        ('metrics', str(log_dir / '20261203_000000.json'))]
    assert tool.run_files(logger, 'train')[2:] == [
        ('checkpoint', 'epoch_1.pth')]  # no vis_data/scalars.json


def test_show_dir_on_mmaction2_is_the_toolboxs_check():
    """mmext's own --show-dir refusal (it said mmaction2's default runtime
    had a visualizer) left with the test half of the CLI: mmaction2's
    test.py asks for the hook its default runtime lacks."""
    with pytest.raises(AssertionError, match='VisualizationHook is not set'):
        tool.main('test', [VIDEO, 'w.pth', '--show-dir', 'shown'])


@pytest.mark.parametrize('config,options,error,meant', [
    ("custom_hooks = [dict(type='MultigridHook')]", [], KeyError,
     "did you mean 'mmext.MultigridHook'?"),
    ('', ['optim_wrapper.type=AGVMOptimWrapper'], KeyError,
     "did you mean 'mmext.AGVMOptimWrapper'?"),
    ('', ['optim_wrapper.constructor=AGVMOptimWrapperConstructr'], KeyError,
     "did you mean 'mmext.AGVMOptimWrapperConstructor'?"),
    ("custom_hooks = [dict(type='mmext.MultigridHook', epoch_factr=1.5)]",
     [], TypeError, "'epoch_factr': did you mean 'epoch_factor'?"),
])
def test_a_misspelt_mmext_type_or_option_names_the_one_meant(
        tmp_path, config, options, error, meant):
    config_file = tmp_path / 'typo.py'
    config_file.write_text(f'{TOY}\n{config}\n')
    with pytest.raises(error, match=re.escape(meant)):
        tool.main('train', [str(config_file), '--work-dir',
                            str(tmp_path / 'work'), '--cfg-options',
                            f'experiment_name={uuid.uuid4().hex}', *options])
