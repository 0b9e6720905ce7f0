"""mmext.agvm.modules: module names checked against a model, every trainable
parameter assigned to one module or to 'others'."""
import pytest
from torch import nn

from mmext.agvm import (OTHERS, assign_parameters, default_module_names,
                        resolve_module_names)


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
    from mmengine.registry import MODELS, init_default_scope
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
    with pytest.warns(UserWarning) as caught:
        names = resolve_module_names(model, None)
    assert names[0] == 'neck'
    assert str(caught[0].message) == (
        "AGVM's anchor (module 0, whose gradient variance every factor is "
        "relative to) is 'neck', not the model's first module 'backbone': "
        "'backbone' has no trainable parameters (frozen, e.g. by "
        'frozen_stages covering all its stages or requires_grad=False), so '
        "the default module_names start with 'neck'. Unfreeze 'backbone', or "
        'set optim_wrapper.module_names with the anchor you mean first.')


def test_default_anchor_at_the_first_module_does_not_warn():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert resolve_module_names(_detector(), None)[0] == 'backbone'


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
        'frozen.weight': None, 'frozen.bias': None}


@pytest.mark.parametrize('names, message', [
    (['backbone', 'backbone'], 'must be distinct'),
    (['backbone', 'others'], "must be distinct and not 'others'"),
    (['backbon'], r"'backbon' is not a submodule of Module; its top-level "
     r"modules with trainable parameters are \['backbone', 'neck', "
     r"'roi_head'\]"),
    (['frozen', 'neck'], "the anchor module 'frozen'"),
    ('backbone', 'list of module names'),
    ([], 'module_names is empty'),
])
def test_wrong_names_say_what_to_write(names, message):
    with pytest.raises(ValueError, match=message):
        resolve_module_names(_detector(), names)
