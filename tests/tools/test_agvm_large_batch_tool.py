"""tools/benchmark/agvm_large_batch.py: the three arms' recipes, and a tiny
end-to-end run."""
import json
import sys

import pytest
from helpers import run_tool

from tools.benchmark.agvm_large_batch import make_config, parse_args


def arm_config(arm, *argv):
    args = parse_args(['--k', '4', '--batch', '2', '--lr', '0.01',
                       '--train-images', '20', '--epochs', '8', *argv])
    return make_config(args, arm, seed=3, data_root='root/')


def test_arms_share_epochs_schedule_and_seed_and_scale_the_lr():
    small, large, agvm = (arm_config(arm) for arm in
                          ('small', 'large', 'agvm'))
    for cfg in (small, large, agvm):
        assert cfg.train_cfg.max_epochs == 8
        assert cfg.train_dataloader.batch_size == 2
        assert cfg.randomness.seed == 3
        assert cfg.train_dataloader.dataset.data_root == 'root/'
        assert cfg.val_evaluator.ann_file == 'root/annotations/val.json'
        # Warm-up over two epochs of images (2 x 20 / 2 micro-batches), LR
        # / 10 for the last quarter of the epochs.
        warmup, decay = cfg.param_scheduler
        assert (warmup.end, warmup.by_epoch) == (20, False)
        assert decay.milestones == [6]
        assert cfg.optim_wrapper.clip_grad == dict(max_norm=10.0)
    assert small.optim_wrapper.optimizer.lr == pytest.approx(0.01)
    assert small.optim_wrapper.accumulative_counts == 1
    assert small.optim_wrapper.type == 'OptimWrapper'
    for cfg in (large, agvm):
        assert cfg.optim_wrapper.optimizer.lr == pytest.approx(0.04)
        assert cfg.optim_wrapper.accumulative_counts == 4
    assert large.optim_wrapper.type == 'OptimWrapper'
    assert agvm.optim_wrapper.type == 'mmext.AGVMOptimWrapper'
    assert agvm.optim_wrapper.constructor == (
        'mmext.AGVMOptimWrapperConstructor')
    assert (agvm.optim_wrapper.start_iter,
            agvm.optim_wrapper.update_interval) == (20, 1)


def test_warmup_epochs_set_the_warmup_and_agvm_start_in_micro_batches():
    for arm in ('small', 'agvm'):
        cfg = arm_config(arm, '--warmup-epochs', '3')
        assert cfg.param_scheduler[0].end == 30
    assert cfg.optim_wrapper.start_iter == 30


def test_light_detector_by_default():
    light = arm_config('small').model
    assert light.neck.out_channels == 64
    assert light.roi_head.bbox_head.fc_out_channels == 256
    assert light.train_cfg.rcnn.sampler.num == 128
    full = arm_config('small', '--full-size').model
    assert full.neck.out_channels == 256
    assert full.roi_head.bbox_head.fc_out_channels == 1024


def test_options_are_validated(capsys):
    with pytest.raises(SystemExit):
        parse_args(['--k', '3'])
    assert '--k must be even' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(['--epochs', '4', '--warmup-epochs', '4'])
    assert ('--warmup-epochs must be >= 1 and below --epochs (4), got 4'
            in capsys.readouterr().err)
    with pytest.raises(SystemExit):
        parse_args(['--jobs', '0'])
    assert '--jobs must be >= 1, got 0' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(['--batch', '0'])
    assert '--batch must be >= 1, got 0' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(['--train-images', '6', '--k', '2', '--batch', '4'])
    assert ('--train-images (6) must hold at least one large batch of --k '
            'x --batch = 8 images' in capsys.readouterr().err)
    assert 'clip_grad' not in arm_config('large', '--clip-norm', '0'
                                         ).optim_wrapper


@pytest.mark.slow
def test_tiny_benchmark_runs_end_to_end(tmp_path):
    proc = run_tool([
        sys.executable, 'tools/benchmark/agvm_large_batch.py', '--epochs',
        '2', '--k', '2', '--batch', '2', '--train-images', '8',
        '--val-images', '4', '--seeds', '0', '--warmup-epochs', '1',
        '--jobs', '2', '--work-dir', str(tmp_path), '--json'
    ])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    summary = result['summary']
    assert set(summary) == {'small', 'large', 'agvm'}
    assert summary['small']['steps'] == 8  # 2 epochs x 4 micro-batches
    assert summary['large']['steps'] == summary['agvm']['steps'] == 4
    for arm in summary.values():
        assert len(arm['loss_curve']) == 2
        assert 0 <= arm['bbox_mAP'][0] <= 1
    factors = [r['agvm_factors'] for r in result['runs'] if r['arm'] == 'agvm']
    assert set(factors[0]) == {'backbone', 'neck', 'rpn_head', 'roi_head'}
