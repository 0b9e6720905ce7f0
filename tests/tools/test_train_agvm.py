"""Train the AGVM demo config for a few iterations through tools/train.py."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from helpers import run_tool

from bench_utils import find_free_port

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEMO = osp.join(ROOT, 'configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py')

SHORT_RUN = """
_base_ = '{base}'
data_root = '{data_root}/det/'
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=4,
                 val_interval=1000)
val_cfg = None
val_dataloader = None
val_evaluator = None
test_cfg = None
test_dataloader = None
test_evaluator = None
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
optim_wrapper = dict(optimizer=dict(lr=0.02),
                     start_iter=0, update_interval=1, ema_momentum=0.5,
                     clip_grad=dict(max_norm=10.0), clip_grad_window=(0, 2))
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval=4))
log_processor = dict(by_epoch=False, window_size=1)
"""


def _train(tmp_path, demo_data, command, extra_args=()):
    """Run a shortened demo AGVM config; return its scalars.json records."""
    config = tmp_path / 'short.py'
    config.write_text(SHORT_RUN.format(base=DEMO, data_root=demo_data))
    work_dir = tmp_path / 'work'
    port = str(find_free_port())
    subprocess.run(
        command + [str(config), *extra_args, '--work-dir', str(work_dir)],
        cwd=ROOT, check=True, timeout=400,
        env=dict(os.environ, PYTHONPATH=ROOT, PORT=port))
    scalars = sorted(work_dir.glob('*/vis_data/scalars.json'))
    assert scalars, list(work_dir.iterdir())
    return work_dir, [json.loads(line) for line in scalars[-1].read_text()
                      .splitlines()]


def test_demo_config_logs_agvm_scalars(tmp_path, demo_data):
    work_dir, records = _train(
        tmp_path, demo_data,
        [sys.executable, osp.join(ROOT, 'tools', 'train.py')])
    modules = ['backbone', 'neck', 'rpn_head', 'roi_head']
    # The first optimizer step ends at iteration 2 (2 micro-batches).
    logged = [r for r in records if 'agvm_s/backbone' not in r]
    assert 'agvm_mu/backbone' not in logged[0]
    for record in logged[1:]:
        for name in modules:
            assert f'agvm_mu/{name}' in record
            assert 0.5**0.5 - 1e-6 <= record[f'agvm_mu/{name}'] <= 10**0.5
    last = logged[-1]
    # 2 steps of 2 micro-batches, each re-estimating with momentum 0.5:
    # the factors must have left 1.
    assert any(abs(last[f'agvm_mu/{m}'] - 1) > 1e-4 for m in modules[1:])
    # Each re-estimate is written once, at its own iteration (2 and 4).
    estimates = [r for r in records if 'agvm_s/backbone' in r]
    assert [r['step'] for r in estimates] == [2, 4]
    assert all(0 <= r[f'agvm_d/{m}'] <= 2 for r in estimates for m in modules)
    assert [estimates[-1][f'agvm_s/{m}'] for m in modules] == pytest.approx(
        [last[f'agvm_mu/{m}'] for m in modules])
    # The checkpoint holds the factors the log shows (restored by --resume).
    ckpt = torch.load(work_dir / 'iter_4.pth', map_location='cpu',
                      weights_only=False)
    agvm = ckpt['optimizer']['agvm']
    assert agvm['module_names'] == modules
    assert agvm['ema']['factors'].tolist() == pytest.approx(
        [last[f'agvm_mu/{m}'] for m in modules], rel=1e-5)
    # Base LR in the log is the scheduled one, not the modulated one.
    assert last['lr'] == pytest.approx(0.02)


@pytest.mark.slow
def test_dist_train_two_processes(tmp_path, demo_data):
    """tools/dist_train.sh with 2 gloo processes: halves are the ranks."""
    _, records = _train(
        tmp_path, demo_data,
        ['bash', osp.join(ROOT, 'tools', 'dist_train.sh')], ['2'])
    estimates = [r for r in records if 'agvm_d/backbone' in r]
    assert [r['step'] for r in estimates] == [2, 4]
    assert all(0 <= r[f'agvm_d/{m}'] <= 2 for r in estimates
               for m in ['backbone', 'neck', 'rpn_head', 'roi_head'])


def test_camvid_segmentor_trains_with_agvm(tmp_path, shared_data):
    """The mmseg CPU config: AGVM factors for its modules, mIoU computed."""
    work_dir = tmp_path / 'camvid'
    run_tool([
        sys.executable, 'tools/train.py',
        'configs/agvm/fpn_r18_agvm_camvid-cpu.py', '--work-dir',
        str(work_dir), '--cfg-options', 'train_cfg.max_iters=6',
        'train_cfg.val_interval=6', 'optim_wrapper.start_iter=2',
        'default_hooks.checkpoint.interval=6',
        'default_hooks.logger.interval=1',
        'val_dataloader.dataset.indices=3'
    ])
    lines = next(work_dir.glob('*/vis_data/scalars.json')).read_text()
    records = [json.loads(line) for line in lines.splitlines()]
    train = [r for r in records if 'agvm_mu/decode_head' in r]
    assert len(train) >= 4
    # Re-estimated from iteration 2 on (2 micro-batches per step).
    assert any(r['agvm_mu/neck'] != 1.0 for r in train)
    estimates = [r for r in records if 'agvm_d/backbone' in r]
    # 2 micro-batches per step; the first active step (iterations 2-3)
    # re-estimates, the next one only after update_interval=10 steps.
    assert [r['step'] for r in estimates] == [4]
    assert all(0 <= r['agvm_d/backbone'] <= 2 for r in estimates)
    val = [r for r in records if 'mIoU' in r]
    assert len(val) == 1
    # The logged mIoU is the trained model's on those 3 frames: recomputed
    # here from its checkpoint and the frames' label maps.
    assert val[0]['mIoU'] == pytest.approx(
        _recomputed_miou(work_dir, 'fpn_r18_agvm_camvid-cpu.py', 'iter_6.pth'),
        abs=0.006)


def _recomputed_miou(work_dir, config_name, checkpoint):
    """mIoU (percent) of a checkpoint on its config's val set: per-class
    IoU over all frames' pixels (void left out), mean over the classes that
    occur in label or prediction (mmseg's IoUMetric definition)."""
    from mmengine.config import Config
    from mmengine.dataset import pseudo_collate
    from mmseg.apis import init_model
    from mmseg.registry import DATASETS

    cfg = Config.fromfile(str(work_dir / config_name))
    model = init_model(cfg, None, device='cpu')
    # Our own training's checkpoint (mmengine's, with its message hub).
    state = torch.load(work_dir / checkpoint, map_location='cpu',
                       weights_only=False)['state_dict']
    model.load_state_dict(state)
    model.eval()
    dataset = DATASETS.build(cfg.val_dataloader.dataset)
    num_classes = len(cfg.classes)
    inter = torch.zeros(num_classes, dtype=torch.float64)
    union = torch.zeros(num_classes, dtype=torch.float64)
    with torch.no_grad():
        for i in range(len(dataset)):
            out = model.test_step(pseudo_collate([dataset[i]]))[0]
            pred = out.pred_sem_seg.data.squeeze(0)
            label = out.gt_sem_seg.data.squeeze(0)
            keep = label != cfg.model.decode_head.ignore_index
            pred, label = pred[keep], label[keep]
            for c in range(num_classes):
                inter[c] += ((pred == c) & (label == c)).sum()
                union[c] += ((pred == c) | (label == c)).sum()
    present = union > 0
    return float((inter[present] / union[present]).mean()) * 100
