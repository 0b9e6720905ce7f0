"""The data of a multigrid run: grid shapes in pipelines, the shape-aware
dataset and the short-cycle batch sampler.

``T`` is the frame sampler's ``clip_len``; ``S`` the size the last spatial
transform fixes. Pipelines are rewritten as edited copies of their config.
The batch sampler tells the dataset each sample's shape with
``(index, shape_index)`` items."""
import copy
import inspect
import multiprocessing
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

from mmaction.datasets import RepeatAugDataset
from mmengine.dataset import Compose
from torch.utils.data import Dataset, Sampler

from mmext.compat import random_other_index
from mmext.log import warn
from mmext.options import type_name
from .schedule import iterations_per_epoch

__all__ = [
    'BrokenClipError', 'MultigridDataset', 'ShortCycleBatchSampler',
    'check_field_of_view', 'clips_per_sample', 'config_clips_per_sample',
    'name_broken_clips', 'parse_grid_shape', 'resize_pipeline'
]

# Transform type -> key holding its output size.
_FIXED_SIZE_KEYS = {
    'CenterCrop': 'crop_size',
    'RandomCrop': 'size',
    'MultiScaleCrop': 'input_size',
}
# Frame samplers whose clip_len is T.
_SAMPLERS = ('SampleFrames', 'UniformSample')
# Transforms whose output size is data dependent.
_VARIABLE_SIZE = ('RandomResizedCrop', 'Resize', 'RandomRescale')
# Test-time crops: several views of each clip.
_MULTI_VIEW = {'ThreeCrop': 3, 'TenCrop': 10}


def _square(value) -> Optional[int]:
    """Side of a square size given as ``S`` or ``(S, S)``, else ``None``."""
    if isinstance(value, int):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 \
            and value[0] == value[1] and value[0] > 0:
        return int(value[0])
    return None


def _transform_text(transform: dict) -> str:
    """A transform config as ``Name(key=value)``, its size keys only."""
    keys = ('scale', 'keep_ratio', 'scale_range', 'area_range',
            *_FIXED_SIZE_KEYS.values())
    args = ', '.join(f'{k}={transform[k]!r}' for k in keys if k in transform)
    return f'{type_name(transform["type"])}({args})'


def _final_crop_index(pipeline: List[dict]) -> Tuple[int, int]:
    """Index and side ``S`` of the final fixed-size square crop (else
    ``ValueError`` naming the last size transform)."""
    last = None
    for i in range(len(pipeline) - 1, -1, -1):
        t = pipeline[i]
        name = type_name(t['type'])
        if name == 'Resize' and not t.get('keep_ratio', True):
            side = _square(t.get('scale'))
        elif name in _FIXED_SIZE_KEYS:
            side = _square(t.get(_FIXED_SIZE_KEYS[name]))
        elif name in _VARIABLE_SIZE:
            side = None
        else:
            continue
        if side is None:
            last = _transform_text(t)
            break
        return i, side
    found = f'ends with {last}, no' if last else 'needs a final'
    raise ValueError(f'The train pipeline {found} square crop: end with '
                     f'e.g. Resize(scale=(224, 224), keep_ratio=False).')


def parse_grid_shape(pipeline: List[dict]) -> Tuple[int, int, int]:
    """The clip shape a train pipeline gives.

    Args:
        pipeline (list[dict]): The train pipeline config.

    Returns:
        tuple[int, int, int]: ``(clip_len, frame_interval, crop_size)``: ``T``
        and the frame stride in frames, ``S`` in pixels.

    Raises:
        ValueError: Without exactly one ``SampleFrames``/``UniformSample``,
            without a final fixed-size square crop, or with a multi-view test
            crop (``ThreeCrop``, ``TenCrop``).
    """
    names = [type_name(t['type']) for t in pipeline]
    views = [name for name in names if name in _MULTI_VIEW]
    if views:
        raise ValueError(f'{views[0]} makes {_MULTI_VIEW[views[0]]} views of '
                         f'each clip (a test crop); train on one crop.')
    samplers = [t for t, name in zip(pipeline, names) if name in _SAMPLERS]
    if not samplers:
        raise ValueError('MultigridHook needs a SampleFrames or UniformSample '
                         'in the train pipeline.')
    if len(samplers) > 1:
        raise ValueError(f'The train pipeline has {len(samplers)} frame '
                         f'samplers; MultigridHook needs one.')
    _, side = _final_crop_index(pipeline)
    return (int(samplers[0]['clip_len']),
            int(samplers[0].get('frame_interval', 1)), side)


