"""Read and rewrite the grid shape ``(T, S)`` of an mmaction2 train pipeline.

``T`` is ``SampleFrames.clip_len`` (or ``UniformSample.clip_len``, which
spreads ``T`` frames over the whole video at any ``T``); ``S`` is the size fixed by the last
spatial transform (``Resize(scale=(S, S), keep_ratio=False)``, or a
``CenterCrop``/``RandomCrop``/``MultiScaleCrop`` of size ``S``). Pipelines are
rewritten as edited copies of their config, never by mutating transforms.
"""
import copy
from typing import List, Tuple

__all__ = ['parse_grid_shape', 'resize_pipeline']

# Transform type -> key holding its output size.
_FIXED_SIZE_KEYS = {
    'CenterCrop': 'crop_size',
    'RandomCrop': 'size',
    'MultiScaleCrop': 'input_size',
}
# Frame samplers whose clip_len is T.
_SAMPLERS = ('SampleFrames', 'UniformSample')
# Transforms whose output size is data dependent.
_VARIABLE_SIZE = ('RandomResizedCrop', 'Resize', 'RandomRescale',
                  'ThreeCrop', 'TenCrop')


def _type(t: dict) -> str:
    name = t['type'] if isinstance(t['type'], str) else t['type'].__name__
    return name.split('.')[-1]


def _square(value) -> int:
    """Side of a square size given as ``S`` or ``(S, S)``, else ``None``."""
    if isinstance(value, int):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 \
            and value[0] == value[1] and value[0] > 0:
        return int(value[0])
    return None


def _final_crop_index(pipeline: List[dict]) -> Tuple[int, int]:
    """Index and side ``S`` of the transform fixing the output size.

    Raises:
        ValueError: If the last spatial transform does not output a fixed
            square size.
    """
    for i in range(len(pipeline) - 1, -1, -1):
        t = pipeline[i]
        name = _type(t)
        if name == 'Resize' and not t.get('keep_ratio', True):
            side = _square(t.get('scale'))
        elif name in _FIXED_SIZE_KEYS:
            side = _square(t.get(_FIXED_SIZE_KEYS[name]))
        elif name in _VARIABLE_SIZE:
            side = None
        else:
            continue
        if side is None:
            break
        return i, side
    raise ValueError(
        'Multigrid needs a final fixed-size square crop in the train '
        'pipeline (e.g. Resize(scale=(224, 224), keep_ratio=False) or '
        'CenterCrop(crop_size=224) after the random crop) to know and change '
        'the crop size S; add one at the end of the spatial transforms.')


def parse_grid_shape(pipeline: List[dict]) -> Tuple[int, int, int]:
    """Return ``(clip_len, frame_interval, crop_size)`` of a train pipeline.

    Args:
        pipeline (list[dict]): Transform configs.

    Returns:
        tuple[int, int, int]: ``T`` (frames), frame stride (frames), ``S``
        (pixels).

    Raises:
        ValueError: Without exactly one ``SampleFrames``/``UniformSample``
            or without a final fixed-size square crop.
    """
    samplers = [t for t in pipeline if _type(t) in _SAMPLERS]
    if len(samplers) != 1:
        raise ValueError(
            f'Multigrid needs exactly one SampleFrames(clip_len=T, '
            f'frame_interval=...) or UniformSample(clip_len=T) in the train '
            f'pipeline to change the clip length T; found {len(samplers)}. '
            f'Use one of them instead of e.g. DenseSampleFrames.')
    _, side = _final_crop_index(pipeline)
    return (int(samplers[0]['clip_len']),
            int(samplers[0].get('frame_interval', 1)), side)


def resize_pipeline(pipeline: List[dict], clip_len: int,
                    crop_size: int) -> List[dict]:
    """Copy of ``pipeline`` producing clips of ``clip_len`` x ``crop_size``.

    The temporal span is kept: ``SampleFrames.frame_interval`` grows by
    ``T0 / T`` (paper Sec. 3.1; PySlowFast ``LONG_CYCLE_SAMPLING_RATE``);
    ``UniformSample`` covers the whole video at any ``clip_len``. Every size
    before the final crop (short-side ``Resize``, crop sizes) scales by
    ``S / S0`` as PySlowFast scales its jitter range, so small shapes also
    decode and augment at lower resolution.

    Args:
        pipeline (list[dict]): Recipe train pipeline (not modified).
        clip_len (int): New ``T`` in frames.
        crop_size (int): New ``S`` in pixels.

    Returns:
        list[dict]: The edited copy.

    Raises:
        ValueError: As :func:`parse_grid_shape`.
    """
    base_t, interval, base_s = parse_grid_shape(pipeline)
    out = copy.deepcopy(list(pipeline))
    final, _ = _final_crop_index(out)
    ratio = crop_size / base_s
    for i, t in enumerate(out):
        name = _type(t)
        if name == 'SampleFrames':
            t['clip_len'] = clip_len
            t['frame_interval'] = max(1, int(round(interval * base_t /
                                                   clip_len)))
        elif name == 'UniformSample':
            t['clip_len'] = clip_len
        elif i == final:
            key = 'scale' if name == 'Resize' else _FIXED_SIZE_KEYS[name]
            t[key] = (crop_size, crop_size) if key == 'scale' else crop_size
        elif i < final and name == 'Resize' and t.get('scale') is not None:
            t['scale'] = tuple(
                s if s == -1 else int(round(s * ratio)) for s in t['scale'])
        elif i < final and name in _FIXED_SIZE_KEYS:
            key = _FIXED_SIZE_KEYS[name]
            t[key] = int(round(_square(t[key]) * ratio))
    return out
