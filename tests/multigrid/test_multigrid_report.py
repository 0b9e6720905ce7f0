"""mmext.multigrid.report: a plan as data (the schedule tool's --json) and as
the table the hook logs."""
import pytest
from mg_helpers import PIPE, STEP

from mmext.multigrid import MultigridOptions, MultigridPlan, describe, summary


def _plan(samples_per_rank=64):
    return MultigridPlan(
        PIPE, 4, 4, [STEP], samples_per_rank=samples_per_rank, world_size=2,
        options=MultigridOptions(long_cycle_factors=[(0.5, 0.5**0.5),
                                                     (1, 1)]))


def test_summary_by_hand():
    """6 epochs: 3 of 3 iterations, 3 of 6 (see test_multigrid_plan); the
    recipe trains 4 x ceil(64 / 4) = 64 iterations."""
    info = summary(_plan(), warnings=['w'])
    assert info['base'] == dict(batch_size=4, effective_batch_size=8,
                                clip_len=16, crop_size=56)
    assert (info['recipe_epochs'], info['epochs'], info['iters'],
            info['recipe_iters']) == (4, 6, 27, 64)
    assert info['iteration_saving'] == pytest.approx(64 / 27)
    assert info['warnings'] == ['w']
    stages = [(s['start_epoch'], s['end_epoch'], s['batch_size'],
               s['effective_batch_size'], s['short_cycle_batch_sizes'],
               s['iters'], s['lr_factor']) for s in info['stages']]
    assert stages == [(0, 3, 16, 32, [32, 16, 16], 9, 4),
                      (3, 4, 4, 8, [16, 8, 4], 6, 1),
                      (4, 5, 4, 8, [16, 8, 4], 6, 1),
                      (5, 6, 4, 8, [16, 8, 4], 6, pytest.approx(0.1))]


def test_table_rows_and_totals():
    lines = describe(_plan()).splitlines()
    assert lines[0] == (
        'base (B, T, S) = (4, 16, 56), 4 recipe epochs; batch = per '
        'process, eff. batch = batch x world size 2 x accumulative_counts 1')
    assert lines[2].split() == ['0', '16', '32', '8', '40', '0', '3', '9',
                                '4', '[(32,', '28),', '(16,', '40),',
                                '(16,', '40)]']
    assert lines[-1] == (
        'total: 6 epochs, 27 iterations (exact, 64 clips per process) vs 64 '
        'of the recipe -> 2.37x fewer iterations; FLOPs x0.466 of the '
        'recipe')


def test_estimates_without_the_dataset_size():
    plan = _plan(samples_per_rank=None)
    info = summary(plan)
    assert info['iters'] is None and not info['exact']
    # In recipe iterations per epoch: 3 epochs x 3 shapes / batch factors
    # (8 + 4 + 4).
    assert info['stages'][0]['estimated_iters'] == pytest.approx(3 * 3 / 16)
    assert describe(plan).splitlines()[-1].startswith(
        'total: 6 epochs, 1.8 x recipe iters/epoch vs 4 -> ')
