"""mmext.multigrid.schedule: the pure schedule against the PySlowFast
reference table (Kinetics-400 SlowFast 8x8 R50 stepwise)."""
import pytest
from mg_helpers import MAX_EPOCHS, STEPS

from mmext.multigrid import build_multigrid_schedule
from mmext.multigrid.plan import find_lr_steps
from mmext.multigrid.schedule import (GridShape, MultigridStage,
                                      iterations_per_epoch, map_recipe_epoch,
                                      short_cycle_shapes, stage_at_epoch,
                                      stage_flops_ratios)


@pytest.fixture(scope='module')
def reference():
    return build_multigrid_schedule(32, 224, STEPS, MAX_EPOCHS, gamma=0.1)


def test_reference_table(reference):
    shapes = [(8, 8, 158), (4, 16, 158), (2, 16, 224), (1, 32, 224)]
    ends = [73, 110, 142, 158, 205, 228, 248, 259, 291, 308, 322, 329]
    expected = [(i // 4, shapes[i % 4], e) for i, e in enumerate(ends)]
    expected += [(2, (1, 32, 224), 343), (3, (1, 32, 224), 358)]
    got = [(s.lr_stage, (s.shape.batch_factor, s.shape.clip_len,
                         s.shape.crop_size), s.end_epoch) for s in reference]
    assert got == expected
    assert reference[-1].end_epoch == 358
    assert [s.start_epoch for s in reference[1:]] == [
        s.end_epoch for s in reference[:-1]]
    lrs = [s.lr_factor for s in reference]
    assert lrs[:12] == pytest.approx(
        [f * 0.1**k for k in range(3) for f in (8, 4, 2, 1)])
    # Fine-tune: previous stage's last LR, then the final LR (not 10x less).
    assert lrs[12:] == pytest.approx([0.01, 0.001])


def test_reference_short_cycle_absolute(reference):
    first = [(s.batch_factor, s.clip_len, s.crop_size)
             for s in reference[0].short_cycle]
    # At S = S0/sqrt2 the absolute cycle degenerates to 2B, B, B.
    assert first == [(16, 8, 112), (8, 8, 158), (8, 8, 158)]
    assert [(s.batch_factor, s.crop_size) for s in reference[-1].short_cycle
            ] == [(4, 112), (2, 158), (1, 224)]


def test_reference_iteration_saving(reference):
    base_iters = MAX_EPOCHS / 1.0
    mg_iters = sum(
        s.num_epochs * len(s.short_cycle) /
        sum(x.batch_factor for x in s.short_cycle) for s in reference)
    assert base_iters / mg_iters == pytest.approx(3.4, abs=0.1)
    assert sum(stage_flops_ratios(reference, MAX_EPOCHS, 32, 224)) < 1


def test_flops_ratio_from_counted_clip_flops():
    """Base (T0, S0) = (16, 112), 5 recipe epochs. Epochs 0-4 cycle
    (B, T, S) = (4, 8, 56), (2, 8, 112); epochs 4-6 train (1, 16, 112).
    Per clip F(8, 56) = 1, F(8, 112) = 3, F(16, 112) = 10: the first stage
    costs 4 x (4 x 1 + 2 x 3) / 6 = 20/3, the second 2 x 10 = 20, the recipe
    5 x 10 = 50: ratio (20/3 + 20) / 50 = 8/15. With F = T S^2 (a shape
    missing): (4 x 50176 + 2 x 200704) / (5 x 200704) = 0.6."""
    small, mid, base = (GridShape(4, 8, 56), GridShape(2, 8, 112),
                        GridShape(1, 16, 112))
    stages = [MultigridStage(0, mid, (small, mid), 0, 4, 2.0),
              MultigridStage(1, base, (base, ), 4, 6, 0.1)]
    flops = {(8, 56): 1.0, (8, 112): 3.0, (16, 112): 10.0}
    assert stage_flops_ratios(stages, 5, 16, 112, flops) == pytest.approx(
        [2 / 15, 2 / 5])
    del flops[8, 56]
    assert sum(stage_flops_ratios(stages, 5, 16, 112, flops)) == (
        pytest.approx(0.6))
    assert sum(stage_flops_ratios(stages, 5, 16, 112)) == pytest.approx(0.6)


def test_relative_short_cycle():
    shapes = short_cycle_shapes(32, 224, 8, 158, [0.5, 0.5**0.5],
                                'relative')
    assert [(s.batch_factor, s.crop_size) for s in shapes] == [(32, 79),
                                                              (16, 112),
                                                              (8, 158)]


def test_long_cycle_only_has_base_fine_tune():
    stages = build_multigrid_schedule(32, 224, STEPS, MAX_EPOCHS,
                                      short_cycle=False)
    assert all(len(s.short_cycle) == 1 for s in stages)
    assert (stages[-1].shape.batch_factor, stages[-1].shape.clip_len,
            stages[-1].shape.crop_size) == (1, 32, 224)
    assert stages[-1].end_epoch in (358, 359)  # 239 * 1.5 = 358.5


def test_short_cycle_only():
    stages = build_multigrid_schedule(32, 224, STEPS, MAX_EPOCHS,
                                      long_cycle=False, gamma=0.1)
    assert [(s.start_epoch, s.end_epoch) for s in stages] == [(0, 141),
                                                              (141, 231),
                                                              (231, 294),
                                                              (294, 358)]
    assert [s.lr_factor for s in stages] == pytest.approx(
        [1, 0.1, 0.01, 0.001])
    assert [x.batch_factor for x in stages[0].short_cycle] == [4, 2, 1]


def test_cosine_steps_and_epoch_map(reference):
    steps, gamma = find_lr_steps([dict(type='CosineAnnealingLR', T_max=100)],
                                 100)
    assert (steps, gamma) == ([0, 100], None)
    stages = build_multigrid_schedule(32, 224, steps, 100)
    assert stages[-1].end_epoch == 150 and len(stages) == 4
    assert map_recipe_epoch(stages, steps, 100, 50) == 75
    # Milestones land on the multigrid LR drops.
    assert [map_recipe_epoch(reference, STEPS, MAX_EPOCHS, e)
            for e in STEPS + [MAX_EPOCHS]] == [0, 158, 259, 343, 358]
    assert stage_at_epoch(reference, 158).lr_stage == 1
    with pytest.raises(IndexError):
        stage_at_epoch(reference, 358)


def test_lr_steps_past_the_recipe():
    """Their start and order are MultigridOptions' (test_multigrid_plan);
    the schedule checks them against the recipe's epochs."""
    with pytest.raises(ValueError, match=r'\[0, 300\] must end within '
                       'train_cfg.max_epochs=239'):
        build_multigrid_schedule(32, 224, [0, 300], MAX_EPOCHS)


def test_iterations_per_epoch():
    assert iterations_per_epoch(64, [32, 16, 16]) == 3
    assert iterations_per_epoch(64, [16, 8, 4]) == 6  # 56 used, 8 < 16
    assert iterations_per_epoch(10, [4]) == 2


@pytest.mark.parametrize('options, match', [
    (dict(long_cycle_factors=[(0.01, 1), (1, 1)]),
     r'entry \(0.01, 1\) leaves 0 frames or pixels of \(T, S\) = '
     r'\(16, 56\)'),
    (dict(short_cycle_factors=[0.001]), r'short_cycle_factors \[0.001\] '
     'leave 0 pixels of S=56'),
    (dict(epoch_factor=0.3), 'epoch_factor=0.3 with 4 recipe epochs leaves '
     'no epoch'),
])
def test_what_the_recipe_cannot_take_names_the_option(options, match):
    """Types and ranges are MultigridOptions' (test_multigrid_plan); the
    schedule checks what depends on the recipe's base shape."""
    with pytest.raises(ValueError, match=match):
        build_multigrid_schedule(16, 56, [0, 2], 4, **options)


def test_a_2d_recognizer_is_told_to_keep_t_1():
    """TSN/TSM recipes sample clip_len=1 (T is their segments): the default
    long cycle's t < 1 leaves no frame; the fix is t = 1 in every entry."""
    with pytest.raises(ValueError, match='2D models need t = 1 in every '
                       'entry') as error:
        build_multigrid_schedule(1, 224, [0, 2], 4, long_cycle_factors=[
            (1, 0.5**0.5), (0.5, 1), (1, 1)])
    assert 'entry (0.5, 1) leaves 0 frames of T=1: ' in str(error.value)
    stages = build_multigrid_schedule(1, 224, [0, 2], 4, long_cycle_factors=[
        (1, 0.5**0.5), (1, 1)])
    assert {(s.shape.clip_len, s.shape.crop_size) for s in stages} == {
        (1, 158), (1, 224)}


@pytest.mark.parametrize('policy, long_cycle, first_cycle', [
    ('constant', [1, 1, 1, 1], [1, 1, 1]),
    # round(sqrt F): sqrt 8 = 2.83, sqrt 2 = 1.41, sqrt 16 = 4.
    ('sqrt', [3, 2, 1, 1], [4, 3, 3]),
])
def test_batch_policy_keeps_the_epochs_and_scales_batch_and_lr(
        reference, policy, long_cycle, first_cycle):
    """Every policy trains the reference's shapes for the reference's epochs;
    the batch factors (long cycle, stage 0's short cycle) are the policy's
    and the LR (linear rule) follows them."""
    stages = build_multigrid_schedule(32, 224, STEPS, MAX_EPOCHS, gamma=0.1,
                                      batch_policy=policy)
    shape = lambda s: (s.shape.clip_len, s.shape.crop_size)  # noqa: E731
    assert [(s.start_epoch, s.end_epoch, shape(s)) for s in stages] == [
        (s.start_epoch, s.end_epoch, shape(s)) for s in reference]
    assert [s.shape.batch_factor for s in stages[:4]] == long_cycle
    assert [x.batch_factor for x in stages[0].short_cycle] == first_cycle
    assert [s.lr_factor for s in stages[:12]] == pytest.approx(
        [f * 0.1**k for k in range(3) for f in long_cycle])
    assert stages[-1].shape == GridShape(1, 32, 224)


def test_constant_policy_flops_weigh_the_short_cycle_equally():
    """(T0, S0) = (16, 112), short cycle only at 1/2 and 1/sqrt2: constant
    batches train a third of the clips at each crop: FLOPs per epoch
    (56^2 + 79^2 + 112^2) / 3 / 112^2 = 0.582 of the recipe's; the paper's
    weighs them 4:2:1 (F = 4, round(2.01) = 2): (4 56^2 + 2 79^2 + 112^2)
    / 7 / 112^2 = 0.427; 6 epochs of 4 recipe epochs (epoch_factor 1.5)."""
    ratios = {policy: sum(stage_flops_ratios(build_multigrid_schedule(
        16, 112, [0, 4], 4, long_cycle=False, batch_policy=policy), 4, 16,
        112)) for policy in ('constant', 'paper')}
    assert ratios['constant'] == pytest.approx(
        1.5 * (56**2 + 79**2 + 112**2) / 3 / 112**2)
    assert ratios['paper'] == pytest.approx(
        1.5 * (4 * 56**2 + 2 * 79**2 + 112**2) / 7 / 112**2)
