"""tools/analysis/agvm_variance.py: error on missing data, and a small run
on the demo detector."""
import json
import os.path as osp
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, assert_refused_before_training, run_tool

DEMO_AGVM = 'configs/demo/faster-rcnn_r18_fpn_agvm_demo-det.py'


def test_missing_demo_data_says_how_to_make_it():
    root = 'data/demo/no-such-set/'
    proc = subprocess.run([
        sys.executable, 'tools/analysis/agvm_variance.py', DEMO_AGVM,
        '--cfg-options', f'train_dataloader.dataset.data_root={root}'
    ], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f'{root}annotations/train.json does not exist' in proc.stderr
    assert 'make demo-data' in proc.stderr


@pytest.mark.slow
def test_demo_detector_table_json_and_figure(demo_data, tmp_path):
    fig = str(tmp_path / 'variance.png')
    proc = run_tool([
        sys.executable, 'tools/analysis/agvm_variance.py', DEMO_AGVM,
        '--batch-sizes', '2', '4', '--repeats', '2', '--out', fig, '--json'
    ])
    assert 'gradient variance d_i = 1 - cos(G_A, G_B)' in proc.stdout
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['modules'] == ['backbone', 'neck', 'rpn_head', 'roi_head']
    assert result['micro_batch'] == 4 and result['dataset_size'] == 48
    assert [r['batch_size'] for r in result['results']] == [2, 4]
    for row in result['results']:
        assert row['ratio']['backbone']['values'] == [1.0, 1.0]
        for name in result['modules']:
            values = row['d'][name]['values']
            assert len(values) == 2 and all(0 < v < 2 for v in values)
            # The factor is sqrt(clamp(ratio, 0.5, 10)) repeat by repeat.
            assert row['mu'][name]['values'] == pytest.approx([
                min(max(r, 0.5), 10.0)**0.5
                for r in row['ratio'][name]['values']
            ])
    assert osp.getsize(fig) > 0


@pytest.mark.parametrize('args,message', [
    (['--batch-sizes', '4', '6', '5'], 'must be even and >= 2'),
    (['--repeats', '0'], '--repeats must be >= 1, got 0'),
    (['--checkpoint', 'no/such.pth'],
     '--checkpoint no/such.pth: no such file'),
])
def test_bad_options_stop_before_building_the_model(args, message):
    assert_refused_before_training(
        [sys.executable, 'tools/analysis/agvm_variance.py', DEMO_AGVM] + args,
        message)
