"""mmext.multigrid.plan: MultigridPlan from configs and runners, iteration
counts per shape, where precise BN runs, the errors of a recipe it cannot
plan."""
import pytest
from mg_helpers import I3D, I3D_MILESTONES, PIPE, STEP
from mmengine.config import Config

from mmext.multigrid import MultigridOptions, MultigridPlan


def test_stock_i3d_recipe_shortened_error_names_the_milestones():
    cfg = Config.fromfile(I3D)
    cfg.train_cfg.max_epochs = 2
    with pytest.raises(ValueError) as info:
        MultigridPlan.from_config(cfg)
    assert str(info.value) == (
        'With epoch_factor=1.5 and 2 recipe epochs the multigrid schedule '
        'rounds the base-shape stages to 0 epochs, so the model would never '
        "train at the recipe's shape. Raise epoch_factor or "
        'train_cfg.max_epochs. Recipe values the schedule cannot honour: '
        + I3D_MILESTONES)


def test_iteration_based_config_named_by_the_plan():
    """The schedule tool's plan rejects what the hook rejects, by name."""
    cfg = Config(dict(
        custom_hooks=[dict(type='mmext.MultigridHook')],
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=100),
        train_dataloader=dict(batch_size=8, dataset=dict(pipeline=[])),
        param_scheduler=[]))
    with pytest.raises(ValueError, match='needs an epoch-based train loop'):
        MultigridPlan.from_config(cfg)


def _tiny_plan(**options):
    """Base (B, T, S) = (4, 16, 56), 4 recipe epochs, LR step at 2, long
    cycle (T/2, S/sqrt2) then base, 64 clips per process."""
    options = dict(dict(long_cycle_factors=[(0.5, 0.5**0.5), (1, 1)],
                        bn_base_size=4, precise_bn_iters=2), **options)
    return MultigridPlan(PIPE, 4, 4, [STEP], samples_per_rank=64,
                         options=MultigridOptions(**options))


def test_shape_iterations_by_hand():
    """Stage 0 (epochs 0-3) cycles batches 32, 16, 16 = 64 clips: one
    iteration of each shape per epoch. The base-shape stages cycle 16, 8, 4:
    two cycles (56 clips) per epoch, the 8 left over make no batch."""
    plan = _tiny_plan()
    rows = [(x.stage.start_epoch, x.batch_size, x.shape.clip_len,
             x.shape.crop_size, x.iters) for x in plan.shape_iterations()]
    assert rows == [
        (0, 32, 8, 28, 3), (0, 16, 8, 40, 3), (0, 16, 8, 40, 3),
        (3, 16, 16, 28, 2), (3, 8, 16, 40, 2), (3, 4, 16, 56, 2),
        (4, 16, 16, 28, 2), (4, 8, 16, 40, 2), (4, 4, 16, 56, 2),
        (5, 16, 16, 28, 2), (5, 8, 16, 40, 2), (5, 4, 16, 56, 2)]
    assert sum(r[-1] for r in rows) == plan.max_iters == 27


def test_precise_bn_runs_where_the_long_cycle_shape_changes():
    plan = _tiny_plan()
    # Stages [3, 4) and [4, 5) are followed by the same shapes (LR drops).
    assert [(s.start_epoch, s.end_epoch)
            for s in plan.precise_bn_stages()] == [(0, 3), (5, 6)]
    assert _tiny_plan(precise_bn_iters=0).precise_bn_stages() == []


@pytest.mark.parametrize('edit, message', [
    (dict(train_cfg=dict(type='IterBasedTrainLoop', max_iters=10)),
     "train_cfg has no max_epochs"),
    (dict(train_dataloader=dict(dataset=dict(
        type='RepeatDataset', times=2, dataset=dict(type='VideoDataset')))),
     r'train dataset \(RepeatDataset\) has none: dataset wrappers'),
])
def test_for_config_names_what_the_plan_needs(edit, message):
    cfg = Config.fromfile(I3D)
    if 'train_cfg' in edit:
        cfg.train_cfg = edit['train_cfg']
    else:
        cfg.train_dataloader.dataset = edit['train_dataloader']['dataset']
    with pytest.raises(ValueError, match=message):
        MultigridPlan.from_config(cfg)


def test_sub_bn_splits_count_the_clips_of_repeated_videos():
    """RepeatAugDataset: 1 video per index, 4 clips each. Short cycle only
    (batches of 4, 2, 1 videos), bn_base_size=4: 16, 8 and 4 clips, so 4, 2
    and 1 splits; counted per video none would split and sub-batch BN would
    never be enabled."""
    options = MultigridOptions(long_cycle=False, bn_base_size=4)
    per_video = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                              options=options)
    plan = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                         options=options, clips_per_sample=4)
    assert [x.batch_size for x in plan.shape_iterations()][:3] == [4, 2, 1]
    assert [x.sub_bn_splits for x in plan.shape_iterations()][:3] == [4, 2, 1]
    assert [x.sub_bn_splits for x in per_video.shape_iterations()][:3] == [
        1, 1, 1]
    assert max(plan.sub_bn_splits(s) for s in plan.stages) == 4
    with pytest.raises(ValueError, match=r'batches \[12, 6, 3\] \(3 clips '):
        MultigridPlan(PIPE, 1, 4, [STEP], options=options, clips_per_sample=3)


@pytest.mark.parametrize('dataset, clips', [
    (dict(type='RepeatAugDataset', num_repeats=2), 2),
    (dict(type='mmaction.RepeatAugDataset', num_repeats=3), 3),
    (dict(type='RepeatAugDataset'), 4),  # mmaction2's default num_repeats
    (dict(type='VideoDataset'), 1),
    (dict(type='NoSuchDataset'), 1),
])
def test_plan_from_config_reads_the_clips_per_video(dataset, clips):
    cfg = Config(dict(
        custom_hooks=[dict(type='mmext.MultigridHook', bn_base_size=1)],
        train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=4),
        train_dataloader=dict(batch_size=1,
                              dataset=dict(dataset, pipeline=PIPE)),
        param_scheduler=[STEP]))
    assert MultigridPlan.from_config(cfg).clips_per_sample == clips


def test_report_counts_videos_and_their_clips():
    from mmext.multigrid import describe
    options = MultigridOptions(long_cycle=False, bn_base_size=4)
    plan = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                         options=options, clips_per_sample=4)
    assert '(exact, 8 videos x 4 clips per process)' in describe(plan)
    plain = MultigridPlan(PIPE, 1, 4, [STEP], samples_per_rank=8,
                          options=options)
    assert '(exact, 8 clips per process)' in describe(plain)
