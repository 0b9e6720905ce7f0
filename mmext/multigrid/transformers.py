"""Video transformers at every grid shape.

Forward hooks make ``TimeSformer``, ``VisionTransformer`` (VideoMAE),
``UniFormerV2`` and Video Swin compute at the shape they are given: position
embeddings resampled from the learned parameter with mmaction2's
``resize_pos_embed`` in every pass (shadowing it only while the module runs,
:func:`mmext.compat.shadow_tensor`), the temporal length set from the input,
Swin's relative-position index re-selected for a shrunken window."""
import weakref
from typing import Dict, List, Sequence, Tuple

import torch
from torch import nn

from mmext.compat import clear_shadow, registered_tensor, shadow_tensor

__all__ = [
    'conv_output_size', 'window_position_index', 'install_shape_adapters',
    'remove_shape_adapters'
]

# Adapters installed per model: (description, handles).
_INSTALLED: 'weakref.WeakKeyDictionary[nn.Module, Tuple[List[str], list]]' \
    = weakref.WeakKeyDictionary()


def conv_output_size(conv: nn.Module, sizes: Sequence[int]) -> Tuple[int, ...]:
    """Output sizes of a convolution for input sizes.

    ``floor((n + 2 p - d (k - 1) - 1) / s) + 1`` per dimension
    (``torch.nn.Conv3d``'s documentation).

    Args:
        conv (nn.Module): A convolution with integer padding.
        sizes (Sequence[int]): Input sizes, e.g. ``(T, H, W)``.

    Returns:
        tuple[int, ...]: Output sizes, one per dimension.
    """
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                 for n, k, s, p, d in zip(sizes, conv.kernel_size,
                                          conv.stride, conv.padding,
                                          conv.dilation))


def _resize(embed: torch.Tensor, src: Sequence[int], dst: Sequence[int],
            extra: int) -> torch.Tensor:
    """mmaction2's ``resize_pos_embed`` of a ``(1, L, C)`` embedding."""
    from mmaction.models.backbones.mvit import resize_pos_embed
    return resize_pos_embed(embed, tuple(src), tuple(dst), mode='trilinear',
                            num_extra_tokens=extra)


class _TimeSformerGrid:
    """Pre/post forward hooks of one ``TimeSformer``."""

    def __init__(self, module: nn.Module):
        patch = module.patch_embed
        self.grid = tuple(i // p for i, p in zip(patch.img_size,
                                                 patch.patch_size))
        self.frames = int(module.num_frames)

    @staticmethod
    def _frame_modules(module):
        return [module] + [m for m in module.modules()
                           if m is not module and hasattr(m, 'num_frames')]

    def before(self, module, args):
        t, h, w = args[0].shape[2:]
        grid = conv_output_size(module.patch_embed.projection, (h, w))
        if grid != self.grid:
            shadow_tensor(module, 'pos_embed',
                          _resize(registered_tensor(module, 'pos_embed'),
                                  (1, ) + self.grid,
                                  (1, ) + grid, extra=1))
        if module.attention_type != 'space_only' and t != self.frames:
            shadow_tensor(module, 'time_embed',
                          _resize(registered_tensor(module, 'time_embed'),
                                  (self.frames, 1, 1),
                                  (t, 1, 1), extra=0))
        for m in self._frame_modules(module):
            m.num_frames = t

    def after(self, module, args, output=None):
        clear_shadow(module, 'pos_embed')
        clear_shadow(module, 'time_embed')
        for m in self._frame_modules(module):
            m.num_frames = self.frames


class _VisionTransformerGrid:
    """Pre/post forward hooks of one ``VisionTransformer`` (VideoMAE)."""

    def __init__(self, module: nn.Module):
        self.grid = tuple(module.grid_size)
        self.tokens_t = module.pos_embed.shape[1] // (self.grid[0] *
                                                      self.grid[1])

    def before(self, module, args):
        t = conv_output_size(module.patch_embed.projection,
                             args[0].shape[2:])[0]
        if t != self.tokens_t:
            # Only the temporal length: mmaction2 resizes the spatial grid.
            shadow_tensor(module, 'pos_embed',
                          _resize(registered_tensor(module, 'pos_embed'),
                                  (self.tokens_t, ) + self.grid,
                                  (t, ) + self.grid, extra=0))

    def after(self, module, args, output=None):
        clear_shadow(module, 'pos_embed')


class _UniFormerV2Grid:
    """Pre/post forward hooks of one ``UniFormerV2``."""

    def __init__(self, module: nn.Module):
        side = int(round((module.positional_embedding.shape[0] - 1)**0.5))
        self.grid = (side, side)
        self.tokens_t = int(module.transformer.T)

    def before(self, module, args):
        t, h, w = conv_output_size(module.conv1, args[0].shape[2:])
        if (h, w) != self.grid:
            embed = registered_tensor(module, 'positional_embedding')[None]
            shadow_tensor(module, 'positional_embedding',
                          _resize(embed, (1, ) + self.grid, (1, h, w),
                                  extra=1)[0])
        module.transformer.T = t

    def after(self, module, args, output=None):
        clear_shadow(module, 'positional_embedding')
        module.transformer.T = self.tokens_t


