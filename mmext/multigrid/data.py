"""Data pieces of the multigrid short cycle: shape-aware dataset and sampler.

A batch sampler only yields indices, so the short cycle tells the dataset the
shape of each sample by yielding ``(index, shape_index)`` items
(mmengine batch samplers yield index lists only). ``MultigridDataset`` reuses the
wrapped dataset object (annotations are not reloaded at a shape change) and
holds one ``Compose`` per shape of the current short cycle.
"""
from typing import Iterator, List, Sequence, Tuple, Union

from mmengine.dataset import Compose
from torch.utils.data import Dataset, Sampler

from mmext.compat import random_other_index
from .schedule import iterations_per_epoch

__all__ = ['MultigridDataset', 'ShortCycleBatchSampler']


class MultigridDataset(Dataset):
    """Serve samples of a dataset at one of several grid shapes.

    Args:
        dataset: An mmengine ``BaseDataset`` (e.g. mmaction2's
            ``VideoDataset``); only ``get_data_info``, ``__len__`` and
            ``metainfo`` are used, its own pipeline is bypassed.
        pipelines (Sequence[list[dict]]): One train pipeline config per shape
            (see :func:`mmext.multigrid.pipeline.resize_pipeline`).
        max_refetch (int): Retries with another random index when a pipeline
            returns ``None`` (as ``BaseDataset``).

    Items are ``(index, shape_index)``; a plain ``index`` uses the last
    shape (the long-cycle shape).
    """

    def __init__(self, dataset, pipelines: Sequence[List[dict]],
                 max_refetch: int = 100):
        self.dataset = dataset
        self.pipelines = [Compose(p) for p in pipelines]
        self.max_refetch = max_refetch

    @property
    def metainfo(self) -> dict:
        """dict: The wrapped dataset's meta information."""
        return self.dataset.metainfo

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: Union[int, Tuple[int, int]]) -> dict:
        idx, shape = item if isinstance(item, tuple) else (item, -1)
        for _ in range(self.max_refetch + 1):
            out = self.pipelines[shape](self.dataset.get_data_info(idx))
            if out is not None:
                return out
            idx = random_other_index(self.dataset)
        raise RuntimeError(f'Cannot find a valid sample after '
                           f'{self.max_refetch} retries (last index {idx}).')


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
