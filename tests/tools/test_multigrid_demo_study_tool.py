"""tools/benchmark/multigrid_demo_study.py: final feature maps per planned
shape and the per-arm summary arithmetic (no training)."""
import importlib
import math
import os.path as osp
import sys

import pytest
from helpers import REPO_ROOT


@pytest.fixture(scope='module')
def study():
    path = osp.join(REPO_ROOT, 'tools', 'benchmark')
    sys.path.insert(0, path)
    try:
        yield importlib.import_module('multigrid_demo_study')
    finally:
        sys.path.remove(path)


def _maps(rows):
    return {(r['clip_len'], r['crop_size']): r['final_map'][0] for r in rows}


def test_final_maps_of_the_old_and_the_shipped_short_cycle(study):
    """ResNet3d-18 (spatial stride 32, temporal 4): S=28 and 32 leave 1x1,
    S=33 and the shipped 34 leave 2x2 (ceil of S/32 through the strided
    convolutions and pools)."""
    demo = osp.join(REPO_ROOT, study.DEMO)
    old = _maps(study.final_maps(demo, hook=study.ARMS['shipped']['hook']))
    assert old[(8, 28)] == [1, 1, 1]
    assert old[(16, 28)] == [2, 1, 1]
    assert old[(16, 56)] == [2, 2, 2]
    assert _maps(study.final_maps(
        demo, hook=study.ARMS['short_32']['hook']))[(8, 32)] == [1, 1, 1]
    assert _maps(study.final_maps(
        demo, hook=study.ARMS['short_33']['hook']))[(8, 33)] == [1, 2, 2]
    shipped = _maps(study.final_maps(demo))
    assert min(s for _, s in shipped) == 34
    assert all(m[1:] == [2, 2] for m in shipped.values())


def _record(arm, seed, top1, seconds=60.0):
    return dict(arm=arm, seed=seed, top1=top1, seconds=seconds, iters=10,
                trajectory=[[1, 0.5], [2, top1]],
                bn_variants=dict(ema=top1 - 0.25, precise64=top1))


def test_arm_table_pairs_by_seed(study):
    results = [_record('recipe', 0, 1.0), _record('recipe', 1, 1.0),
               _record('shipped', 0, 0.75, 120.0),
               _record('shipped', 1, 1.0, 60.0),
               _record('shipped', 2, 0.5, 90.0)]
    rows = {r['arm']: r for r in study.arm_table(results)[0]}
    shipped = rows['shipped']
    assert shipped['seeds'] == [0, 1, 2]
    # 0.75, 1.0, 0.5: mean 0.75, sample std 0.25.
    assert shipped['top1']['mean'] == pytest.approx(0.75)
    assert shipped['top1']['std'] == pytest.approx(0.25)
    # Paired over seeds 0 and 1 only: -0.25, 0 -> mean -0.125, std
    # 0.25 / sqrt(2).
    assert shipped['paired']['values'] == pytest.approx([-0.25, 0.0])
    assert shipped['paired']['std'] == pytest.approx(0.25 / math.sqrt(2))
    # Last 6 trajectory points (here both): (0.5 + top1) / 2 per seed.
    assert shipped['plateau']['values'] == pytest.approx([0.625, 0.75,
                                                          0.5])
    assert shipped['bn']['ema']['mean'] == pytest.approx(0.5)
    assert shipped['minutes']['mean'] == pytest.approx(1.5)
    assert rows['recipe']['paired'] is None and rows['recipe']['bn'] == {}
