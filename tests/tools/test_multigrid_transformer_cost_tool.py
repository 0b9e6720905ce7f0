"""tools/benchmark/multigrid_transformer_cost.py: one timed row per planned
shape of a tiny TimeSformer, relative to the base shape."""
import json
import sys

from helpers import run_tool

TOOL = 'tools/benchmark/multigrid_transformer_cost.py'


def test_rows_cover_the_plan_and_are_relative_to_the_base_shape():
    proc = run_tool([sys.executable, TOOL, '--embed-dims', '8', '--layers',
                     '1', '--heads', '1', '--batch', '1', '--iters', '1',
                     '--rounds', '1', '--json'])
    out = json.loads(proc.stdout)
    rows = out['rows']
    # The default MultigridHook on the recipe's 8 x 224: B T S^2 constant.
    assert [(r['batch'], r['clip_len'], r['crop_size']) for r in rows] == [
        (16, 2, 112), (8, 2, 158), (8, 4, 112), (4, 4, 158), (2, 4, 224),
        (4, 8, 112), (2, 8, 158), (1, 8, 224)]
    base = rows[-1]
    assert base['ratio_to_base'] == 1.0 and base['tokens_per_clip'] == 1568
    for r in rows:
        assert r['ratio_to_base'] == r['seconds_per_iter'] / base[
            'seconds_per_iter']
        assert r['clips_per_second'] == r['batch'] / r['seconds_per_iter']
        assert r['tokens_per_clip'] == r['clip_len'] * (r['crop_size'] //
                                                        16)**2
        assert r['bounded_by'].startswith('compute')
    assert out['threads'] == 1 and len(out['load_average_before']) == 3
