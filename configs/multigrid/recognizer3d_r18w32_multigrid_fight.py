# The accuracy benchmark's config (tools/benchmark/multigrid_accuracy.py): the
# compute-bound fight config (112 px crops, the paper's short cycle) at half
# width, 32 base channels, so that 3 seeds of recipe and multigrid runs of 6
# recipe epochs fit in 30 minutes on 2 shared CPU cores (24 min at load 3-5:
# a base-shape iteration computes in 0.65-0.74 s on one thread; data wait 2 %
# of iteration time for the recipe, 10-11 % for multigrid;
# docs/en/benchmarks.md).
_base_ = './recognizer3d_r18w64_multigrid_fight.py'

model = dict(
    backbone=dict(base_channels=32),
    cls_head=dict(in_channels=256))
