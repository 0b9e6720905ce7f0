# CPU demo on the real fight/noFight clips (../shared/data/fight): the demo
# ResNet3d-18 recipe pointed at that data, plus multigrid.
_base_ = '../demo/recognizer3d_r18_multigrid_demo-video.py'

data_root = '{{$MMEXT_DATA_ROOT:../shared/data}}/fight'
model = dict(cls_head=dict(num_classes=2))
train_dataloader = dict(
    dataset=dict(ann_file=f'{data_root}/train.txt',
                 data_prefix=dict(video=data_root)))
val_dataloader = dict(
    dataset=dict(ann_file=f'{data_root}/val.txt',
                 data_prefix=dict(video=data_root)))
test_dataloader = val_dataloader
