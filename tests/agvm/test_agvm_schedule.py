"""mmext.agvm.schedule: the AGVM window, its re-estimate steps and the
clipping window."""
import re

import pytest

from mmext.agvm.schedule import AGVMSchedule


def test_measurements_every_interval_from_start():
    sched = AGVMSchedule(update_interval=3, start_iter=2, end_iter=9)
    assert [i for i in range(12) if sched.is_active(i)] == list(range(2, 9))
    assert [i for i in range(12) if sched.is_measurement(i)] == [2, 5, 8]


def test_accumulation_counts_steps_not_micro_batches():
    sched = AGVMSchedule(update_interval=2, start_iter=4,
                         accumulative_counts=2)
    # steps 2, 4, 6 measure; both micro-batches of a step agree.
    assert [i for i in range(16) if sched.is_measurement(i)] == [
        4, 5, 8, 9, 12, 13]
    assert sched.window_start(9) == 8


def test_clip_window_includes_both_ends_as_released():
    """The reference clips where ``iter_low <= runner.iter <= iter_high``:
    the released [360, 560] is 201 iterations."""
    schedule = AGVMSchedule(clip_grad_window=(2, 4))
    assert [schedule.clips(i) for i in range(6)] == [
        False, False, True, True, True, False]
    released = AGVMSchedule(clip_grad_window=(360, 560))
    assert sum(map(released.clips, range(1000))) == 201
    assert all(AGVMSchedule().clips(i) for i in range(3))


@pytest.mark.parametrize('kwargs, max_iters, expected', [
    (dict(start_iter=100), 100, [
        r'never applies: start_iter=100 >= max_iters=100']),
    (dict(start_iter=10, end_iter=500), 100, [
        r'end_iter=500 > max_iters=100']),
    (dict(clip_grad_window=[100, 200]), 50, [
        r'clip_grad_window=\(100, 200\) begins after max_iters=50']),
    (dict(start_iter=200, clip_grad_window=(0, 200)), 150, [
        r'start_iter=200 >= max_iters=150',
        r'clip_grad_window=\(0, 200\) ends after max_iters=150']),
    (dict(start_iter=10, end_iter=90, clip_grad_window=(0, 10)), 100, []),
])
def test_values_the_run_cannot_honour(kwargs, max_iters, expected):
    messages = AGVMSchedule(**kwargs).unused_values(max_iters)
    assert len(messages) == len(expected), messages
    for message, pattern in zip(messages, expected):
        assert re.search(pattern, message), message


def test_start_inside_a_warmup_is_named():
    schedule = AGVMSchedule(start_iter=300)
    (message, ) = schedule.inside_warmup([('mmext.ExpWarmupLR', 0, 460)])
    assert 'start_iter=300 is inside the mmext.ExpWarmupLR warm-up' in message
    assert 'set start_iter >= 460' in message
    assert AGVMSchedule(start_iter=460).inside_warmup(
        [('LinearLR', 0, 460)]) == []
    assert AGVMSchedule(start_iter=10).inside_warmup(
        [('LinearLR', 100, 200)]) == []
