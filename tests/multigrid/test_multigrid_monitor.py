"""mmext.multigrid.monitor: data-wait share, verdict and the once-per-run
data-bound warning."""
import logging

from mmext.multigrid.monitor import (DataWaitWatch, bound_by, data_wait_share,
                                     data_wait_warning)


def test_share_and_verdict():
    assert data_wait_share(1.0, 4.0) == 0.25
    assert data_wait_share(0.0, 0.0) == 0.0
    # Timer noise can make the wait exceed the total by a hair.
    assert data_wait_share(4.1, 4.0) == 1.0
    assert bound_by(0.25) == 'data'
    assert bound_by(0.2) == 'compute'  # strictly above the threshold
    assert bound_by(0.05) == 'compute'
    assert bound_by(0.3, threshold=0.5) == 'compute'


def test_warning_names_share_and_remedies():
    text = data_wait_warning(0.456, 0.2, 'epoch 3 (batches [8], T=8, S=40)')
    assert 'took 46% of the iteration time at epoch 3' in text
    assert 'threshold 20%' in text
    for remedy in ('num_workers', 'DecordInit(num_threads', 'RawFrameDataset'):
        assert remedy in text


def _feed(watch, iters):
    out = []
    for data, compute in iters:
        out += watch.record(data, compute)
    return out


def test_watch_summary_and_single_warning():
    watch = DataWaitWatch(threshold=0.2, iters=3, skip=1)
    # Stage 1 compute-bound: 0.5 s rebuild + 2 s first batch; then 1 s
    # iterations with 0.1 s wait -> 10 % share, no warning.
    watch.start_stage('epoch 0', rebuild_seconds=0.5)
    out = _feed(watch, [(2.0, 0.3), (0.1, 0.9), (0.1, 0.9)])
    assert out == []
    out = _feed(watch, [(0.1, 0.9)])
    assert len(out) == 1 and out[0][0] == logging.INFO
    assert out[0][1] == (
        'Multigrid: stage change at epoch 0: 2.50 s (loader rebuild 0.50 s, '
        'worker start and first 1 batch(es) 2.00 s) = 2.5 iterations of '
        '1.000 s; data wait 10% of the next 3 iterations')
    # Iterations after the window are not measured.
    assert _feed(watch, [(5.0, 0.1)] * 4) == []
    # Stage 2 data-bound: 1 s wait per 2 s iteration -> 50 %.
    watch.start_stage('epoch 4')
    out = _feed(watch, [(0.0, 1.0)] + [(1.0, 1.0)] * 3)
    assert [level for level, _ in out] == [logging.INFO, logging.WARNING]
    assert 'data wait 50% of the next 3' in out[0][1]
    assert 'took 50% of the iteration time at epoch 4' in out[1][1]
    # Stage 3 data-bound again: figures, but no second warning.
    watch.start_stage('epoch 8')
    out = _feed(watch, [(0.0, 1.0)] + [(3.0, 1.0)] * 3)
    assert [level for level, _ in out] == [logging.INFO]
    assert 'data wait 75%' in out[0][1]


def test_watch_disabled_and_short_stage():
    watch = DataWaitWatch(threshold=None, iters=2, skip=1)
    watch.start_stage('epoch 0')
    out = _feed(watch, [(0.0, 1.0), (9.0, 1.0), (9.0, 1.0)])
    assert [level for level, _ in out] == [logging.INFO]
    # A stage shorter than skip + iters gives nothing.
    watch = DataWaitWatch(threshold=0.2, iters=5, skip=1)
    watch.start_stage('epoch 0')
    assert _feed(watch, [(9.0, 1.0)] * 5) == []




