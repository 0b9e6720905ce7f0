# Faster R-CNN R50-FPN with AGVM at batch 256 (16 GPUs x 16 images), the
# paper's recipe (released config faster_rcnn_res50_bs256.py): lr
# 0.16*sqrt(2), 920 warm-up iterations, clipping in [820, 1020], AGVM from
# iteration 1020; otherwise as the batch-512 recipe.
_base_ = './faster-rcnn_r50_fpn_agvm_32xb16-16e_coco.py'

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
