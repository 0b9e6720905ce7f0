"""tools/analysis/multigrid_schedule.py prints what the hook trains."""
import json
import os.path as osp
import subprocess
import sys

import pytest

import mmext  # noqa: F401

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CFG = osp.join(ROOT, 'configs', 'multigrid',
               'slowfast_r50_multigrid_8xb8-8x8x1-steplr-239e_'
               'kinetics400-rgb.py')
TINY = osp.join(ROOT, 'tests', 'multigrid', 'tiny_mg.py')
I3D = osp.join(ROOT, 'configs', 'multigrid',
               'i3d_r50_multigrid_8xb8-32x2x1-100e_kinetics400-rgb.py')
I3D_MILESTONES = (
    'param_scheduler MultiStepLR milestones [40, 80] lie at or after the '
    'end of training (2 recipe epochs): those LR steps never happen. Remove '
    'them or train longer.')


def _run(config, *args):
    return subprocess.run(
        [sys.executable, 'tools/analysis/multigrid_schedule.py', config,
         *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)


def _tiny_runner(work_dir, **options):
    """The tiny recipe's runner, built as training does, up to the hooks'
    before_run (what Runner.train() builds first)."""
    from bench_utils import build_runner, load_run_config
    cfg = load_run_config(TINY, dict(options, experiment_name=osp.basename(
        str(work_dir))), str(work_dir))
    runner = build_runner(cfg)
    runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
    runner.param_schedulers = runner.build_param_scheduler(
        runner.param_schedulers)
    return runner


def test_reference_table_json_and_text():
    out = json.loads(_run(CFG, '--json', '--no-model-check',
                          '--world-size', '8').stdout)
    stages = out['stages']
    assert [s['end_epoch'] for s in stages][-3:] == [329, 343, 358]
    assert (stages[0]['batch_size'], stages[0]['clip_len'],
            stages[0]['crop_size']) == (64, 8, 158)
    # The recipe's 8 GPUs x 8 clips: the effective batch of the first stage.
    assert stages[0]['effective_batch_size'] == 512
    assert out['base']['effective_batch_size'] == 64
    assert out['exact'] is False and out['iters'] is None
    assert round(out['iteration_saving'], 2) == 3.42
    # Without the model: the B T S^2 estimate.
    assert round(out['flop_saving'], 2) == 3.43
    assert out['flops_counted'] is False and out['clip_gflops'] is None
    text = _run(CFG, '--no-model-check').stdout
    assert '3.42x fewer iterations' in text and 'estimate' in text
    assert 'FLOPs x0.291 of the recipe (3.43x fewer FLOPs, B*T*S^2 ' in text
    assert text.rstrip().endswith('; wall time: docs/en/benchmarks.md)')
    assert ('eff. batch = batch x world size 1 x accumulative_counts 1'
            in text)


def test_flop_saving_counted_on_the_model():
    """The model check counts each shape's forward FLOPs (meta device)."""
    out = json.loads(_run(CFG, '--json').stdout)
    assert out['flops_counted'] is True
    assert round(out['flop_saving'], 2) == 3.34
    assert len(out['clip_gflops']) == 8
    assert out['clip_gflops'][-1]['clip_len'] == 32
    assert round(out['clip_gflops'][-1]['gflops'], 1) == 100.6
    text = _run(CFG).stdout
    total = text.rstrip().splitlines()[-1]
    assert '-> 3.42x fewer iterations (estimate: ' in total
    assert 'x0.299 of the recipe (3.34x fewer FLOPs, counted on the' in total


def test_plot_is_written(tmp_path):
    out = tmp_path / 'schedule.png'
    proc = _run(CFG, '--no-model-check', '--plot', str(out))
    assert out.stat().st_size > 10000
    assert proc.stdout.rstrip().endswith(f'plot: {out}')


@pytest.mark.usefixtures('demo_data')
def test_exact_count_matches_the_hook(tmp_path):
    """The tool's exact count is what the hook trains (partial batches
    dropped), and differs from the estimate."""
    exact = json.loads(_run(TINY, '--dataset', '--json').stdout)
    estimate = json.loads(_run(TINY, '--json').stdout)
    runner = _tiny_runner(tmp_path)
    runner.call_hook('before_run')
    assert exact['exact'] is True
    assert exact['iters'] == runner.train_loop.max_iters
    per_epoch = exact['clips_per_process'] / 4  # train batch_size
    assert sum(s['estimated_iters'] for s in estimate['stages']) * \
        per_epoch > exact['iters']


def _tool(config, *args):
    return subprocess.run(
        [sys.executable, 'tools/analysis/multigrid_schedule.py', config,
         *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_tool_warns_like_the_plan():
    proc = _tool(I3D, '--json', '--no-model-check', '--cfg-options',
                 'train_cfg.max_epochs=2', 'custom_hooks.0.long_cycle=False')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)['warnings'] == [I3D_MILESTONES]


def test_tool_errors_exit_non_zero():
    proc = _tool(I3D, '--no-model-check', '--cfg-options',
                 'train_cfg.max_epochs=2')
    assert proc.returncode == 1
    assert proc.stderr.rstrip().endswith(I3D_MILESTONES)
    # The model is built and checked as the hook does: T/4 = 4 < 8.
    proc = _tool(I3D, '--cfg-options',
                 'train_dataloader.dataset.pipeline.1.clip_len=16')
    assert proc.returncode == 1
    assert proc.stderr.rstrip().splitlines()[-1].startswith(
        'error: ResNet3d needs T >= 8, got T=[4]')


@pytest.mark.usefixtures('demo_data')
def test_hook_runs_the_same_checks_as_the_tool(tmp_path):
    option = 'param_scheduler.0.end=5'
    proc = _tool(TINY, '--json', '--dataset', '--cfg-options', option)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tool = json.loads(proc.stdout)['warnings']
    assert tool[0].startswith('param_scheduler LinearLR ends at recipe '
                              'epoch 5,')
    assert 'after the end of training (4 recipe epochs)' in tool[0]
    # 64 clips per process: the short cycle's batch of 32 is half of them.
    assert tool[1].startswith('Batch 32 is 50% of 64 clips per process')
    # The tiny recipe's short cycle reaches S=28: a 1x1 final map.
    assert 'feature maps below 2x2' in tool[2]
    assert '(B, T, S) = (32, 8, 28): 1x1' in tool[2]
    assert len(tool) == 3
    runner = _tiny_runner(tmp_path, **{'param_scheduler.0.end': 5})
    with pytest.warns(UserWarning) as record:
        runner.call_hook('before_run')
    assert [str(w.message) for w in record
            if str(w.message) in tool] == tool


def _recipe(tmp_path, base, **model):
    """A config: an mmaction2 recipe with the default MultigridHook."""
    path = tmp_path / 'recipe.py'
    path.write_text(
        f"_base_ = 'mmaction::{base}'\n"
        f'model = {model!r}\n'
        "custom_hooks = [dict(type='mmext.MultigridHook', "
        'bn_base_size=None)]\n')
    return str(path)


def test_tool_refuses_a_model_that_cannot_take_the_shapes(tmp_path):
    """C3D (fixed fc6 input) exits 1 before any training."""
    config = _recipe(tmp_path, 'recognition/c3d/c3d_sports1m-pretrained_'
                     '8xb30-16x1x1-45e_ucf101-rgb.py',
                     backbone=dict(pretrained=None))
    proc = _tool(config)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith('error: The model refuses 7 of 8 shapes, e.g. ')
    assert '(B, T, S) = (480, 4, 56)' in last
    assert last.endswith('Fix: train without MultigridHook.')


def test_tool_accepts_timesformer_with_its_shape_adapters(tmp_path):
    """The TimeSformer recipe passed the old checks and died in the first
    iteration at ``x + self.pos_embed``; now every shape is tried and the
    position embeddings follow the shape."""
    config = _recipe(
        tmp_path, 'recognition/timesformer/timesformer_divST_8xb8-8x32x1-'
        '15e_kinetics400-rgb.py',
        backbone=dict(embed_dims=64, num_heads=2, num_transformer_layers=1,
                      pretrained=None),
        cls_head=dict(in_channels=64))
    proc = _tool(config, '--json')
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    [adapter] = out['shape_adapters']
    assert adapter.startswith('backbone (TimeSformer): pos_embed and ')
    assert {s['clip_len'] for s in out['stages']} == {2, 4, 8}


def _refusal(proc):
    """The error line of a refused run: exit 1, no traceback."""
    assert proc.returncode == 1, proc.stdout[-500:] + proc.stderr[-2000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-2000:]
    return proc.stderr.rstrip().splitlines()[-1]


def _wrapped(tmp_path, wrapper):
    """TINY with its train dataset inside a dataset wrapper."""
    path = tmp_path / f'{wrapper}.py'
    inner = "{{_base_.train_dataloader.dataset}}"
    field = ('datasets=[_ds, _ds]' if wrapper == 'ConcatDataset'
             else 'times=2, dataset=_ds')
    path.write_text(f"_base_ = '{TINY}'\n_ds = {inner}\n"
                    f'train_dataloader = dict(dataset=dict(_delete_=True, '
                    f"type='{wrapper}', {field}))\n")
    return str(path)


@pytest.mark.parametrize('wrapper, fix', [
    ('RepeatDataset', 'multiply max_epochs and milestones by its times.'),
    ('ConcatDataset', 'list the clips of all in one ann_file instead.')])
@pytest.mark.usefixtures('demo_data')
def test_tool_refuses_dataset_wrappers(tmp_path, wrapper, fix):
    """Each wrapper with what replaces it."""
    for args in ((), ('--dataset', )):
        assert _refusal(_tool(_wrapped(tmp_path, wrapper), *args)).endswith(
            f'train_dataloader.dataset, got a {wrapper}; {fix}')


def test_tool_refuses_configs_it_cannot_read(tmp_path):
    missing = str(tmp_path / 'missing.py')
    assert _refusal(_tool(missing)).startswith(
        f'error: cannot read the config {missing}: FileNotFoundError: ')
    broken = tmp_path / 'broken.py'
    broken.write_text('model = dict(\n')
    assert _refusal(_tool(str(broken))).startswith(
        f'error: cannot read the config {broken}: SyntaxError: ')
    plain = tmp_path / 'plain.py'
    plain.write_text(f"_base_ = '{TINY}'\ncustom_hooks = []\n")
    assert _refusal(_tool(str(plain), '--no-model-check')).startswith(
        'error: The config has no mmext.MultigridHook')
    unknown = _refusal(_tool(TINY, '--no-model-check', '--cfg-options',
                             'custom_hooks.0.no_such_option=1'))
    assert unknown.startswith('error: ') and 'TypeError: ' in unknown
    assert "unexpected option 'no_such_option'" in unknown


def test_tool_refuses_a_malformed_pipeline_and_bad_counts():
    index = _refusal(_tool(TINY, '--no-model-check', '--cfg-options',
                           'train_dataloader.dataset.pipeline.99.clip_len=3'))
    assert index.startswith(f'error: cannot read the config {TINY} with ')
    assert '--cfg-options: KeyError: "Index 99 exceeds the length' in index
    factors = _refusal(_tool(TINY, '--no-model-check', '--cfg-options',
                             'custom_hooks.0.long_cycle_factors=1'))
    assert factors.startswith('error: long_cycle_factors must be (t, s) ')
    assert _refusal(_tool(TINY, '--no-model-check', '--num-samples', '64',
                          '--world-size', '0')) == (
        'error: --world-size must be at least 1, got 0')
    assert _refusal(_tool(TINY, '--no-model-check', '--num-samples',
                          '0')) == (
        'error: --num-samples must be at least 1, got 0')


@pytest.mark.usefixtures('demo_data')  # the list exists: the type fails
def test_tool_refuses_a_dataset_or_model_it_cannot_build(tmp_path):
    dataset = _refusal(_tool(TINY, '--dataset', '--no-model-check',
                             '--cfg-options',
                             'train_dataloader.dataset.type=RawframeDataset'))
    assert dataset.startswith('error: cannot build the train dataset ')
    assert '(train_dataloader.dataset, type RawframeDataset) ' in dataset
    assert ' to count its clips: ' in dataset
    assert dataset.endswith('give the count with --num-samples N.')
    model = _refusal(_tool(TINY, '--cfg-options',
                           'model.backbone.type=NoSuchBackbone'))
    assert model.startswith('error: cannot build the model (model.type ')
    assert 'Recognizer3D) for the checks: KeyError: ' in model
    assert model.endswith('skip the model checks with --no-model-check.')
    plot = _refusal(_tool(CFG, '--no-model-check', '--plot',
                          str(tmp_path / 'no' / 'such' / 'dir.png')))
    assert plot.startswith('error: cannot draw the plot into ')
    assert f"{tmp_path / 'no' / 'such'}/dir.png: FileNotFoundError" in plot


def test_config_inheriting_through_the_mmext_prefix(tmp_path):
    """mmengine adds ``_scope_`` to the hook inherited through ``mmext::``;
    the tool reads the config as training does."""
    child = tmp_path / 'child.py'
    child.write_text(
        "_base_ = 'mmext::multigrid/slowfast_r50_multigrid_8xb8-8x8x1-"
        "steplr-239e_kinetics400-rgb.py'\n")
    out = json.loads(_run(str(child), '--json', '--no-model-check').stdout)
    assert [s['end_epoch'] for s in out['stages']][-3:] == [329, 343, 358]


def test_bad_lr_steps_give_the_real_error_only(tmp_path):
    proc = _tool(I3D, '--no-model-check', '--cfg-options',
                 'custom_hooks.0.lr_steps=[3]')
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith('error: lr_steps must be ')
    assert last.endswith(', got [3]')


def test_dropped_long_cycle_shapes_warn(tmp_path):
    """2 recipe epochs with an LR step at 1: LR stage 0 keeps 2 of the 4
    default long-cycle shapes."""
    short = tmp_path / 'short.py'
    short.write_text(
        f'_base_ = {I3D!r}\n'
        'train_cfg = dict(max_epochs=2)\n'
        'param_scheduler = [dict(type="MultiStepLR", by_epoch=True, begin=0,'
        ' end=2, milestones=[1])]\n')
    proc = _tool(str(short), '--json', '--no-model-check')
    assert proc.returncode == 0, proc.stderr[-2000:]
    [warning] = json.loads(proc.stdout)['warnings']
    assert warning.startswith('Shapes (B, T, S) trained for 0 epochs: ')
    assert 'LR stage 0 [(32, 16, 158), (8, 32, 224)];' in warning


def test_the_readmes_subset_of_the_fight_clips(shared_data, tmp_path):
    """The README's way to train on a subset keeps both classes and is
    large enough for the fight recipe's multigrid schedule."""
    with open(osp.join(ROOT, 'README.md')) as f:
        blocks = f.read().split('```python\n')
    tip = next(b.split('```')[0] for b in blocks if 'indices=list(' in b)
    config = tmp_path / 'fight_subset.py'
    config.write_text(tip.replace("_base_ = '", f"_base_ = '{ROOT}/"))
    out = json.loads(_run(str(config), '--dataset', '--json',
                          '--no-model-check').stdout)
    assert out['exact'] and out['clips_per_process'] == 48
    from mmengine.config import Config
    indices = Config.fromfile(str(config)).train_dataloader.dataset.indices
    with open(osp.join(shared_data, 'fight', 'train.txt')) as f:
        labels = [line.split()[-1] for line in f]
    assert {labels[i] for i in indices} == {'0', '1'}
