"""mmext.cli: tools/train.py and tools/test.py options, their effect on the
config.

The union of mmdet 3.3, mmaction2 1.2 and mmseg 1.2 tools' options, each with
its toolbox's meaning (``mmext.cli.config_for_train``/``config_for_test``).
"""
import os
import os.path as osp
import re

import pytest
import torch

from mmengine.config import Config

from mmext.cli import (build_runner, check_mmext_names, config_for_test,
                       config_for_train, parser_for_test, parser_for_train)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DET = osp.join(ROOT, 'configs/demo/faster-rcnn_r18_fpn_demo-det.py')
AGVM_DET = osp.join(ROOT, 'configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py')
VIDEO = osp.join(ROOT, 'configs/demo/recognizer3d_r18_demo-video.py')


@pytest.fixture(scope='module')
def seg(tmp_path_factory):
    """The stock mmseg Semantic FPN Cityscapes recipe (has tta_pipeline and
    SegVisualizationHook)."""
    path = tmp_path_factory.mktemp('cfg') / 'seg.py'
    path.write_text(
        "_base_ = 'mmseg::sem_fpn/fpn_r50_4xb2-80k_cityscapes-512x1024.py'\n")
    return str(path)


def _train(*argv):
    return config_for_train(parser_for_train().parse_args([*argv]))


def _test(config, *argv):
    return config_for_test(
        parser_for_test().parse_args([config, 'w.pth', *argv]))


# ------------------------------------------------------------------ train
def test_train_defaults_change_nothing():
    cfg = _train(DET)
    assert cfg.work_dir == './work_dirs/faster-rcnn_r18_fpn_demo-det'
    assert cfg.launcher == 'none'
    assert not cfg.get('resume', False)
    assert cfg.auto_scale_lr == dict(enable=False, base_batch_size=4)
    assert cfg.val_cfg is not None and cfg.randomness == dict(seed=0)


def test_work_dir_cfg_options_launcher():
    cfg = _train(DET, '--work-dir', 'out', '--launcher', 'slurm',
                 '--cfg-options', 'train_dataloader.batch_size=3')
    assert (cfg.work_dir, cfg.launcher) == ('out', 'slurm')
    assert cfg.train_dataloader.batch_size == 3


def test_local_rank_is_exported(monkeypatch):
    monkeypatch.delenv('LOCAL_RANK', raising=False)
    args = parser_for_train().parse_args([DET, '--local-rank', '3'])
    assert args.local_rank == 3 and os.environ['LOCAL_RANK'] == '3'
    monkeypatch.setenv('LOCAL_RANK', '1')  # torchrun's value wins
    parser_for_train().parse_args([DET, '--local_rank', '0'])
    assert os.environ['LOCAL_RANK'] == '1'


@pytest.mark.parametrize('argv, resume, load_from', [
    (['--resume'], True, None),
    (['--resume', 'w/epoch_3.pth'], True, 'w/epoch_3.pth'),
])
def test_resume(argv, resume, load_from):
    cfg = _train(DET, *argv)
    assert (cfg.resume, cfg.load_from) == (resume, load_from)


def test_auto_scale_lr():
    assert _train(DET, '--auto-scale-lr').auto_scale_lr == dict(
        enable=True, base_batch_size=4)
    with pytest.raises(ValueError, match=re.escape(
            '--auto-scale-lr needs auto_scale_lr = dict(base_batch_size=N) '
            'in the config')):
        _train(DET, '--auto-scale-lr', '--cfg-options',
               'auto_scale_lr=None')


def test_no_validate():
    cfg = _train(DET, '--no-validate')
    assert (cfg.val_cfg, cfg.val_dataloader, cfg.val_evaluator) == (
        None, None, None)