# Resizes to sizes in pixels: transform type -> key of its sizes.
_RESIZE_KEYS = {'Resize': 'scale', 'RandomRescale': 'scale_range'}


def _first_resize(pipeline: List[dict]) -> Optional[int]:
    """Index of the first transform that sets the frame's size in pixels (a
    ``Resize`` to a ``scale``, a ``RandomRescale``, a ``MultiScaleCrop``),
    if it is not after the final crop; None: the final crop cuts the raw
    frame."""
    final, _ = _final_crop_index(pipeline)
    return next((i for i, t in enumerate(pipeline[:final + 1])
                 if type_name(t['type']) == 'MultiScaleCrop'
                 or _pixel_sizes(t) is not None), None)


def _pixel_sizes(transform: dict) -> Optional[tuple]:
    """The sizes in pixels a resize sets (``Resize(scale=(-1, 256))``);
    None for other transforms and relative resizes (``scale=0.5``)."""
    sizes = transform.get(_RESIZE_KEYS.get(type_name(transform['type']), ''))
    return tuple(sizes) if isinstance(sizes, (tuple, list)) else None


def check_field_of_view(pipeline: List[dict]) -> None:
    """Refuse a pipeline whose crops :func:`resize_pipeline` cannot scale.

    A final crop of the raw frame would see less of it at a smaller ``S``.

    Args:
        pipeline (list[dict]): The train pipeline config.

    Raises:
        ValueError: Naming the crop, unless a resize to pixel sizes comes
            before the final crop.
    """
    if _first_resize(pipeline) is None:
        final, side = _final_crop_index(pipeline)
        name = type_name(pipeline[final]['type'])
        relative = next((_transform_text(t) for t in pipeline[:final]
                         if isinstance(t.get(_RESIZE_KEYS.get(
                             type_name(t['type']), '')), (int, float))),
                        None)
        fix = (f'{relative} is relative: give its scale in pixels, e.g. '
               f'(-1, {side})' if relative else 'add a Resize before it')
        raise ValueError(f'{name}({side}) crops the raw frame: smaller S '
                         f'would see less of it; {fix}.')


def resize_pipeline(pipeline: List[dict], clip_len: int,
                    crop_size: int) -> List[dict]:
    """A copy of a pipeline giving clips of another grid shape.

    The temporal span is kept: ``SampleFrames.frame_interval`` grows by
    ``T0 / T`` (paper Sec. 3.1; PySlowFast ``LONG_CYCLE_SAMPLING_RATE``).
    The field of view is kept: sizes from the first resize to the final
    crop scale by ``S / S0`` (as PySlowFast scales its jitter range);
    crops of the raw frame before it keep their size
    (:func:`check_field_of_view`).

    Args:
        pipeline (list[dict]): The train pipeline config (at ``T0``, ``S0``).
        clip_len (int): ``T``, frames.
        crop_size (int): ``S``, pixels.

    Returns:
        list[dict]: The new pipeline config (the input is not modified).

    Raises:
        ValueError: As :func:`parse_grid_shape`.
    """
    base_t, interval, base_s = parse_grid_shape(pipeline)
    out = copy.deepcopy(list(pipeline))
    final, _ = _final_crop_index(out)
    first = _first_resize(out)
    first = final if first is None else first
    ratio = crop_size / base_s
    for i, t in enumerate(out):
        name = type_name(t['type'])
        if name == 'SampleFrames':
            t['clip_len'] = clip_len
            t['frame_interval'] = max(1, int(round(interval * base_t /
                                                   clip_len)))
        elif name == 'UniformSample':
            t['clip_len'] = clip_len
        elif i == final:
            key = 'scale' if name == 'Resize' else _FIXED_SIZE_KEYS[name]
            t[key] = (crop_size, crop_size) if key == 'scale' else crop_size
        elif not first <= i < final:
            continue
        elif (sizes := _pixel_sizes(t)) is not None:
            t[_RESIZE_KEYS[name]] = tuple(
                s if s == -1 else int(round(s * ratio)) for s in sizes)
        elif name in _FIXED_SIZE_KEYS:
            key = _FIXED_SIZE_KEYS[name]
            t[key] = int(round(_square(t[key]) * ratio))
    return out


