from .multigrid_dataset import MultigridDataset, ShortCycleBatchSampler

__all__ = ['MultigridDataset', 'ShortCycleBatchSampler']
