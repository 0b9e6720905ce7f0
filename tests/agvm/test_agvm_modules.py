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
    assert default_module_names(_detector()) == ['backbone', 'neck',
                                                 'roi_head']


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