def test_randomness_options_update_the_config():
    cfg = _train(VIDEO, '--seed', '7', '--diff-rank-seed',
                 '--deterministic')
    assert cfg.randomness == dict(seed=7, diff_rank_seed=True,
                                  deterministic=True)
    assert _train(VIDEO, '--deterministic').randomness == dict(
        seed=0, deterministic=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA present')
def test_amp_needs_cuda():
    with pytest.raises(RuntimeError, match='--amp needs a CUDA device'):
        _train(AGVM_DET, '--amp')


def test_amp_switches_agvm_to_its_amp_variant(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    cfg = _train(AGVM_DET, '--amp')
    assert cfg.optim_wrapper.type == 'mmext.AGVMAmpOptimWrapper'
    assert cfg.optim_wrapper.loss_scale == 'dynamic'


# ------------------------------------------------------------------- test
def test_test_defaults():
    cfg = _test(DET)
    assert cfg.load_from == 'w.pth'
    assert cfg.test_evaluator.type == 'CocoMetric'
    assert cfg.model.type == 'FasterRCNN'


@pytest.mark.parametrize('option', ['--out', '--dump'])
def test_pickle_dump_mmdet(option):
    cfg = _test(DET, option, 'r.pkl')
    assert [m['type'] for m in cfg.test_evaluator] == ['CocoMetric',
                                                       'DumpDetResults']
    assert cfg.test_evaluator[1].out_file_path == 'r.pkl'


@pytest.mark.parametrize('option', ['--out', '--dump'])
def test_pickle_dump_mmaction(option):
    cfg = _test(VIDEO, option, 'r.pkl')
    assert cfg.test_evaluator[1] == dict(type='DumpResults',
                                         out_file_path='r.pkl')


def test_out_is_a_directory_for_mmseg(seg):
    cfg = _test(seg, '--out', 'preds', '--dump', 'r.pkl')
    assert cfg.test_evaluator[0].output_dir == 'preds'
    assert cfg.test_evaluator[0].keep_results is True
    assert cfg.test_evaluator[1] == dict(type='DumpResults',
                                         out_file_path='r.pkl')


def test_dump_must_be_a_pickle():
    with pytest.raises(ValueError, match='--dump r.json: the dump file '
                       'must be a .pkl file'):
        _test(DET, '--dump', 'r.json')


def test_show_and_show_dir_mmdet():
    hook = _test(DET, '--show', '--wait-time', '0.5',
                 '--show-dir', 'vis').default_hooks.visualization
    assert (hook.draw, hook.show, hook.wait_time, hook.test_out_dir) == (
        True, True, 0.5, 'vis')
    assert 'interval' not in hook
    assert _test(DET, '--show-dir', 'vis', '--interval',
                 '5').default_hooks.visualization.interval == 5


def test_show_dir_mmseg_goes_to_the_visualizer(seg):
    cfg = _test(seg, '--show-dir', 'vis')
    assert cfg.default_hooks.visualization.draw is True
    assert 'show' not in cfg.default_hooks.visualization
    assert cfg.visualizer.save_dir == 'vis'


def test_show_mmaction():
    cfg = _test(VIDEO, '--show', '--show-dir', 'vis', '--cfg-options',
                'default_hooks.visualization.type=VisualizationHook')
    hook = cfg.default_hooks.visualization
    assert (hook.enable, hook.show, hook.wait_time, hook.out_dir,
            hook.interval) == (True, True, 2., 'vis', 1)


def test_show_without_visualization_hook():
    with pytest.raises(ValueError, match='--show/--show-dir need a '
                       'VisualizationHook'):
        _test(VIDEO, '--show')


def test_tta_mmdet_defaults():
    cfg = _test(DET, '--tta')
    assert cfg.model.type == 'DetTTAModel'
    assert cfg.model.module.type == 'FasterRCNN'
    pipeline = cfg.test_dataloader.dataset.pipeline
    assert pipeline[-1].type == 'TestTimeAug'
    assert [t['prob'] for t in pipeline[-1].transforms[0]] == [1., 0.]


def test_tta_mmseg(seg):
    cfg = _test(seg, '--tta')
    assert cfg.model.type == 'SegTTAModel'
    assert cfg.model.module.type == 'EncoderDecoder'
    assert cfg.test_dataloader.dataset.pipeline == cfg.tta_pipeline
    with pytest.raises(ValueError, match=re.escape(
            "--tta needs ['tta_pipeline'] in the config")):
        _test(osp.join(ROOT, 'configs/agvm/fpn_r18_agvm_camvid-cpu.py'),
              '--tta')


def test_tta_mmaction_is_refused_with_the_reason():
    with pytest.raises(ValueError, match='--tta: mmaction2 has no TTA '
                       'model; a recognizer tests several views by its '
                       'test_pipeline'):
        _test(VIDEO, '--tta')


def test_tools_accept_every_toolbox_option():
    """The union of the toolboxes' options, read from their installed
    tools (``.mim/tools``), parses here."""
    import importlib
    ours = {'train': parser_for_train(), 'test': parser_for_test()}
    union = set()
    for package in ('mmdet', 'mmaction', 'mmseg'):
        tools = osp.join(
            osp.dirname(importlib.import_module(package).__file__), '.mim',
            'tools')
        for name, parser in ours.items():
            with open(osp.join(tools, f'{name}.py')) as f:
                theirs = set(re.findall(r"""['"](--[a-z][a-z_-]+)['"]""",
                                        f.read()))
            known = {o for a in parser._actions for o in a.option_strings}
            assert theirs <= known, (package, name, theirs - known)
            union |= theirs
    assert {'--auto-scale-lr', '--no-validate', '--dump', '--out', '--tta',
            '--show-dir', '--diff-rank-seed'} <= union


@pytest.mark.parametrize('key, value, fragment', [
    ('custom_hooks', [dict(type='MultigridHook')],
     "custom_hooks[0].type='MultigridHook' is an mmext class: write "
     "'mmext.MultigridHook'"),
    ('optim_wrapper', dict(type='mmext.AGVMOptimWrapper',
                           constructor='AGVMOptimWrapperConstructor'),
     "optim_wrapper.constructor='AGVMOptimWrapperConstructor' is an mmext "
     "class: write 'mmext.AGVMOptimWrapperConstructor'"),
    ('param_scheduler', [dict(type='ExpWarmupLR', end=5)],
     "param_scheduler='ExpWarmupLR' is an mmext class: write "
     "'mmext.ExpWarmupLR'"),
])
def test_an_mmext_name_without_its_prefix_is_named(key, value, fragment):
    cfg = Config.fromfile(AGVM_DET)
    cfg[key] = value
    with pytest.raises(ValueError, match=re.escape(fragment)):
        check_mmext_names(cfg)


def test_names_of_the_toolbox_scope_pass():
    """'Runner' is mmengine's too; the toolboxes' own hooks and mmext's
    prefixed names need nothing."""
    cfg = Config.fromfile(AGVM_DET)
    cfg.runner_type = 'Runner'
    cfg.custom_hooks = [dict(type='EMAHook'), dict(type='mmext.NaNGuardHook')]
    check_mmext_names(cfg)


def test_a_custom_hooks_override_that_drops_a_base_hook_warns(tmp_path):
    """On stderr and in the run's log file (the runner's logger exists)."""
    child = tmp_path / 'child.py'
    child.write_text(
        f"_base_ = '{osp.join(ROOT, 'configs/demo/recognizer3d_r18_multigrid_demo-video.py')}'\n"  # noqa: E501
        "custom_hooks = [dict(type='mmext.NaNGuardHook')]\n")
    message = ('child.py sets custom_hooks, which replaces the list of its '
               '_base_ recognizer3d_r18_multigrid_demo-video.py: '
               'mmext.MultigridHook is dropped.')
    with pytest.warns(UserWarning, match=re.escape(message)):
        runner = build_runner(
            _train(str(child), '--work-dir', str(tmp_path / 'work')))
    with open(osp.join(runner.log_dir, f'{runner.timestamp}.log')) as f:
        assert message in f.read()
    child.write_text(child.read_text().replace(
        "[dict(type='mmext.NaNGuardHook')]",
        "[dict(type='mmext.NaNGuardHook'), dict(type='mmext.MultigridHook')]"))
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        build_runner(_train(str(child), '--work-dir', str(tmp_path / 'w2')))
    assert not [w for w in caught if 'is dropped' in str(w.message)]
