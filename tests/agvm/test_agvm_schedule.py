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
