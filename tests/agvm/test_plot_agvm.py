"""tools/analysis/plot_agvm.py reads mmengine's scalars.json and draws."""
import importlib.util
import json
import os.path as osp

import pytest

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool():
    spec = importlib.util.spec_from_file_location(
        'plot_agvm', osp.join(ROOT, 'tools', 'analysis', 'plot_agvm.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_load_and_plot(tmp_path):
    # Two runs (a resume): the curves continue across them.
    for run, steps in (('20260101_000000', (2, 4)), ('20260101_010000',
                                                      (6, ))):
        vis = tmp_path / run / 'vis_data'
        vis.mkdir(parents=True)
        vis.joinpath('scalars.json').write_text('\n'.join(json.dumps({
            'step': s, 'lr': 0.1, 'agvm_mu/backbone': 1.0,
            'agvm_mu/neck': 1 + s / 100, 'agvm_d/neck': 0.1 * s
        }) for s in steps))
    tool = _tool()
    factors, variances = tool.load_agvm_scalars(str(tmp_path))
    assert factors['neck'] == [(2, 1.02), (4, 1.04), (6, 1.06)]
    assert variances['neck'][-1] == (6, pytest.approx(0.6))
    out = tmp_path / 'agvm.png'
    tool.plot(factors, variances, str(out))
    assert out.stat().st_size > 1000


def test_work_dir_without_agvm_scalars(tmp_path):
    with pytest.raises(FileNotFoundError, match='AGVMOptimWrapper'):
        _tool().load_agvm_scalars(str(tmp_path))
