"""mmext.agvm.schedule: the AGVM window, its re-estimate steps and the
clipping window."""
import pytest

from mmext.agvm import AGVMSchedule


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


@pytest.mark.parametrize('kwargs,match', [
    (dict(update_interval=0), 'update_interval'),
    (dict(start_iter=-1), 'start_iter'),
    (dict(start_iter=5, end_iter=5), 'end_iter'),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AGVMSchedule(**kwargs)


def test_clip_window_is_half_open():
    schedule = AGVMSchedule(clip_grad_window=(2, 4))
    assert [schedule.clips(i) for i in range(6)] == [
        False, False, True, True, False, False]
    assert all(AGVMSchedule().clips(i) for i in range(3))


@pytest.mark.parametrize('kwargs, max_iters, expected', [
    (dict(start_iter=100), 100, [
        'AGVM start_iter=100 is not before the end of training '
        '(max_iters=100), so AGVM never modulates the LR. Lower start_iter '
        '(the paper starts after the warm-up) or train longer.']),
    (dict(start_iter=10, end_iter=500), 100, [
        'AGVM end_iter=500 lies after the end of training (max_iters=100); '
        'AGVM runs to the end, as with end_iter=None.']),
    (dict(clip_grad_window=[100, 200]), 50, [
        'clip_grad_window=(100, 200) begins after the end of training '
        '(max_iters=50), so gradients are never clipped.']),
    (dict(start_iter=10, end_iter=90, clip_grad_window=(0, 10)), 100, []),
])
def test_values_the_run_cannot_honour(kwargs, max_iters, expected):
    assert AGVMSchedule(**kwargs).unused_values(max_iters) == expected