# Keys of a data info naming the clip's file (mmaction2 VideoDataset,
# RawframeDataset, image datasets).
_PATH_KEYS = ('filename', 'frame_dir', 'video_path', 'img_path')


class BrokenClipError(RuntimeError):
    """A clip whose file cannot be read or decoded (e.g. a truncated
    video)."""


def _clip_path(info: dict) -> str:
    for key in _PATH_KEYS:
        if key in info:
            return str(info[key])
    return '<no file name in the data info>'


def _reads_the_file(transform) -> bool:
    """Whether a transform opens or decodes the clip's file (``*Init``,
    ``*Decode``, ``Load*`` and their subclasses: ``DecordInit``,
    ``PyAVDecode``, ``RawFrameDecode``, ...)."""
    return any(c.__name__.endswith(('Init', 'Decode'))
               or c.__name__.startswith('Load')
               for c in type(transform).__mro__)


class _Reading:
    """A transform reading the clip's file: its exception becomes a
    :class:`BrokenClipError` naming the file and index, ending ``fix``."""

    def __init__(self, transform, fix: str):
        self.transform = transform
        self.fix = fix

    def __call__(self, info: dict):
        try:
            return self.transform(info)
        except Exception as error:  # noqa: B902 any decoder's error
            raise BrokenClipError(
                f'Cannot load clip {_clip_path(info)} (index '
                f'{info.get("sample_idx")}): {type(error).__name__}: '
                f'{error}{self.fix}') from error


def name_broken_clips(pipeline: Compose, fix: str = '') -> Compose:
    """Make the transforms that read the clip's file name it when they fail.

    Those transforms raise :class:`BrokenClipError` (naming the file, then
    ``fix``); other transforms' exceptions stay theirs (a config or code
    error, not the file).

    Args:
        pipeline (Compose): A built pipeline.
        fix (str): Text appended to the error, the fix. Defaults to ``''``.

    Returns:
        Compose: ``pipeline``, changed in place.
    """
    pipeline.transforms = [
        t if isinstance(t, _Reading) or not _reads_the_file(t) else
        _Reading(t, fix) for t in pipeline.transforms]
    return pipeline


def clips_per_sample(dataset) -> int:
    """Clips one dataset index gives.

    Args:
        dataset (BaseDataset): A built dataset.

    Returns:
        int: ``num_repeats`` for a ``RepeatAugDataset``, else 1.
    """
    if isinstance(dataset, RepeatAugDataset):
        return int(dataset.num_repeats)
    return 1


