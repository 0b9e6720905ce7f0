"""mmext.runner: the LR scaling both methods apply for one step."""
import pytest

from mmext.runner import scale_lrs, scaled_lrs


def test_scale_and_restore():
    groups = [dict(lr=0.1), dict(lr=0.02)]
    restore = scale_lrs(groups, [2.0, 0.5])
    assert [g['lr'] for g in groups] == pytest.approx([0.2, 0.01])
    restore()
    assert [g['lr'] for g in groups] == [0.1, 0.02]


def test_context_restores_on_error():
    groups = [dict(lr=0.1)]
    with pytest.raises(RuntimeError):
        with scaled_lrs(groups, [3.0]):
            assert groups[0]['lr'] == pytest.approx(0.3)
            raise RuntimeError('step failed')
    assert groups[0]['lr'] == 0.1


def test_length_mismatch_rejected():
    with pytest.raises(ValueError, match='2 LR factors for 1 param groups'):
        scale_lrs([dict(lr=0.1)], [1.0, 2.0])
