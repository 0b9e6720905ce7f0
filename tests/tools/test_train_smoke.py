"""End-to-end: tools/train.py, tools/test.py and tools/dist_train.sh on real data."""
import glob
import json
import os
import os.path as osp
import socket
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, run_tool

from bench_utils import find_free_port

DET_SMOKE = 'configs/smoke/faster-rcnn_r50_fpn_coco128-smoke.py'
VIDEO_SMOKE = 'configs/smoke/i3d_r50_fight-smoke.py'
# A few iterations on a few samples each; the full smoke configs train longer.
FEW = ['train_cfg.max_epochs=1', 'train_dataloader.dataset.indices=6',
       'val_dataloader.dataset.indices=6', 'default_hooks.logger.interval=1']


def read_scalars(work_dir):
    """All records of the run's `vis_data/scalars.json` (one dict a line)."""
    files = glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))
    assert len(files) == 1, files
    with open(files[0]) as f:
        return [json.loads(line) for line in f]


def read_test_metrics(work_dir):
    """The metrics tools/test.py logged (mmengine's ``<timestamp>.json``)."""
    files = glob.glob(osp.join(work_dir, '*', '*.json'))
    assert len(files) == 1, files
    with open(files[0]) as f:
        return json.load(f)


def val_records(records, key):
    return [r for r in records if key in r]


def test_faster_rcnn_trains_and_evaluates_on_coco128(tmp_path, shared_data):
    work_dir = str(tmp_path / 'det')
    run_tool([sys.executable, 'tools/train.py', DET_SMOKE, '--work-dir',
              work_dir, '--cfg-options', *FEW])
    records = read_scalars(work_dir)
    train = [r for r in records if 'loss_rpn_cls' in r]
    assert len(train) == 3  # 6 images, batch 2
    assert all(r['loss'] > 0 for r in train)
    val = val_records(records, 'coco/bbox_mAP')
    assert len(val) == 1

    # tools/test.py evaluates the saved checkpoint on the same 6 images:
    # the metric of the end of training.
    ckpt = osp.join(work_dir, 'epoch_1.pth')
    preds = tmp_path / 'preds.pkl'
    test_dir = str(tmp_path / 'det_test')
    run_tool([sys.executable, 'tools/test.py', DET_SMOKE, ckpt,
              '--work-dir', test_dir, '--out', str(preds), '--cfg-options',
              'test_dataloader.dataset.indices=6'])
    assert read_test_metrics(test_dir)['coco/bbox_mAP'] == (
        val[0]['coco/bbox_mAP'])
    # --out as in mmdet: the predictions of the 6 images, pickled.
    import pickle
    with open(preds, 'rb') as f:
        assert len(pickle.load(f)) == 6


def test_i3d_trains_and_evaluates_on_fight(tmp_path, shared_data):
    work_dir = str(tmp_path / 'video')
    run_tool([sys.executable, 'tools/train.py', VIDEO_SMOKE, '--work-dir',
              work_dir, '--cfg-options', *FEW])
    records = read_scalars(work_dir)
    assert len([r for r in records if 'loss_cls' in r]) == 2  # 6 clips, b=4
    val = val_records(records, 'acc/top1')
    assert len(val) == 1
    test_dir = str(tmp_path / 'video_test')
    run_tool([sys.executable, 'tools/test.py', VIDEO_SMOKE,
              osp.join(work_dir, 'epoch_1.pth'), '--work-dir', test_dir,
              '--cfg-options', 'test_dataloader.dataset.indices=6'])
    assert read_test_metrics(test_dir)['acc/top1'] == val[0]['acc/top1']


def test_resume_continues_from_checkpoint(tmp_path, shared_data):
    """--resume restores the epoch (needs the torch>=2.6 checkpoint fix)."""
    work_dir = str(tmp_path / 'resume')
    opts = FEW + ['train_cfg.val_interval=10']
    run_tool([sys.executable, 'tools/train.py', VIDEO_SMOKE, '--work-dir',
              work_dir, '--cfg-options', *opts])
    proc = run_tool([sys.executable, 'tools/train.py', VIDEO_SMOKE,
                     '--work-dir', work_dir, '--resume', '--cfg-options',
                     *opts[1:], 'train_cfg.max_epochs=2'])
    log = proc.stdout + proc.stderr
    assert 'resumed epoch: 1, iter: 2' in log
    assert 'Epoch(train) [2][2/2]' in log
    assert osp.exists(osp.join(work_dir, 'epoch_2.pth'))


def test_dist_train_two_processes_on_cpu(tmp_path, shared_data):
    work_dir = str(tmp_path / 'dist')
    proc = run_tool(['bash', 'tools/dist_train.sh', VIDEO_SMOKE, '2',
                     '--work-dir', work_dir, '--cfg-options', *FEW],
                    env={'PORT': str(find_free_port())})
    log = proc.stdout + proc.stderr
    assert 'Distributed launcher: pytorch' in log
    assert 'Distributed training: True' in log
    assert 'GPU number: 2' in log  # mmengine's name for the world size
    # 6 clips over 2 ranks with batch 4 per rank: one iteration per epoch.
    assert 'Epoch(train) [1][1/1]' in log
    assert val_records(read_scalars(work_dir), 'acc/top1')


def test_dist_train_on_a_busy_port_says_which_and_how(tmp_path):
    with socket.socket() as busy:
        busy.bind(('', 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            ['bash', 'tools/dist_train.sh', VIDEO_SMOKE, '2'], cwd=REPO_ROOT,
            env=dict(os.environ, PORT=str(port)), capture_output=True,
            text=True, timeout=60)
    assert proc.returncode == 1
    assert f"torchrun's port {port} is in use" in proc.stderr
    assert f'e.g. PORT={port + 1} ' in proc.stderr


def test_amp_without_cuda_is_refused_by_mmengine(tmp_path):
    """mmaction2's --amp on CPU: mmengine's AmpOptimWrapper refuses before
    the first iteration."""
    import torch
    if torch.cuda.is_available():
        pytest.skip('CUDA present: --amp is valid here')
    proc = subprocess.run(
        [sys.executable, 'tools/train.py', VIDEO_SMOKE, '--amp',
         '--work-dir', str(tmp_path)],
        cwd=osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert 'AmpOptimizerWrapper`` is only available' in proc.stderr
    assert 'Epoch(train)' not in proc.stdout + proc.stderr
