"""Data pieces of the multigrid short cycle: shape-aware dataset and sampler.

A batch sampler only yields indices, so the short cycle tells the dataset the
shape of each sample by yielding ``(index, shape_index)`` items
(mmengine batch samplers yield index lists only). ``MultigridDataset`` reuses the
wrapped dataset object (annotations are not reloaded at a shape change),
holds one ``Compose`` per shape of the current short cycle, and names the file
of a clip that fails to load (or skips it, counting over loader workers).
"""
import copy
import inspect
import multiprocessing
import warnings
from typing import Iterator, List, Sequence, Tuple, Union

from mmaction.datasets import RepeatAugDataset
from mmengine.dataset import Compose
from torch.utils.data import Dataset, Sampler

from mmext.compat import random_other_index
from .schedule import iterations_per_epoch

__all__ = [
    'BrokenClipError', 'MultigridDataset', 'ShortCycleBatchSampler',
    'clips_per_sample'
]

# Keys of a data info naming the clip's file (mmaction2 VideoDataset,
# RawframeDataset, image datasets).
_PATH_KEYS = ('filename', 'frame_dir', 'video_path', 'img_path')


class BrokenClipError(RuntimeError):
    """A clip whose pipeline failed (e.g. a truncated video file)."""


def _clip_path(info: dict) -> str:
    for key in _PATH_KEYS:
        if key in info:
            return str(info[key])
    return '<no file name in the data info>'


def clips_per_sample(dataset) -> int:
    """Clips one dataset index gives: ``num_repeats`` for mmaction2's
    ``RepeatAugDataset`` (one decoded video, several clips, flattened into
    the batch by ``repeat_pseudo_collate``), else 1."""
    if isinstance(dataset, RepeatAugDataset):
        return int(dataset.num_repeats)
    return 1


def config_clips_per_sample(dataset_cfg) -> int:
    """:func:`clips_per_sample` of the dataset a config would build.

    Args:
        dataset_cfg (dict): ``train_dataloader.dataset``; its ``type`` is
            looked up in mmaction2's registry (a class, or a name with or
            without the ``mmaction.`` scope). A type the registry does not
            know counts as 1 clip per index.

    Returns:
        int: Its ``num_repeats`` (or the class's default) for a
        ``RepeatAugDataset`` (or subclass), else 1.
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
    """``RepeatAugDataset.prepare_data``'s view of its dataset with another
    pipeline: mmaction2's decode-once code runs at the multigrid shape."""

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

    Args:
        dataset: An mmengine ``BaseDataset`` (e.g. mmaction2's
            ``VideoDataset``); only ``get_data_info``, ``__len__`` and
            ``metainfo`` are used, its own pipeline is bypassed.
        pipelines (Sequence[list[dict]]): One train pipeline config per shape
            (see :func:`mmext.multigrid.pipeline.resize_pipeline`).
        max_refetch (int): Retries with another random index when a pipeline
            returns ``None`` (as ``BaseDataset``) or, with
            ``skip_broken_clips``, raises.
        skip_broken_clips (bool): Replace a clip whose pipeline raises (a
            truncated or corrupt video) by a random other one, with a warning
            naming the file; :attr:`skipped_clips` counts them over all
            loader workers. False raises :class:`BrokenClipError`.

    Items are ``(index, shape_index)``; a plain ``index`` uses the last
    shape (the long-cycle shape). A ``RepeatAugDataset`` keeps its
    decode-once sampling: each index gives its ``num_repeats`` clips at the
    shape (a list; the recipe's ``repeat_pseudo_collate`` flattens it).
    """

    def __init__(self, dataset, pipelines: Sequence[List[dict]],
                 max_refetch: int = 100, skip_broken_clips: bool = False):
        self.dataset = dataset
        self.pipelines = [Compose(p) for p in pipelines]
        self._repeat_views = [
            _RepeatAugView(dataset, p) for p in self.pipelines
        ] if isinstance(dataset, RepeatAugDataset) else None
        self.max_refetch = max_refetch
        self.skip_broken_clips = skip_broken_clips
        # Shared memory: loader workers skip, the main process reads.
        self._skipped = multiprocessing.Value('q', 0)

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
        """A copy sharing the wrapped dataset, pipelines and skip counter.

        ``Runner.build_dataloader`` deep-copies its config, dataset included:
        the loader must serve this dataset (annotations held once) and count
        into the counter the hook reads (a shared-memory value cannot be
        deep-copied).
        """
        return copy.copy(self)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: Union[int, Tuple[int, int]]) -> dict:
        """The sample of ``item`` at its shape.

        Raises:
            BrokenClipError: If the pipeline raises for the clip (naming its
                file and index), unless ``skip_broken_clips``.
            RuntimeError: If ``max_refetch`` retries found no valid sample.
        """
        idx, shape = item if isinstance(item, tuple) else (item, -1)
        for _ in range(self.max_refetch + 1):
            info = self.dataset.get_data_info(idx)
            try:
                out = (self._repeat_views[shape].prepare(idx)
                       if self._repeat_views else self.pipelines[shape](info))
            except Exception as error:
                self._broken(idx, info, error)
                out = None
            if out is not None:
                return out
            idx = self._other_index(idx)
        raise RuntimeError(
            f'Cannot find a valid sample after {self.max_refetch} retries '
            f'(last: dataset index {idx}, '
            f'{_clip_path(self.dataset.get_data_info(idx))}).')

    def _other_index(self, idx: int) -> int:
        """A random index other than ``idx`` (unless it is the only one)."""
        new = random_other_index(self.dataset)
        while new == idx and len(self.dataset) > 1:
            new = random_other_index(self.dataset)
        return new

    def _broken(self, idx: int, info: dict, error: Exception) -> None:
        """Raise for a clip whose pipeline failed, or warn and count it."""
        message = (f'Cannot load clip {_clip_path(info)} (dataset index '
                   f'{idx}): {type(error).__name__}: {error}')
        if not self.skip_broken_clips:
            raise BrokenClipError(
                f'{message}. Fix or remove the file, or set '
                f'skip_broken_clips=True in MultigridHook to replace broken '
                f'clips by random other ones.') from error
        with self._skipped.get_lock():
            self._skipped.value += 1
        warnings.warn(f'{message}; skipped (skip_broken_clips=True).')


class ShortCycleBatchSampler(Sampler):
    """Batches of cycling sizes, each item tagged with its shape index.

    Iteration ``i`` of an epoch has ``batch_sizes[i % len(batch_sizes)]``
    samples, all tagged ``i % len(batch_sizes)`` (PySlowFast
    ``ShortCycleBatchSampler``). The cycle restarts each epoch, so the shape
    of every iteration depends only on the epoch length and is identical on
    all ranks (mmengine's ``DefaultSampler`` gives each rank equally many
    indices). The incomplete last batch is dropped.

    Args:
        sampler (Sampler): Per-rank index sampler, e.g. ``DefaultSampler``;
            exposed as ``.sampler`` so ``DistSamplerSeedHook`` calls its
            ``set_epoch``.
        batch_sizes (Sequence[int]): Per-process batch sizes in cycle order.
    """

    def __init__(self, sampler: Sampler, batch_sizes: Sequence[int]):
        if not batch_sizes or min(batch_sizes) < 1:
            raise ValueError(f'batch_sizes must be positive, got '
                             f'{batch_sizes}')
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
