"""mmext.agvm.constructor: module names checked against a model, every
trainable parameter assigned to one module or to 'others', and
AGVMOptimWrapperConstructor on top of the recipes' own constructors.

For each constructor kind the toolboxes' recipes use, every parameter's
optimizer options under AGVM must equal what the recipe's constructor alone
gives it, with the groups split by module.
"""
import re
import warnings

import pytest
from agvm_toy import build_wrapper
from mmengine.hub import get_config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, DefaultScope, init_default_scope
from torch import nn

from mmext.agvm import AGVMOptimWrapper
from mmext.agvm.constructor import (OTHERS, assign_parameters,
                                    default_module_names,
                                    resolve_module_names,
                                    split_groups_by_module)

def _detector():
    model = nn.Module()
    model.backbone = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model.neck = nn.Linear(2, 2)
    model.roi_head = nn.Module()
    model.roi_head.bbox_head = nn.Linear(2, 2)
    model.roi_head.mask_head = nn.Linear(2, 2)
    model.frozen = nn.Linear(2, 2).requires_grad_(False)
    model.data_preprocessor = nn.Identity()
    return model


def test_default_names_are_the_trainable_children():
    """A child with both a bbox_head and a mask_head gives two modules, as
    the reference's GroupOptimizerConstructor does."""
    assert default_module_names(_detector()) == [
        'backbone', 'neck', 'roi_head.bbox_head', 'roi_head.mask_head']
    model = _detector()
    del model.roi_head.mask_head
    assert default_module_names(model) == ['backbone', 'neck', 'roi_head']
    model = _detector()
    model.roi_head.mask_head.requires_grad_(False)
    assert default_module_names(model) == ['backbone', 'neck', 'roi_head']


def test_mask_rcnn_heads_get_their_own_factors():
    """mmdet's Mask R-CNN: roi_head's bbox_head and mask_head (its RoI
    extractors have no parameters); Faster R-CNN keeps roi_head."""
    import os.path as osp

    import mmdet
    from mmengine.config import Config
    init_default_scope('mmdet')
    models = osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs',
                      '_base_', 'models')
    names = {}
    for arch in ('mask-rcnn', 'faster-rcnn'):
        cfg = Config.fromfile(osp.join(models, f'{arch}_r50_fpn.py'))
        cfg.model.backbone.update(depth=18, init_cfg=None)
        cfg.model.neck.in_channels = [64, 128, 256, 512]
        model = MODELS.build(cfg.model)
        names[arch] = resolve_module_names(model, None)
        owners = assign_parameters(model, names[arch])
        assert OTHERS not in owners.values()
    assert names == {
        'mask-rcnn': ['backbone', 'neck', 'rpn_head', 'roi_head.bbox_head',
                      'roi_head.mask_head'],
        'faster-rcnn': ['backbone', 'neck', 'rpn_head', 'roi_head']}


def test_frozen_first_module_moves_the_default_anchor_with_a_warning():
    """mmdet's ResNet with frozen_stages=4 has no trainable parameter: the
    default anchor would silently be the neck."""
    model = _detector()
    model.backbone.requires_grad_(False)
    with pytest.warns(UserWarning, match=(
            r"anchor \(module 0\) is 'neck', not the frozen 'backbone'")):
        names = resolve_module_names(model, None)
    assert names[0] == 'neck'


def test_default_anchor_at_the_first_module_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert resolve_module_names(_detector(), None)[0] == 'backbone'


def test_one_listed_module_is_refused():
    """The anchor's factor is 1 and 'others' keep 1: nothing would move."""
    with pytest.raises(ValueError, match=re.escape(
            "module_names=['backbone']: list 2+ modules")):
        build_wrapper(_detector(), module_names=['backbone'],
                      accumulative_counts=2)


