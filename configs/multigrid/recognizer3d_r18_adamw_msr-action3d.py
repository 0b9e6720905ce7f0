# A from-scratch ResNet3d-18 on MSR Action3D (../shared/data/msr_action3d:
# 556 real depth clips of 20 actions, cross-subject split, 283 train / 273 val,
# chance 0.05), the recipe of the time-to-accuracy benchmark
# (.dev_scripts/benchmark/multigrid_accuracy.py). CPU recipe: one run trains
# in about 10-15 minutes at one torch thread (measured figures:
# docs/en/benchmarks.md).
_base_ = '../demo/recognizer3d_r18_demo-video.py'

data_root = '{{$MMEXT_DATA_ROOT:../shared/data}}/msr_action3d'
clip_len = 16
crop_size = 64

# 16 base channels as the demo, with no temporal stride in conv1: the stem
# keeps T/2 frames (pool1) instead of T/4, so the 20 actions, which differ by
# motion, keep their temporal detail, a clip's compute (66 ms at T=16 on one
# core) outweighs its decoding (30 ms), and the model takes T=4 clips (the
# stem needs T >= conv1_stride_t * pool1_stride_t * 2), which the paper's
# coarsest long-cycle shape (T/4) trains.
model = dict(
    backbone=dict(conv1_stride_t=1),
    cls_head=dict(num_classes=20))

# The person is about a fifth of the 320x240 frame wide and spans its height:
# the central 240x240 square holds every action. Resize to a short side of 72
# and CenterCrop 72 take that square at 72 px; as both sizes come before the
# final crop, multigrid scales them alike (mmext.multigrid.data
# .resize_pipeline), so every grid shape sees the same central square (a
# CenterCrop(240) on the raw frame would shrink with S). UniformSample spans
# the whole clip (13-76 frames, one action each) at any T.
train_pipeline = [
    dict(type='DecordInit'),
    dict(type='UniformSample', clip_len=clip_len, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 72)),
    dict(type='CenterCrop', crop_size=72),
    dict(type='MultiScaleCrop', input_size=crop_size, scales=(1, 0.875, 0.75),
         random_crop=False, max_wh_scale_gap=1),
    dict(type='Resize', scale=(crop_size, crop_size), keep_ratio=False),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]
val_pipeline = [
    dict(type='DecordInit'),
    dict(type='UniformSample', clip_len=clip_len, num_clips=1,
         test_mode=True),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, crop_size)),
    dict(type='CenterCrop', crop_size=crop_size),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]
# The demo's loaders: batch 8, 2 workers each. Each video is decoded once,
# at the first Resize's size (short side 72 px for training, 64 for
# validation), into a frame cache on disk (mmext.CachedVideoDataset:
# work_dirs/frame_cache/msr_action3d_{train,val}_<hash>, 212 and 176 MiB), which
# every run of these configs reuses: decoding costs the same at every grid
# shape (docs/en/multigrid.md, "Data-bound runs").
train_dataloader = dict(
    dataset=dict(type='mmext.CachedVideoDataset',
                 ann_file=f'{data_root}/train.txt',
                 data_prefix=dict(video=data_root), pipeline=train_pipeline))
val_dataloader = dict(
    dataset=dict(type='mmext.CachedVideoDataset',
                 ann_file=f'{data_root}/val.txt',
                 data_prefix=dict(video=data_root), pipeline=val_pipeline))
test_dataloader = val_dataloader

# AdamW: with SGD this from-scratch model stayed at chance on the fight clips
# (docs/en/benchmarks.md, the accuracy benchmark).
optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-3, weight_decay=0.05))
train_cfg = dict(max_epochs=32, val_interval=8)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=2,
         convert_to_iter_based=True),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=32,
         milestones=[20, 28], gamma=0.1)
]
default_hooks = dict(
    logger=dict(interval=20),
    checkpoint=dict(interval=8, max_keep_ckpts=1))
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch, mmext's scheduler and resume checks.
runner_type = 'mmext.Runner'
