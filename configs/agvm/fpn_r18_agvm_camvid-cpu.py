# AGVM for semantic segmentation on a CPU: Semantic FPN with a ResNet-18
# backbone (BN, no pretrained weights) on the real CamVid subset in
# ../shared/data/camvid (81 train / 20 val frames, 11 classes, 11 = void),
# 240x180 inputs with 128 px crops. 2 images per micro-batch, 2 micro-batches
# per step: one process uses the micro-batches as halves,
# `tools/dist_train.sh CONFIG 2` the ranks.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py', 'mmseg::_base_/default_runtime.py'
]

data_root = '{{$MMEXT_DATA_ROOT:../shared/data}}/camvid/'
crop_size = (128, 128)
norm_cfg = dict(type='BN', requires_grad=True)
classes = ('Sky', 'Building', 'Pole', 'Road', 'Pavement', 'Tree',
           'SignSymbol', 'Fence', 'Car', 'Pedestrian', 'Bicyclist')
palette = [[128, 128, 128], [128, 0, 0], [192, 192, 128], [128, 64, 128],
           [60, 40, 222], [128, 128, 0], [192, 128, 128], [64, 64, 128],
           [64, 0, 128], [64, 64, 0], [0, 128, 192]]

model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    backbone=dict(depth=18, norm_cfg=norm_cfg, init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512], out_channels=64),
    decode_head=dict(in_channels=[64, 64, 64, 64], channels=64,
                     num_classes=len(classes), ignore_index=11,
                     norm_cfg=norm_cfg))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='Resize', scale=(240, 180), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(240, 180), keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='PackSegInputs')
]
dataset = dict(
    type='BaseSegDataset',
    data_root=data_root,
    metainfo=dict(classes=classes, palette=palette),
    data_prefix=dict(img_path='CamVid/val', seg_map_path='CamVid/valannot'),
    img_suffix='.png',
    seg_map_suffix='.png')
train_dataloader = dict(
    batch_size=2,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(**dataset, ann_file='train.txt', pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(**dataset, ann_file='val.txt', pipeline=test_pipeline))
test_dataloader = val_dataloader
# Void (11) left out of the score as it is of the loss: IoUMetric's own
# default (255) would count predictions on void pixels as false positives.
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'], ignore_index=11)
test_evaluator = val_evaluator

train_cfg = dict(type='IterBasedTrainLoop', max_iters=40, val_interval=40)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=10),
    dict(type='PolyLR', eta_min=1e-4, power=0.9, begin=10, end=40,
         by_epoch=False)
]
optim_wrapper = dict(
    type='mmext.AGVMOptimWrapper',
    constructor='mmext.AGVMOptimWrapperConstructor',
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=5e-4),
    module_names=['backbone', 'neck', 'decode_head'],
    accumulative_counts=2,
    update_interval=2,
    start_iter=10,
    clip_grad=dict(max_norm=10.0),
    clip_grad_window=(0, 10))
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=5, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=40))
log_processor = dict(by_epoch=False)
# Stop at the first non-finite loss or gradient, naming it
# (mmext.NaNGuardHook).
custom_hooks = [dict(type='mmext.NaNGuardHook')]
# mmext.Runner (also with the toolboxes' own tools/train.py): auto_scale_lr by
# the effective batch (loader x world size x accumulative_counts), mmext's
# resume checks.
runner_type = 'mmext.Runner'
