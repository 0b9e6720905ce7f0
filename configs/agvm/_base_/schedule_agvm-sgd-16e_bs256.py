# The released batch-256 schedule (Sense-X/AGVM faster_rcnn_res50_bs256.py
# and mask_rcnn_res50_bs256.py): ./schedule_agvm-sgd-16e.py with lr
# 0.16*sqrt(2), 920 warm-up iterations, clipping in [820, 1020] and AGVM from
# iteration 1020 (not the batch-512 schedule rescaled: docs/en/agvm.md).
_base_ = './schedule_agvm-sgd-16e.py'

warmup_iters = 920
agvm_start = warmup_iters + 100

param_scheduler = [
    dict(type='mmext.ExpWarmupLR', start_factor=0.001, by_epoch=False,
         begin=0, end=warmup_iters),
    dict(type='MultiStepLR', begin=0, end=16, by_epoch=True,
         milestones=[12, 14], gamma=0.1)
]
optim_wrapper = dict(
    optimizer=dict(lr=0.16 * 2**0.5),
    start_iter=agvm_start,
    clip_grad_window=(agvm_start - 200, agvm_start))
auto_scale_lr = dict(base_batch_size=256)