def window_position_index(full_index: torch.Tensor,
                          full_window: Sequence[int],
                          window: Sequence[int]) -> torch.Tensor:
    """Relative-position index of a shrunken Swin window.

    The tokens of a ``(wd, wh, ww)`` window are the full window's positions
    with ``d < wd, h < wh, w < ww`` (Liu et al., Video Swin Transformer,
    Sec. 3.2), so their index is the full index at those rows and columns
    (mmaction2's ``[:N, :N]`` takes the first ``N`` in row-major order).

    Args:
        full_index (torch.Tensor): The ``(Wd Wh Ww, Wd Wh Ww)`` index of the
            full window (the module's ``relative_position_index``).
        full_window (Sequence[int]): ``(Wd, Wh, Ww)``.
        window (Sequence[int]): ``(wd, wh, ww)``, each at most the full one.

    Returns:
        torch.Tensor: The ``(wd wh ww, wd wh ww)`` index, on ``full_index``'s
        device.
    """
    positions = torch.arange(full_index.shape[0], device=full_index.device)
    d, h, w = window
    keep = positions.view(tuple(full_window))[:d, :h, :w].reshape(-1)
    return full_index[keep][:, keep]


class _SwinWindow:
    """Pre hook of one ``SwinTransformerBlock3D``.

    The index stays set after the block ran: ``with_cp`` recomputes the
    attention during the backward pass, outside the block's hooks."""

    def __init__(self):
        self.cache: Dict[tuple, torch.Tensor] = {}

    def before(self, module, args):
        from mmaction.models.backbones.swin import get_window_size
        window = tuple(get_window_size(args[0].shape[1:4],
                                       module.window_size))
        attn = module.attn
        if window == tuple(module.window_size):
            clear_shadow(attn, 'relative_position_index')
            return
        # The attribute may read the last pass's shadow.
        full = registered_tensor(attn, 'relative_position_index')
        key = (window, str(full.device))
        if key not in self.cache:
            self.cache[key] = window_position_index(full, module.window_size,
                                                    window)
        shadow_tensor(attn, 'relative_position_index', self.cache[key])


def _adapters():
    """``(class, hooks factory, description)`` per backbone kind."""
    from mmaction.models.backbones import (SwinTransformer3D, TimeSformer,
                                           UniFormerV2, VisionTransformer)
    from mmaction.models.backbones.swin import SwinTransformerBlock3D
    return [
        (TimeSformer, _TimeSformerGrid,
         'pos_embed and time_embed resampled to each shape, num_frames set'),
        (VisionTransformer, _VisionTransformerGrid,
         'pos_embed resampled to each clip length'),
        (UniFormerV2, _UniFormerV2Grid,
         'positional_embedding resampled to each crop, transformer.T set'),
        (SwinTransformer3D, None,
         'relative-position index of shrunken windows re-selected'),
        (SwinTransformerBlock3D, lambda module: _SwinWindow(), None),
    ]


def install_shape_adapters(model: nn.Module) -> List[str]:
    """Make the video transformers in a model take every grid shape.

    Idempotent; the hooks take the module from their arguments, so deep
    copies of the model (the shape probe's) carry working copies.

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        list[str]: One line per adapted backbone,
        ``'<name> (<class>): <what changes>'``.
    """
    if model in _INSTALLED:
        return list(_INSTALLED[model][0])
    lines, handles = [], []
    kinds = _adapters()
    for name, module in model.named_modules():
        for cls, factory, what in kinds:
            if type(module) is not cls:
                continue
            if what:
                lines.append(f'{name or "model"} ({cls.__name__}): {what}')
            if factory is None:
                continue
            hooks = factory(module)
            handles.append(module.register_forward_pre_hook(hooks.before))
            if hasattr(hooks, 'after'):
                handles.append(module.register_forward_hook(
                    hooks.after, always_call=True))
    _INSTALLED[model] = (lines, handles)
    return list(lines)


def remove_shape_adapters(model: nn.Module) -> None:
    """Remove the hooks of :func:`install_shape_adapters`.

    Args:
        model (nn.Module): The model they were installed on.
    """
    lines, handles = _INSTALLED.pop(model, ([], []))
    for handle in handles:
        handle.remove()
    for module in model.modules():
        # Swin's index stays set between passes (see _SwinWindow).
        if hasattr(module, 'relative_position_index'):
            clear_shadow(module, 'relative_position_index')
