# The stock mmaction2 I3D R50 recipe on the real two-class surveillance clips
# (../shared/data/fight; set MMEXT_DATA_ROOT to read it elsewhere), with short
# small clips and no pretrained weights: a CPU smoke test of the whole pipeline,
# top-1 accuracy included.
_base_ = 'mmaction::recognition/i3d/i3d_imagenet-pretrained-r50_8xb8-32x2x1-100e_kinetics400-rgb.py'  # noqa: E501

data_root = '{{$MMEXT_DATA_ROOT:../shared/data}}/fight'
clip_len = 8
frame_interval = 4
crop_size = 64

model = dict(
    backbone=dict(pretrained=None, pretrained2d=False),
    cls_head=dict(num_classes=2))

train_pipeline = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=clip_len,
         frame_interval=frame_interval, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 72)),
    dict(type='MultiScaleCrop', input_size=crop_size, scales=(1, 0.8),
         random_crop=False, max_wh_scale_gap=0),
    dict(type='Resize', scale=(crop_size, crop_size), keep_ratio=False),
    dict(type='Flip', flip_ratio=0.5),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]
val_pipeline = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=clip_len,
         frame_interval=frame_interval, num_clips=1, test_mode=True),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 72)),
    dict(type='CenterCrop', crop_size=crop_size),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]

train_dataloader = dict(
    batch_size=4,
    num_workers=2,
    dataset=dict(
        ann_file=f'{data_root}/train.txt',
        data_prefix=dict(video=data_root),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4,
    num_workers=2,
    dataset=dict(
        ann_file=f'{data_root}/val.txt',
        data_prefix=dict(video=data_root),
        pipeline=val_pipeline))
test_dataloader = val_dataloader

train_cfg = dict(max_epochs=2, val_interval=1)
param_scheduler = [
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=2, milestones=[1],
         gamma=0.1)
]
default_hooks = dict(logger=dict(interval=5),
                     checkpoint=dict(interval=1, max_keep_ckpts=1,
                                     save_best=None))
auto_scale_lr = dict(enable=False, base_batch_size=4)