def config_clips_per_sample(dataset_cfg) -> int:
    """:func:`clips_per_sample` of a dataset config.

    Args:
        dataset_cfg (dict): The ``train_dataloader.dataset`` config.

    Returns:
        int: Its ``num_repeats`` (or the class's default) for a
        ``RepeatAugDataset`` type, else 1 (also for a ``type`` unknown to
        mmaction2's registry).
    """
    from mmaction.registry import DATASETS
    kind = dataset_cfg.get('type')
    cls = kind if isinstance(kind, type) else (
        DATASETS.get(kind) if isinstance(kind, str) else None)
    if not (isinstance(cls, type) and issubclass(cls, RepeatAugDataset)):
        return 1
    default = inspect.signature(cls).parameters['num_repeats'].default
    return int(dataset_cfg.get('num_repeats', default))


class _RepeatAugView:
    """A ``RepeatAugDataset`` seen with another pipeline, for its
    decode-once ``prepare_data``."""

    def __init__(self, dataset: RepeatAugDataset, pipeline: Compose):
        self.dataset = dataset
        self.pipeline = pipeline

    def __getattr__(self, name):
        # Not for 'dataset' itself (e.g. while unpickling in a worker).
        if name == 'dataset' or name.startswith('__'):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def prepare(self, idx: int) -> list:
        return RepeatAugDataset.prepare_data(self, idx)


