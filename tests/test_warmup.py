"""mmext.warmup: the exponential warm-up against mmcv 1.x's formula."""
import pytest
import torch
from mmengine.optim.scheduler import MultiStepLR

from mmext.warmup import ExpWarmupLR


def _optimizer(lr=0.38):
    return torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=lr)


def _lrs(optimizer, schedulers, iters):
    """LR used at each iteration, stepping the schedulers after it, as
    mmengine's ParamSchedulerHook does."""
    lrs = []
    for _ in range(iters):
        lrs.append(optimizer.param_groups[0]['lr'])
        optimizer.step()
        for scheduler in schedulers:
            scheduler.step()
    return lrs


def _mmcv_exp_warmup(lr, t, warmup_iters, ratio):
    """mmcv 1.x LrUpdaterHook.get_warmup_lr, warmup='exp', written out:
    k = ratio ** (1 - t / warmup_iters) while t < warmup_iters."""
    if t >= warmup_iters:
        return lr
    return lr * ratio**(1 - t / warmup_iters)


def test_matches_mmcv_exp_warmup():
    optimizer = _optimizer()
    warmup = ExpWarmupLR(optimizer, start_factor=0.001, by_epoch=False,
                         begin=0, end=460)
    lrs = _lrs(optimizer, [warmup], 600)
    expected = [_mmcv_exp_warmup(0.38, t, 460, 0.001) for t in range(600)]
    assert lrs == pytest.approx(expected, rel=1e-9)
    assert lrs[0] == pytest.approx(0.38e-3)
    assert lrs[230] == pytest.approx(0.38 * 0.001**0.5)
    assert lrs[460:] == [pytest.approx(0.38)] * 140
    # About 3.4x less LR over the warm-up than a linear one from 0.001.
    linear = sum(0.38 * (0.001 + (1 - 0.001) * t / 460) for t in range(460))
    # (continuous: 0.5005 / (0.999 / ln 1000) = 3.46)
    assert linear / sum(lrs[:460]) == pytest.approx(3.46, rel=0.01)


def test_chains_with_a_step_schedule_and_a_later_begin():
    """On top of MultiStepLR (mmcv multiplies the regular schedule's LR),
    starting at iteration 10."""
    optimizer = _optimizer(1.0)
    schedulers = [
        ExpWarmupLR(optimizer, start_factor=0.01, by_epoch=False, begin=10,
                    end=20),
        MultiStepLR(optimizer, by_epoch=False, milestones=[15, 30],
                    gamma=0.1)
    ]
    lrs = _lrs(optimizer, schedulers, 40)
    regular = [1.0 if t < 15 else 0.1 if t < 30 else 0.01 for t in range(40)]
    expected = [r if t < 10 else _mmcv_exp_warmup(r, t - 10, 10, 0.01)
                for t, r in enumerate(regular)]
    assert lrs == pytest.approx(expected, rel=1e-9)


def test_resumes_from_its_state_dict():
    optimizer = _optimizer()
    warmup = ExpWarmupLR(optimizer, by_epoch=False, end=50)
    first = _lrs(optimizer, [warmup], 20)
    state, group_lr = warmup.state_dict(), optimizer.param_groups[0]['lr']
    # As mmengine resumes: schedulers built, then the optimizer's and their
    # states loaded.
    optimizer2 = _optimizer()
    resumed = ExpWarmupLR(optimizer2, by_epoch=False, end=50)
    optimizer2.param_groups[0]['lr'] = group_lr
    resumed.load_state_dict(state)
    rest = _lrs(optimizer2, [resumed], 40)
    expected = [_mmcv_exp_warmup(0.38, t, 50, 0.001) for t in range(60)]
    assert first + rest == pytest.approx(expected, rel=1e-9)


def test_closed_form_and_epoch_conversion():
    optimizer = _optimizer()
    warmup = ExpWarmupLR.build_iter_from_epoch(
        optimizer, start_factor=0.001, by_epoch=True, begin=0, end=2,
        epoch_length=25)
    assert (warmup.begin, warmup.end, warmup.by_epoch) == (0, 51, False)
    assert warmup.warmup_steps == 50
    _lrs(optimizer, [warmup], 25)
    assert warmup._get_closed_form_value() == pytest.approx(
        [0.38 * 0.001**0.5])


@pytest.mark.parametrize('kwargs, message', [
    (dict(start_factor=0, end=5), 'start_factor=0: expected a number in'),
    (dict(start_factor=2.0, end=5), 'start_factor=2.0:'),
    (dict(start_factor='0.001', end=5), "start_factor='0.001':"),
    (dict(), 'end=1000000000: expected an integer end after begin'),
    (dict(begin=5, end=5), 'begin=5, end=5:'),
])
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError) as err:
        ExpWarmupLR(_optimizer(), by_epoch=False, **kwargs)
    assert message in str(err.value)
