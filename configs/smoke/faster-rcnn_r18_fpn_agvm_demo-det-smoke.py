# AGVM on the demo detector for a few iterations (.dev_scripts/gpu_check.sh): the demo
# AGVM recipe (`make demo-data` first), re-estimating at every optimizer step
# from the first (2 accumulated micro-batches per step: in one process they are
# the halves; with several processes the ranks are), clipping in the first 2
# iterations, no validation. Works on CPU and CUDA, with --amp on CUDA.
_base_ = '../demo/faster-rcnn_r18_fpn_agvm_demo-det.py'

train_dataloader = dict(batch_size=2)
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=8,
                 val_interval=10**6)
val_cfg = None
val_dataloader = None
val_evaluator = None
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
optim_wrapper = dict(start_iter=0, update_interval=1, ema_momentum=0.5,
                     clip_grad=dict(max_norm=10.0), clip_grad_window=(0, 2))
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval=8))
log_processor = dict(by_epoch=False, window_size=1)