class MultigridDataset(Dataset):
    """Serve samples of a dataset at one of several grid shapes.

    Items are ``(index, shape_index)``; a plain ``index`` uses the last
    (long-cycle) shape. A ``RepeatAugDataset`` gives a list of its
    ``num_repeats`` clips per index.

    Args:
        dataset (BaseDataset): An mmengine dataset; its own pipeline is
            bypassed.
        pipelines (Sequence[list[dict]]): One train pipeline config per
            shape (see :func:`resize_pipeline`).
        max_refetch (int): Retries with another random index when a pipeline
            returns ``None`` or, with ``skip_broken_clips``, the clip is
            broken. Defaults to 100.
        skip_broken_clips (bool): Replace a clip whose file cannot be read
            (:func:`name_broken_clips`) by a random other one, with a
            warning, counted in :attr:`skipped_clips`; False raises
            :class:`BrokenClipError`. Defaults to False.
    """

    def __init__(self, dataset, pipelines: Sequence[List[dict]],
                 max_refetch: int = 100, skip_broken_clips: bool = False):
        self.dataset = dataset
        fix = '' if skip_broken_clips else (
            '. Fix the file or set skip_broken_clips=True.')
        # A CachedVideoDataset serves every shape's decoding from its cache.
        cached = getattr(dataset, 'use_cache', list)
        self.pipelines = [name_broken_clips(Compose(cached(p)), fix)
                          for p in pipelines]
        self._repeat_views = [
            _RepeatAugView(dataset, p) for p in self.pipelines
        ] if isinstance(dataset, RepeatAugDataset) else None
        self.max_refetch = max_refetch
        self.skip_broken_clips = skip_broken_clips
        # Shared memory: loader workers skip, the main process reads.
        self._skipped = multiprocessing.Value('q', 0)
        # Seconds in each transform (every shape's pipeline has the same
        # transforms), then the clips timed: :meth:`loader_costs`.
        self._costs = multiprocessing.Array(
            'd', len(self.pipelines[0].transforms) + 1)

    @property
    def metainfo(self) -> dict:
        """dict: The wrapped dataset's meta information."""
        return self.dataset.metainfo

    @property
    def skipped_clips(self) -> int:
        """int: Broken clips skipped since the last :meth:`reset_skipped`."""
        return self._skipped.value

    def reset_skipped(self) -> None:
        """Restart the count of :attr:`skipped_clips` (e.g. per epoch)."""
        with self._skipped.get_lock():
            self._skipped.value = 0

    def __deepcopy__(self, memo) -> 'MultigridDataset':
        """A shallow copy: ``Runner.build_dataloader`` deep-copies its
        config, but the loader must share the dataset and skip counter."""
        return copy.copy(self)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: Union[int, Tuple[int, int]]) -> dict:
        """The sample of ``item`` at its shape: BrokenClipError if a
        transform reading the clip's file raises (naming it and its index),
        unless ``skip_broken_clips``; RuntimeError if ``max_refetch``
        retries found no valid sample."""
        idx, shape = item if isinstance(item, tuple) else (item, -1)
        for _ in range(self.max_refetch + 1):
            info = self.dataset.get_data_info(idx)
            try:
                out = (self._repeat_views[shape].prepare(idx)
                       if self._repeat_views else self._timed(shape, info))
            except BrokenClipError as error:
                if not self.skip_broken_clips:
                    raise
                with self._skipped.get_lock():
                    self._skipped.value += 1
                warn(f'{error}; skipped.')
                out = None
            if out is not None:
                return out
            idx = self._other_index(idx)
        raise RuntimeError(
            f'No valid sample after {self.max_refetch} retries (last: index '
            f'{idx}, {_clip_path(self.dataset.get_data_info(idx))}).')

    def _timed(self, shape: int, info: dict) -> Optional[dict]:
        """``self.pipelines[shape](info)`` (as ``Compose``), adding each
        transform's time to :meth:`loader_costs`."""
        seconds = []
        for transform in self.pipelines[shape].transforms:
            start = time.perf_counter()
            info = transform(info)
            seconds.append(time.perf_counter() - start)
            if info is None:
                return None
        with self._costs.get_lock():
            for i, s in enumerate(seconds):
                self._costs[i] += s
            self._costs[-1] += 1
        return info

    def loader_costs(self) -> Dict[str, float]:
        """The loader's cost per clip in each transform of the pipelines,
        summed over the loader's workers, since the last
        :meth:`reset_loader_costs` (the RepeatAugDataset path is not
        timed).

        Returns:
            dict[str, float]: Milliseconds per clip by transform, in
            pipeline order (a repeated name gets its position:
            ``'Resize'``, ``'Resize#2'``); empty before a clip.
        """
        *seconds, clips = self._costs[:]
        if not clips:
            return {}
        names = []
        for t in self.pipelines[0].transforms:
            name = type(t.transform if isinstance(t, _Reading) else
                        t).__name__
            count = sum(n.split('#')[0] == name for n in names)
            names.append(f'{name}#{count + 1}' if count else name)
        return {n: 1e3 * s / clips for n, s in zip(names, seconds)}

    def reset_loader_costs(self) -> None:
        """Restart :meth:`loader_costs` (e.g. per stage)."""
        with self._costs.get_lock():
            self._costs[:] = [0.0] * len(self._costs)

    def _other_index(self, idx: int) -> int:
        """A random index other than ``idx`` (unless it is the only one)."""
        new = random_other_index(self.dataset)
        while new == idx and len(self.dataset) > 1:
            new = random_other_index(self.dataset)
        return new


class ShortCycleBatchSampler(Sampler):
    """Batches of cycling sizes, each item tagged with its shape index.

    Iteration ``i`` of an epoch has ``batch_sizes[i % len(batch_sizes)]``
    samples, all tagged ``i % len(batch_sizes)`` (PySlowFast
    ``ShortCycleBatchSampler``); the cycle restarts each epoch, the
    incomplete last batch is dropped.

    Args:
        sampler (Sampler): The per-rank index sampler, exposed as
            ``.sampler`` for ``DistSamplerSeedHook``.
        batch_sizes (Sequence[int]): Per-process batch sizes in short-cycle
            order.
    """

    def __init__(self, sampler: Sampler, batch_sizes: Sequence[int]):
        self.sampler = sampler
        self.batch_sizes = list(batch_sizes)

    def __iter__(self) -> Iterator[List[Tuple[int, int]]]:
        k, batch = 0, []
        for idx in self.sampler:
            batch.append((idx, k))
            if len(batch) == self.batch_sizes[k]:
                yield batch
                k, batch = (k + 1) % len(self.batch_sizes), []

    def __len__(self) -> int:
        return iterations_per_epoch(len(self.sampler), self.batch_sizes)
