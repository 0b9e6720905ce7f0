"""mmext.multigrid.amp: class scores in float32 under bfloat16 autocast."""
from types import SimpleNamespace

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper

from mmext.multigrid.amp import (Float32HeadHook, autocasts_to_bf16,
                                 float32_head_outputs)


def _model():
    model = nn.Module()
    model.backbone = nn.Linear(4, 4)
    model.cls_head = nn.Linear(4, 2)
    return model


def test_head_outputs_float32_under_bf16_autocast():
    model = _model()
    x = torch.randn(3, 4)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert model.cls_head(model.backbone(x)).dtype == torch.bfloat16
        assert float32_head_outputs(model)
        scores = model.cls_head(model.backbone(x))
    assert scores.dtype == torch.float32 and scores.requires_grad
    # Once only; a model without a head is left alone.
    assert not float32_head_outputs(model)
    assert not float32_head_outputs(nn.Linear(2, 2))


def test_which_wrappers_autocast_to_bf16():
    amp = SimpleNamespace(cast_dtype=torch.bfloat16)
    plain = OptimWrapper(torch.optim.SGD(nn.Linear(1, 1).parameters(), 0.1))
    assert autocasts_to_bf16(amp)
    assert not autocasts_to_bf16(SimpleNamespace(cast_dtype=torch.float16))
    assert not autocasts_to_bf16(plain)
    assert autocasts_to_bf16(SimpleNamespace(optim_wrappers=dict(
        a=plain, b=amp)))


def test_hook_adds_the_cast():
    model = _model()
    Float32HeadHook().before_run(SimpleNamespace(model=model))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert model.cls_head(torch.randn(3, 4)).dtype == torch.float32
    assert not float32_head_outputs(model)