def test_one_trainable_module_by_default_warns():
    """Everything but the neck frozen (a hook may unfreeze it later)."""
    model = _detector()
    for name in ('backbone', 'roi_head'):
        getattr(model, name).requires_grad_(False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert build_wrapper(model, module_names=None,
                             accumulative_counts=2).module_names == ['neck']
    assert any("nothing: 'neck' is the only trainable" in str(w.message)
               for w in caught)


def test_one_module_is_measurable_outside_agvm():
    """The analysis tools measure one module's variance."""
    assert resolve_module_names(_detector(), ['neck']) == ['neck']


def test_longest_listed_prefix_owns_a_parameter():
    model = _detector()
    names = resolve_module_names(model, ['backbone', 'roi_head',
                                         'roi_head.mask_head'])
    owners = assign_parameters(model, names)
    by_name = {n: owners.get(id(p)) for n, p in model.named_parameters()}
    assert by_name == {
        'backbone.0.weight': 'backbone', 'backbone.0.bias': 'backbone',
        'backbone.1.weight': 'backbone', 'backbone.1.bias': 'backbone',
        'neck.weight': OTHERS, 'neck.bias': OTHERS,
        'roi_head.bbox_head.weight': 'roi_head',
        'roi_head.bbox_head.bias': 'roi_head',
        'roi_head.mask_head.weight': 'roi_head.mask_head',
        'roi_head.mask_head.bias': 'roi_head.mask_head',
        'frozen.weight': OTHERS, 'frozen.bias': OTHERS}


@pytest.mark.parametrize('names, message', [
    (['backbone', 'backbone'], 'must be distinct'),
    (['backbone', 'others'], "must be distinct and not 'others'"),
    (['backbon'], r"'backbon' is not a submodule"),
    (['backbon'], re.escape("['backbone', 'neck', 'roi_head']")),
    (['frozen', 'neck'], "the anchor 'frozen'"),
    ('backbone', "module_names='backbone'"),
    (['backbone', 3], re.escape("module_names=['backbone', 3]")),
    ([], 'module_names is empty'),
    ([''], "'' names the whole model"),
])
def test_wrong_names_say_what_to_write(names, message):
    with pytest.raises(ValueError, match=message):
        resolve_module_names(_detector(), names)


@pytest.mark.parametrize('names, message', [
    (['backbone', 'frozen'], "'frozen' owns no trainable parameter (frozen)"),
    (['neck', 'backbone', 'backbone.0', 'backbone.1'],
     "'backbone' owns no trainable parameter (claimed by ['backbone.0', "),
    (['backbone', 'data_preprocessor'], '(no parameters): remove it'),
    (['frozen', 'neck'], "the anchor 'frozen' owns no trainable parameter"),
])
def test_a_listed_module_without_parameters_is_refused(names, message):
    """Frozen, every parameter claimed by a more specific listed name, or
    none at all: its gradient variance would be undefined."""
    with pytest.raises(ValueError, match=re.escape(message)):
        resolve_module_names(_detector(), names)


def test_groups_without_a_listed_module_are_refused():
    """A recipe constructor that leaves a module's parameters out."""
    model = _detector()
    names = ['backbone', 'neck']
    groups = [dict(params=list(model.backbone.parameters()))]
    with pytest.raises(ValueError, match=re.escape(
            "no trainable parameter of module_names ['neck']")):
        split_groups_by_module(groups, assign_parameters(model, names),
                               names)


class TiedDecoder(nn.Module):
    """``decoder`` ties all its parameters to ``encoder``'s (as a language
    model's output layer to its embedding)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(2, 2)
        self.neck = nn.Linear(2, 2)
        self.decoder = nn.Linear(2, 2)
        self.decoder.weight = self.encoder.weight
        self.decoder.bias = self.encoder.bias


def test_tied_parameters_belong_to_their_first_module():
    """The default names leave out a module that owns no parameter of its
    own; mmengine's bypass_duplicate then builds with AGVM, each parameter
    with mmengine's options."""
    model = TiedDecoder()
    assert default_module_names(model) == ['encoder', 'neck']
    recipe, agvm = _recipe_and_agvm(model, dict(
        optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
        paramwise_cfg=dict(bypass_duplicate=True, bias_lr_mult=2.)), None)
    _assert_same_options_split_by_module(recipe, agvm, model)
    assert {g['agvm_module'] for g in agvm.optimizer.param_groups} == {
        'encoder', 'neck'}


def test_a_listed_tied_module_names_the_cause():
    with pytest.raises(ValueError, match=re.escape(
            "'decoder' owns no trainable parameter (tied to encoder.w")):
        resolve_module_names(TiedDecoder(), ['encoder', 'decoder'])


AGVM = dict(type='mmext.AGVMOptimWrapper',
            constructor='mmext.AGVMOptimWrapperConstructor',
            accumulative_counts=2)


def _options(optimizer, model):
    """Parameter name -> its group's options (without the bookkeeping)."""
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for group in optimizer.param_groups:
        options = {
            k: v for k, v in group.items()
            if k not in ('params', 'param_names', 'agvm_module')
        }
        for param in group['params']:
            out[names[id(param)]] = options
    return out


def _recipe_and_agvm(model, recipe_cfg, scope):
    """Build the recipe's wrapper and its AGVM switch in ``scope``."""
    agvm_cfg = dict(recipe_cfg, **AGVM)
    agvm_cfg.pop('type', None)
    agvm_cfg['type'] = AGVM['type']
    if 'constructor' in recipe_cfg:
        agvm_cfg['base_constructor'] = recipe_cfg['constructor']
    with DefaultScope.overwrite_default_scope(scope):
        recipe = build_optim_wrapper(model, recipe_cfg)
        agvm = build_optim_wrapper(model, agvm_cfg)
    assert isinstance(agvm, AGVMOptimWrapper)
    return recipe, agvm


def _assert_same_options_split_by_module(recipe, agvm, model):
    expected = _options(recipe.optimizer, model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    got = _options(agvm.optimizer, model)
    assert set(got) == trainable
    for name in trainable:
        assert got[name] == expected[name], name
    for group in agvm.optimizer.param_groups:
        names = group.get('param_names')
        ids = {id(p) for p in group['params']}
        owner = group['agvm_module']
        for name, param in model.named_parameters():
            if id(param) in ids:
                assert (name.split('.')[0] == owner
                        or owner == 'others'
                        and name.split('.')[0] not in agvm.module_names)
        if names is not None:  # mmdet/mmseg keep names parallel to params
            by_name = dict(model.named_parameters())
            assert [id(by_name[n]) for n in names] == [
                id(p) for p in group['params']
            ]
    return got


class ConvNeXt(nn.Module):
    """Parameter names and class name of mmpretrain's ConvNeXt, which the
    mmdet/mmseg decay constructors map to layer ids (4 stages, stage 2 of 6
    blocks)."""

    def __init__(self):
        super().__init__()
        self.downsample_layers = nn.ModuleList(
            nn.Conv2d(2, 2, 1) for _ in range(4))
        self.stages = nn.ModuleList(
            nn.Sequential(*[nn.Conv2d(2, 2, 1) for _ in range(depth)])
            for depth in (1, 1, 6, 1))


class ConvNeXtDetector(nn.Module):

    def __init__(self):
        super().__init__()
        self.backbone = ConvNeXt()
        self.neck = nn.Conv2d(2, 2, 1)
        self.head = nn.Linear(2, 2)


CONVNEXT_RECIPE = dict(  # mmdet configs/convnext/mask-rcnn_convnext-t-...
    type='OptimWrapper',
    constructor='LearningRateDecayOptimizerConstructor',
    paramwise_cfg={'decay_rate': 0.95, 'decay_type': 'layer_wise',
                   'num_layers': 6},
    optimizer=dict(type='AdamW', lr=0.0001, betas=(0.9, 0.999),
                   weight_decay=0.05))


@pytest.mark.parametrize('scope', ['mmdet', 'mmseg'])
@pytest.mark.parametrize('decay_type', ['layer_wise', 'stage_wise'])
def test_learning_rate_decay_constructor_convnext(scope, decay_type):
    model = ConvNeXtDetector()
    recipe_cfg = dict(CONVNEXT_RECIPE,
                      paramwise_cfg=dict(CONVNEXT_RECIPE['paramwise_cfg'],
                                         decay_type=decay_type))
    recipe, agvm = _recipe_and_agvm(model, recipe_cfg, scope)
    got = _assert_same_options_split_by_module(recipe, agvm, model)
    # num_layers + 2 = 8 LR levels: lr = 1e-4 * 0.95 ** (8 - id - 1).
    layer_id = {
        'layer_wise': {'backbone.downsample_layers.0.weight': 0,
                       'backbone.stages.2.0.weight': 3,
                       'backbone.stages.2.5.weight': 4,
                       'backbone.stages.3.0.weight': 6,
                       'neck.weight': 7},
        'stage_wise': {'backbone.downsample_layers.0.weight': 0,
                       'backbone.stages.2.0.weight': 3,
                       'backbone.stages.2.5.weight': 3,
                       'backbone.stages.3.0.weight': 4,
                       'neck.weight': 7},
    }[decay_type]
    for name, lid in layer_id.items():
        assert got[name]['lr'] == pytest.approx(1e-4 * 0.95**(8 - lid - 1))
    assert got['neck.weight']['weight_decay'] == 0.05
    assert got['neck.bias']['weight_decay'] == 0.
    assert agvm.module_names == ['backbone', 'neck', 'head']
    # Several LRs inside the backbone: the decay is not flattened.
    assert len({got[n]['lr'] for n in got if n.startswith('backbone')}) >= 4


@pytest.fixture(scope='module')
def beit_upernet():
    """The stock mmseg BEiT-UperNet recipe, shrunk to 2 layers of width 32."""
    cfg = get_config(
        'mmseg::beit/beit-base_upernet_8xb2-160k_ade20k-640x640.py')
    init_default_scope('mmseg')
    bn = dict(type='BN', requires_grad=True)
    model = cfg.model
    model.pretrained = None
    model.backbone.update(img_size=(32, 32), embed_dims=32, num_layers=2,
                          num_heads=2, out_indices=[0, 1, 1, 1],
                          init_cfg=None)
    model.neck.embed_dim = 32
    model.decode_head.update(in_channels=[32] * 4, channels=16, norm_cfg=bn)
    model.auxiliary_head.update(in_channels=32, channels=16, norm_cfg=bn)
    return MODELS.build(model), cfg.optim_wrapper


def _beit_checks(got):
    # (num_layers=2) + 2 = 4 levels: cls token 0, layer i -> i + 1, rest 3.
    for name, lid in [('backbone.cls_token', 0),
                      ('backbone.patch_embed.projection.weight', 0),
                      ('backbone.layers.0.attn.qkv.weight', 1),
                      ('backbone.layers.1.attn.qkv.weight', 2),
                      ('decode_head.conv_seg.weight', 3)]:
        assert got[name]['lr'] == pytest.approx(3e-5 * 0.9**(4 - lid - 1))
    assert got['backbone.layers.1.attn.qkv.weight']['weight_decay'] == 0.05
    assert got['backbone.layers.1.ln1.weight']['weight_decay'] == 0.


def test_layer_decay_constructor_beit(beit_upernet):
    model, optim_cfg = beit_upernet
    recipe_cfg = optim_cfg.to_dict()
    recipe_cfg.pop('_delete_', None)
    assert recipe_cfg['constructor'] == 'LayerDecayOptimizerConstructor'
    recipe_cfg['paramwise_cfg'] = dict(num_layers=2, layer_decay_rate=0.9)
    recipe, agvm = _recipe_and_agvm(model, recipe_cfg, 'mmseg')
    _beit_checks(_assert_same_options_split_by_module(recipe, agvm, model))
    assert agvm.module_names == ['backbone', 'neck', 'decode_head',
                                 'auxiliary_head']


def test_learning_rate_decay_constructor_vit(beit_upernet):
    model, optim_cfg = beit_upernet
    recipe_cfg = dict(
        type='OptimWrapper',
        optimizer=optim_cfg.optimizer.to_dict(),
        constructor='mmseg.LearningRateDecayOptimizerConstructor',
        paramwise_cfg=dict(num_layers=2, decay_rate=0.9,
                           decay_type='layer_wise_vit'))
    recipe, agvm = _recipe_and_agvm(model, recipe_cfg, None)
    _beit_checks(_assert_same_options_split_by_module(recipe, agvm, model))


def test_default_constructor_paramwise_options_resnet():
    init_default_scope('mmdet')
    cfg = get_config('mmext::demo/faster-rcnn_r18_fpn_demo-det.py')
    model = MODELS.build(cfg.model)
    recipe_cfg = dict(
        optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=1e-4),
        paramwise_cfg=dict(norm_decay_mult=0., bias_lr_mult=2.,
                           custom_keys={'backbone.layer2': dict(
                               lr_mult=0.1, decay_mult=0.5)}))
    recipe, agvm = _recipe_and_agvm(model, recipe_cfg, 'mmdet')
    got = _assert_same_options_split_by_module(recipe, agvm, model)
    assert got['backbone.layer2.0.conv1.weight']['lr'] == pytest.approx(2e-3)
    assert got['backbone.layer2.0.conv1.weight'][
        'weight_decay'] == pytest.approx(5e-5)
    assert got['backbone.layer3.0.bn1.weight']['weight_decay'] == 0.
    assert got['neck.lateral_convs.0.conv.bias']['lr'] == pytest.approx(0.04)
    assert got['rpn_head.rpn_conv.weight']['lr'] == pytest.approx(0.02)
    assert agvm.module_names == ['backbone', 'neck', 'rpn_head', 'roi_head']


def test_decay_keys_without_their_constructor_raise():
    """The recipe's constructor forgotten: its keys must not vanish."""
    cfg = dict(AGVM, optimizer=dict(type='AdamW', lr=1e-4),
               paramwise_cfg=CONVNEXT_RECIPE['paramwise_cfg'])
    with pytest.raises(ValueError) as err:
        build_optim_wrapper(ConvNeXtDetector(), cfg)
    msg = str(err.value)
    assert "['decay_rate', 'decay_type', 'num_layers']" in msg
    assert 'DefaultOptimWrapperConstructor reads no paramwise_cfg' in msg


@pytest.mark.parametrize('paramwise_cfg,base,unread', [
    (dict(decay_rate=0.9), 'DefaultOptimWrapperConstructor',
     "['decay_rate']"),
    # The decay constructors replace mmengine's rules: custom_keys does
    # nothing there, even in the recipe alone.
    (dict(CONVNEXT_RECIPE['paramwise_cfg'],
          custom_keys={'neck': dict(lr_mult=0.)}),
     'mmdet.LearningRateDecayOptimizerConstructor', "['custom_keys']"),
])
def test_unread_paramwise_keys_raise(paramwise_cfg, base, unread):
    cfg = dict(AGVM, optimizer=dict(type='AdamW', lr=1e-4,
                                    weight_decay=0.05),
               base_constructor=base, paramwise_cfg=paramwise_cfg)
    with pytest.raises(ValueError,
                       match=re.escape(f'paramwise_cfg keys {unread}')):
        build_optim_wrapper(ConvNeXtDetector(), cfg)


@pytest.mark.parametrize('paramwise_cfg,base,typo,key', [
    (dict(norm_decay_mul=0., decay_rate=0.9), 'DefaultOptimWrapperConstructor',
     'norm_decay_mul', 'norm_decay_mult'),
    (dict(decay_rate=0.95, decay_typ='stage_wise', num_layers=6),
     'mmdet.LearningRateDecayOptimizerConstructor', 'decay_typ', 'decay_type'),
])
def test_misspelt_paramwise_key_is_told_the_key_it_misses(
        paramwise_cfg, base, typo, key):
    """A typo is not sent to base_constructor: the closest key the
    constructor looked up is named."""
    cfg = dict(AGVM, optimizer=dict(type='AdamW', lr=1e-4,
                                    weight_decay=0.05),
               base_constructor=base, paramwise_cfg=paramwise_cfg)
    with pytest.raises(ValueError) as err:
        build_optim_wrapper(ConvNeXtDetector(), cfg)
    assert f"keys ['{typo}']: did you mean ['{key}']" in str(err.value)
    assert 'base_constructor' not in str(err.value)


def test_custom_key_matching_nothing_warns():
    cfg = dict(AGVM, optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
               paramwise_cfg=dict(custom_keys={
                   'neck': dict(lr_mult=0.5),
                   'absolute_pos_embed': dict(decay_mult=0.)}))
    with pytest.warns(UserWarning,
                      match=r"custom_keys \['absolute_pos_embed'\] match"):
        wrapper = build_optim_wrapper(ConvNeXtDetector(), cfg)
    lrs = {g['agvm_module']: g['lr'] for g in wrapper.optimizer.param_groups}
    assert lrs['neck'] == 0.05


def test_base_constructor_cannot_be_agvm():
    cfg = dict(AGVM, optimizer=dict(type='SGD', lr=0.1),
               base_constructor='mmext.AGVMOptimWrapperConstructor')
    with pytest.raises(ValueError, match="base_constructor is AGVM's own"):
        build_optim_wrapper(ConvNeXtDetector(), cfg)


@pytest.mark.parametrize('paramwise_cfg', [None, dict(bias_lr_mult=2.)])
def test_frozen_parameters_are_kept_as_mmengine_keeps_them(paramwise_cfg):
    """mmengine's constructor keeps frozen parameters in the optimizer
    without paramwise_cfg (a fine-tuning hook may unfreeze them) and skips
    them with it: the same parameters, each with the same options."""
    model = ConvNeXtDetector()
    model.backbone.downsample_layers.requires_grad_(False)
    recipe, agvm = _recipe_and_agvm(model, dict(
        optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
        paramwise_cfg=paramwise_cfg), None)
    assert _options(agvm.optimizer, model) == _options(
        recipe.optimizer, model)
    frozen = {id(p) for p in model.backbone.downsample_layers.parameters()}
    kept = {id(p) for g in agvm.optimizer.param_groups for p in g['params']
            if id(p) in frozen}
    assert kept == (frozen if paramwise_cfg is None else set())
    # In their module's group, outside AGVM's statistics.
    assert all(g['agvm_module'] == 'backbone'
               for g in agvm.optimizer.param_groups
               if any(id(p) in frozen for p in g['params']))
    assert not frozen & {id(p) for p in agvm.layout.params}
