"""tools/analysis/multigrid_schedule.py prints the reference table."""
import json
import os.path as osp
import subprocess
import sys

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CFG = osp.join(ROOT, 'configs', 'multigrid',
               'slowfast_r50_multigrid_8xb8-8x8x1-steplr-239e_'
               'kinetics400-rgb.py')


def _run(*args):
    return subprocess.run(
        [sys.executable, 'tools/analysis/multigrid_schedule.py', CFG, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)


def test_json_and_table():
    stages = json.loads(_run('--json').stdout)
    keys = {'batch_size', 'clip_len', 'crop_size', 'start_epoch',
            'end_epoch', 'lr_factor'}
    assert all(keys <= set(s) for s in stages)
    assert [s['end_epoch'] for s in stages][-3:] == [329, 343, 358]
    assert (stages[0]['batch_size'], stages[0]['clip_len'],
            stages[0]['crop_size']) == (64, 8, 158)
    assert '3.42x fewer iterations' in _run().stdout
