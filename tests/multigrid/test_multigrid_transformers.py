"""mmext.multigrid.transformers: video transformers compute at every grid
shape (position embeddings resampled, Swin's shrunken-window index)."""
import itertools

import pytest
import torch
from helpers import DEVICES
from mg_zoo import build
from torch import nn

from mmext.multigrid.checks import meta_copy
from mmext.multigrid.transformers import (conv_output_size,
                                          install_shape_adapters,
                                          remove_shape_adapters,
                                          window_position_index)


def _clips(batch, t, s, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 1, 3, t, s, s, generator=gen)


def _scores(model, inputs):
    return model(inputs, mode='tensor', stage='head')


def test_conv_output_size_is_what_the_convolution_gives():
    conv = nn.Conv3d(3, 4, (3, 16, 16), (2, 16, 16), (1, 0, 0))
    for size in [(8, 224, 224), (5, 158, 158), (1, 112, 112)]:
        assert conv_output_size(conv, size) == tuple(
            conv(torch.zeros(1, 3, *size)).shape[2:])


@pytest.mark.parametrize('family', ['TimeSformer', 'VisionTransformer',
                                    'UniFormerV2'])
def test_recipe_shape_is_bit_identical_and_coarse_shapes_train(family):
    """At the recipe's shape the hooks change nothing; at coarse shapes
    the model runs (it raised before) and the learned full-size embedding
    gets the gradient; parameters and checkpoint keys are the recipe's."""
    torch.manual_seed(0)
    model = build(family).eval()
    keys = {k: v.shape for k, v in model.state_dict().items()}
    base_t = {'VisionTransformer': 16}.get(family, 8)
    base = _clips(2, base_t, 224)
    plain = _scores(model, base)
    coarse = _clips(2, base_t // 2, 112)
    with pytest.raises(RuntimeError):
        _scores(model, coarse)
    lines = install_shape_adapters(model)
    assert lines[0].startswith(f'backbone ({family}): ')
    assert torch.equal(_scores(model, base), plain)
    model.train()
    _scores(model, coarse).sum().backward()
    name = {'UniFormerV2': 'positional_embedding'}.get(family, 'pos_embed')
    embed = dict(model.backbone.named_parameters()).get(name)
    if embed is not None:  # VideoMAE's default code is a fixed sinusoid
        assert embed.grad is not None and embed.grad.abs().sum() > 0
    assert {k: v.shape for k, v in model.state_dict().items()} == keys
    remove_shape_adapters(model)
    assert not model.backbone._forward_pre_hooks
    with pytest.raises(RuntimeError):
        _scores(model, coarse)


def test_timesformer_embeddings_are_the_resampled_parameters():
    from mmaction.models.backbones.mvit import resize_pos_embed
    model = build('TimeSformer')
    install_shape_adapters(model)
    backbone, seen = model.backbone, {}

    def peek(module, args):
        seen['pos'], seen['time'] = module.pos_embed, module.time_embed
        seen['frames'] = {m.num_frames for m in module.modules()
                          if hasattr(m, 'num_frames')}

    # Runs after the adapter's pre-hook, before the forward body.
    handle = backbone.register_forward_pre_hook(peek)
    _scores(model, _clips(1, 4, 112))
    handle.remove()
    assert seen['frames'] == {4}
    assert torch.equal(seen['pos'], resize_pos_embed(
        backbone.pos_embed, (1, 14, 14), (1, 7, 7), 'trilinear', 1))
    assert torch.equal(seen['pos'][:, 0], backbone.pos_embed[:, 0])
    assert seen['time'].shape == (1, 4, 32)
    # Linear in time: 8 -> 4 frames averages neighbouring pairs.
    time = backbone.time_embed[0]
    assert torch.allclose(seen['time'][0], (time[0::2] + time[1::2]) / 2,
                          atol=1e-6)
    # After the pass, the module reads its parameters again.
    assert backbone.pos_embed is dict(
        backbone.named_parameters())['pos_embed']
    assert {m.num_frames for m in backbone.modules()
            if hasattr(m, 'num_frames')} == {8}


def test_uniformerv2_clips_no_longer_mix_at_fewer_frames():
    """mmaction2's UniFormerV2 reshapes with its fixed t_size: at T=4 two
    clips of the batch are folded into one time axis without an error."""
    torch.manual_seed(0)
    model = build('UniFormerV2').eval()
    pair = _clips(2, 4, 224)
    with torch.no_grad():
        mixed = _scores(model, pair)
        assert mixed.shape[0] == 1  # two clips in, one score out
        install_shape_adapters(model)
        both, alone = _scores(model, pair), _scores(model, pair[1:])
    assert both.shape[0] == 2
    torch.testing.assert_close(both[1:], alone, rtol=1e-5, atol=1e-6)


def _swin_windows(crop, clip_len=32):
    """The window of every block of the recipe's Swin-T at one shape."""
    from mmaction.models.backbones.swin import get_window_size
    model = build('SwinTransformer3D')
    found = []

    def record(module, args):
        found.append(tuple(get_window_size(args[0].shape[1:4],
                                           module.window_size)))

    ghost = meta_copy(model)
    for module in ghost.modules():
        if type(module).__name__ == 'SwinTransformerBlock3D':
            module.register_forward_pre_hook(record)
    ghost(torch.empty(1, 1, 3, clip_len, crop, crop, device='meta'),
          mode='tensor')
    return found


def _offset_index(full_window, window):
    """Index by hand: each pair's offset (dd, dh, dw) into the full
    window's table, as Video Swin defines it."""
    wd, wh, ww = full_window
    coords = list(itertools.product(*(range(w) for w in window)))
    return torch.tensor([[(a - d + wd - 1) * (2 * wh - 1) * (2 * ww - 1) +
                          (b - e + wh - 1) * (2 * ww - 1) + (c - f + ww - 1)
                          for d, e, f in coords] for a, b, c in coords])


@pytest.mark.parametrize('crop,wrong', [(158, 0.98), (112, 0.97), (224, 0)])
def test_swin_index_of_shrunken_windows(crop, wrong):
    """mmaction2's ``[:N, :N]`` takes 98% / 97% of the bias entries of the
    last stage's shrunken window from the wrong token pairs at S=158 / 112
    (none at the recipe's 224); the re-selected index is the offsets'."""
    from mmaction.models.backbones.swin import WindowAttention3D
    full = (8, 7, 7)
    attn = WindowAttention3D(8, full, 1)
    index = attn.relative_position_index
    # Where the window is not shrunk, the offsets' index is mmaction2's.
    assert torch.equal(_offset_index(full, full), index)
    windows = sorted(set(_swin_windows(crop)) - {full})
    assert len(windows) == (0 if wrong == 0 else 1)
    for window in windows:
        n = window[0] * window[1] * window[2]
        truth = _offset_index(full, window)
        assert torch.equal(window_position_index(index, full, window), truth)
        share = (index[:n, :n] != truth).double().mean().item()
        assert round(share, 2) == wrong


@pytest.mark.parametrize('device', DEVICES)
def test_swin_attention_reads_the_reselected_index(device):
    torch.manual_seed(0)
    model = build('SwinTransformer3D').to(device)
    install_shape_adapters(model)
    last = model.backbone.layers[3].blocks[0].attn
    seen = []
    handle = last.register_forward_pre_hook(
        lambda module, args: seen.append(module.relative_position_index))
    inputs = torch.randn(1, 1, 3, 32, 158, 158, device=device)
    _scores(model, inputs).sum().backward()
    handle.remove()
    assert seen[0].device == index_device(last)
    assert torch.equal(seen[0].cpu(), _offset_index((8, 7, 7), (8, 5, 5)))
    grad = last.relative_position_bias_table.grad
    assert grad.shape == (15 * 13 * 13, 1) and grad.abs().sum() > 0
    # At the recipe's crop the block reads mmaction2's own index.
    _scores(model, torch.randn(1, 1, 3, 32, 224, 224, device=device))
    assert last.relative_position_index is dict(
        last.named_buffers())['relative_position_index']


def index_device(attn):
    return dict(attn.named_buffers())['relative_position_index'].device


def test_adapters_are_installed_once_and_travel_with_copies():
    model = build('TimeSformer')
    first = install_shape_adapters(model)
    assert install_shape_adapters(model) == first
    hooks = len(model.backbone._forward_pre_hooks)
    install_shape_adapters(model)
    assert len(model.backbone._forward_pre_hooks) == hooks == 1
    ghost = meta_copy(model)
    out = ghost(torch.empty(4, 1, 3, 2, 112, 112, device='meta'),
                mode='tensor', stage='head')
    assert out.shape == (4, 400) and out.device.type == 'meta'
    # Convolutional backbones need no adapter.
    assert install_shape_adapters(build('ResNet3d')) == []


@pytest.mark.usefixtures('demo_data')
def test_hook_trains_a_timesformer_at_coarse_shapes(tmp_path):
    """The issue's case: TimeSformer died in the first multigrid iteration
    (``x = x + self.pos_embed``). One epoch of the coarse long-cycle shape
    (T=8, crops 28 and 40 of the 56-pixel recipe) trains; the checkpoint
    holds the recipe's full-size embeddings and loads into the recipe."""
    import os.path as osp

    from mg_helpers import read_shapes, recorded, tiny_runner
    model = dict(
        _delete_=True, type='Recognizer3D',
        backbone=dict(type='TimeSformer', num_frames=16, img_size=56,
                      patch_size=8, embed_dims=16, num_heads=2,
                      num_transformer_layers=1),
        cls_head=dict(type='TimeSformerHead', num_classes=4,
                      in_channels=16),
        data_preprocessor=dict(type='ActionDataPreprocessor',
                               mean=[128.] * 3, std=[64.] * 3,
                               format_shape='NCTHW'))
    runner = tiny_runner(tmp_path, model=model, custom_hooks=recorded(
        stop_after_epoch=1, bn_base_size=None, precise_bn_iters=0))
    runner.train()
    records = read_shapes(tmp_path)
    assert {tuple(r['shapes'][0]) for r in records} == {
        (1, 3, 8, 28, 28), (1, 3, 8, 40, 40)}
    # The recipe's epoch 1 ends at multigrid epoch 2.5: none is saved yet.
    runner.save_checkpoint(str(tmp_path), 'coarse.pth')
    state = torch.load(osp.join(tmp_path, 'coarse.pth'),
                       weights_only=False)['state_dict']
    assert state['backbone.pos_embed'].shape == (1, 50, 16)
    assert state['backbone.time_embed'].shape == (1, 16, 16)
    # Training left no hook behind: the model is the recipe's again.
    assert not runner.model.backbone._forward_pre_hooks
