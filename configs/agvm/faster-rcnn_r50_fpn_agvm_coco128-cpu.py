# AGVM on real data on a CPU: Faster R-CNN R50-FPN (no pretrained weights,
# 320 px inputs) on ../shared/data/coco128, 2 images per micro-batch and 2
# micro-batches per step. Works in one process (halves = the two accumulated
# micro-batches) and with `tools/dist_train.sh CONFIG 2` (halves = the two
# ranks; accumulation then only enlarges the batch).
_base_ = '../smoke/faster-rcnn_r50_fpn_coco128-smoke.py'

optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    module_names=['backbone', 'neck', 'rpn_head', 'roi_head'],
    accumulative_counts=2,
    update_interval=2,
    start_iter=10,
    clip_grad=dict(max_norm=10.0),
    clip_grad_window=(0, 10))
# Stop at the first non-finite loss or gradient, naming it (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
