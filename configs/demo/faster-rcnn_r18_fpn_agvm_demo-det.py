# AGVM on the embedded demo detection set (`make demo`): the plain demo recipe
# with the optimizer wrapper switched to AGVM. One CPU process has no two
# halves of ranks, so the halves are the two accumulated micro-batches of
# every step (accumulative_counts=2: 2 x 4 images per step). AGVM starts after
# half of the 12-iteration warm-up and re-estimates every 2 steps; gradients
# are clipped only before the start, as in the paper's recipes.
_base_ = './faster-rcnn_r18_fpn_demo-det.py'

optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head'],
    accumulative_counts=2,
    update_interval=2,
    start_iter=6,
    clip_grad=dict(max_norm=10.0),
    clip_grad_window=(0, 6))
default_hooks = dict(logger=dict(interval=2))
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
