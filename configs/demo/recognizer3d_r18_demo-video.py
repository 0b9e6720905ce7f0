# A small 3D CNN (I3D-style ResNet3d-18, 16 base channels) on the embedded demo
# video set (`make demo-data`): 4 classes = direction of a moving square, so the
# model needs temporal information. Trains in about a minute on 2 CPU cores.
_base_ = 'mmaction::recognition/i3d/i3d_imagenet-pretrained-r50_8xb8-32x2x1-100e_kinetics400-rgb.py'  # noqa: E501

data_root = '{{$MMEXT_DEMO_DATA:data/demo}}/video'
clip_len = 16
frame_interval = 2
crop_size = 56

model = dict(
    backbone=dict(
        depth=18,
        base_channels=16,
        pretrained=None,
        pretrained2d=False,
        inflate=((1, 1), (1, 1), (1, 1), (1, 1))),
    cls_head=dict(in_channels=128, num_classes=4, dropout_ratio=0.2))

# No Flip: a horizontal flip swaps the left/right classes.
train_pipeline = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=clip_len,
         frame_interval=frame_interval, num_clips=1),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 64)),
    dict(type='MultiScaleCrop', input_size=crop_size, scales=(1, 0.875),
         random_crop=False, max_wh_scale_gap=0),
    dict(type='Resize', scale=(crop_size, crop_size), keep_ratio=False),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]
val_pipeline = [
    dict(type='DecordInit'),
    dict(type='SampleFrames', clip_len=clip_len,
         frame_interval=frame_interval, num_clips=1, test_mode=True),
    dict(type='DecordDecode'),
    dict(type='Resize', scale=(-1, 64)),
    dict(type='CenterCrop', crop_size=crop_size),
    dict(type='FormatShape', input_format='NCTHW'),
    dict(type='PackActionInputs')
]

train_dataloader = dict(
    batch_size=8,
    num_workers=2,
    dataset=dict(
        ann_file=f'{data_root}/train.txt',
        data_prefix=dict(video=data_root),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=2,
    dataset=dict(
        ann_file=f'{data_root}/val.txt',
        data_prefix=dict(video=data_root),
        pipeline=val_pipeline))
test_dataloader = val_dataloader

train_cfg = dict(max_epochs=12, val_interval=4)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='MultiStepLR', by_epoch=True, begin=0, end=12,
         milestones=[8, 11], gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=0.05))
default_hooks = dict(
    logger=dict(interval=4),
    checkpoint=dict(interval=4, max_keep_ckpts=2, save_best=None))
auto_scale_lr = dict(enable=False, base_batch_size=8)
randomness = dict(seed=0)
