# Multigrid on the demo video recipe for a few iterations (.dev_scripts/gpu_check.sh):
# 4 recipe epochs become 6 multigrid epochs, 52 iterations, through three
# long-cycle shapes (batch 16/8/4 per process: sub-batch BN with 4, 2 and 1
# splits; the demo's long cycle alone), precise BN at the end and one
# validation at the end (`make demo-data` first). Works on CPU and CUDA.
_base_ = '../demo/recognizer3d_r18_multigrid_demo-video.py'

train_cfg = dict(max_epochs=4, val_interval=4)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=4, milestones=[3],
         gamma=0.1)
]
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=4))
