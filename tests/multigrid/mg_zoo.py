"""Tiny recognizers of the mmaction2 1.2 model zoo, built from its configs.

Each entry is ``(mmaction2 config, model overrides, (T, S) of the recipe)``:
the recipe's model with reduced depth and width, no weights
(``init_cfg=None``, ``pretrained=None``). :func:`build` returns the
recognizer; on the ``meta`` device no memory is allocated, which keeps C3D
(fixed 8192-wide ``fc6``) and the recipes' full input sizes cheap.
"""
import copy
import os.path as osp

import torch
from mmengine.config import Config

import mmext  # noqa: F401

_NO_WEIGHTS = dict(pretrained=None)
FAMILIES = {
    'ResNet3d': (
        'recognition/i3d/i3d_imagenet-pretrained-r50_8xb8-32x2x1-100e_'
        'kinetics400-rgb.py',
        dict(backbone=dict(depth=18, base_channels=8, pretrained2d=False,
                           inflate=((1, 1), (1, 1), (1, 1), (1, 1)),
                           **_NO_WEIGHTS),
             cls_head=dict(in_channels=64)), (32, 224)),
    'SlowFast': (
        'recognition/slowfast/slowfast_r50_8xb8-8x8x1-steplr-256e_'
        'kinetics400-rgb.py',
        dict(backbone=dict(
            slow_pathway=dict(depth=18, base_channels=16),
            fast_pathway=dict(depth=18, base_channels=2)),
            cls_head=dict(in_channels=144)), (32, 224)),
    'X3D': (
        'recognition/x3d/x3d_s_13x6x1_facebook-kinetics400-rgb.py',
        dict(backbone=dict(gamma_w=0.5, gamma_d=1), cls_head=dict(
            in_channels=288)), (13, 160)),
    'C3D': (
        'recognition/c3d/c3d_sports1m-pretrained_8xb30-16x1x1-45e_ucf101-'
        'rgb.py', dict(backbone=dict(**_NO_WEIGHTS)), (16, 112)),
    'TSM': (
        'recognition/tsm/tsm_imagenet-pretrained-r50_8xb16-1x1x8-50e_'
        'kinetics400-rgb.py',
        dict(backbone=dict(depth=18, **_NO_WEIGHTS),
             cls_head=dict(in_channels=512)), (1, 224)),
    'TimeSformer': (
        'recognition/timesformer/timesformer_divST_8xb8-8x32x1-15e_'
        'kinetics400-rgb.py',
        dict(backbone=dict(embed_dims=32, num_heads=2,
                           num_transformer_layers=2, **_NO_WEIGHTS),
             cls_head=dict(in_channels=32)), (8, 224)),
    'VisionTransformer': (
        'recognition/videomae/vit-base-p16_videomae-k400-pre_16x4x1_'
        'kinetics-400.py',
        dict(backbone=dict(embed_dims=32, depth=2, num_heads=2),
             cls_head=dict(in_channels=32)), (16, 224)),
    'SwinTransformer3D': (
        'recognition/swin/swin-tiny-p244-w877_in1k-pre_8xb8-amp-32x2x1-30e_'
        'kinetics400-rgb.py',
        dict(backbone=dict(arch=dict(_delete_=True, embed_dims=8, depths=[1, 2, 1, 1],
                                     num_heads=[1, 1, 1, 1]),
                           pretrained2d=False, **_NO_WEIGHTS),
             cls_head=dict(in_channels=64)), (32, 224)),
    'MViT': (
        'recognition/mvit/mvit-small-p244_32xb16-16x4x1-200e_kinetics400-'
        'rgb.py',
        dict(backbone=dict(arch=dict(_delete_=True, embed_dims=8, num_layers=4,
                                     num_heads=1,
                                     downscale_indices=[1, 2, 3])),
             cls_head=dict(in_channels=64)), (16, 224)),
    'UniFormerV2': (
        'recognition/uniformerv2/uniformerv2-base-p16-res224_clip_8xb32-u8_'
        'kinetics400-rgb.py',
        dict(backbone=dict(width=32, layers=3, heads=2, return_list=[1, 2],
                           n_layers=2, n_dim=32, n_head=2,
                           mlp_dropout=[0.5, 0.5], clip_pretrained=False,
                           **_NO_WEIGHTS),
             cls_head=dict(in_channels=32)), (8, 224)),
}


def model_config(family: str, **backbone):
    """The tiny model config of ``family`` (``backbone`` overrides more)."""
    path, overrides, _ = FAMILIES[family]
    import mmaction
    cfg = Config.fromfile(osp.join(osp.dirname(mmaction.__file__), '.mim',
                                   'configs', path))
    # merge_from_dict consumes the _delete_ keys.
    cfg.merge_from_dict(dict(model=copy.deepcopy(overrides)))
    cfg.model.backbone.update(backbone)
    cfg.model.pop('init_cfg', None)
    cfg.model.backbone.pop('init_cfg', None)
    return cfg.model


def build(family: str, device: str = 'cpu', **backbone):
    """The tiny recognizer of ``family``, on ``device``, in train mode."""
    from mmaction.registry import MODELS
    from mmengine.registry import init_default_scope
    init_default_scope('mmaction')
    with torch.device(device):
        model = MODELS.build(model_config(family, **backbone))
    return model.train()


def base_shape(family: str):
    """``(T, S)`` of the family's recipe."""
    return FAMILIES[family][2]
