"""mmext.agvm.summary: the start-of-run block (modules, anchor, halves,
window, interval, clipping)."""
from mmext.agvm import AGVMSchedule, halves_description, run_summary


def test_halves_of_ranks_and_of_micro_batches():
    assert halves_description(8, 1) == 'ranks 0-3 vs ranks 4-7 (world size 8)'
    assert halves_description(2, 2) == 'rank 0 vs rank 1 (world size 2)'
    assert halves_description(5, 1) == (
        'ranks 0-1 vs ranks 2-3 (world size 5; rank 4 is in neither half, '
        'its gradient only enters the update)')
    assert halves_description(1, 2) == (
        'micro-batch 1 vs micro-batch 2 of the 2 accumulated per optimizer '
        'step (one process)')
    assert halves_description(1, 4) == (
        'micro-batches 1-2 vs micro-batches 3-4 of the 4 accumulated per '
        'optimizer step (one process)')


def test_block_of_a_paper_recipe():
    schedule = AGVMSchedule(10, 560, None, 1, (360, 560))
    text = run_summary(['backbone', 'neck', 'rpn_head', 'roi_head'],
                       [23508032, 3344384, 593935, 13957970, 0],
                       halves_description(32, 1), schedule, True, 'grad',
                       14656)
    assert text.splitlines() == [
        "AGVM: 4 modulated modules, anchor (module 0) 'backbone':",
        'AGVM:   backbone   23,508,032 parameters',
        'AGVM:   neck        3,344,384 parameters',
        'AGVM:   rpn_head      593,935 parameters',
        'AGVM:   roi_head   13,957,970 parameters',
        'AGVM: halves: ranks 0-15 vs ranks 16-31 (world size 32)',
        'AGVM: active from iteration 560 to the end of training (runner '
        'iterations); re-estimates every 10 optimizer step(s) of 1 '
        "iteration(s) from the first active one; statistic 'grad'",
        'AGVM: gradient clipping in iterations [360, 560) only '
        '(clip_grad_window)',
    ]


def test_block_with_others_an_end_and_no_clipping():
    schedule = AGVMSchedule(2, 4, 90, 2)
    lines = run_summary(['backbone', 'head'], [10, 4, 3],
                        halves_description(1, 2), schedule, False, 'adam',
                        100).splitlines()
    assert lines[3] == ('AGVM:   others' + ' ' * 14 + '3 parameters '
                        '(outside module_names: factor 1)')
    assert lines[5].startswith('AGVM: active from iteration 4 to iteration '
                               '90 of 100 (runner iterations); re-estimates '
                               'every 2 optimizer step(s) of 2 iteration(s)')
    assert lines[6] == 'AGVM: gradient clipping off (no clip_grad)'
    schedule = AGVMSchedule(accumulative_counts=2)
    assert run_summary(['b'], [1, 0], 'x', schedule, True, 'grad').endswith(
        'AGVM: gradient clipping at every step')
