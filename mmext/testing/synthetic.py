"""Random in-memory clips standing in for video decoding (benchmarks).

``SyntheticVideoInit`` and ``SyntheticVideoDecode`` replace ``DecordInit`` and
``DecordDecode`` in a train pipeline: ``SampleFrames`` still picks the frame
indices, the decode step makes random ``uint8`` frames instead of reading a
file. ``tools/benchmark/multigrid_speedup.py --synthetic`` uses them to time
the compute side of a recipe alone.
"""
import numpy as np
from mmcv.transforms import BaseTransform

from mmext.registry import TRANSFORMS

__all__ = ['SyntheticVideoInit', 'SyntheticVideoDecode']


@TRANSFORMS.register_module()
class SyntheticVideoInit(BaseTransform):
    """Stand-in for ``DecordInit``: a video of ``total_frames`` frames.

    Args:
        total_frames (int): Frames of every synthetic video.

    Added keys: ``total_frames``, ``start_index`` (0).
    """

    def __init__(self, total_frames: int = 64):
        self.total_frames = total_frames

    def transform(self, results: dict) -> dict:
        results['total_frames'] = self.total_frames
        results['start_index'] = 0
        return results


@TRANSFORMS.register_module()
class SyntheticVideoDecode(BaseTransform):
    """Stand-in for ``DecordDecode``: random frames at ``frame_inds``.

    Args:
        size (tuple[int, int]): Frame ``(height, width)`` in pixels.

    Required keys: ``frame_inds``. Added keys: ``imgs`` (list of
    ``(height, width, 3)`` uint8 arrays), ``original_shape``, ``img_shape``.
    """

    def __init__(self, size=(64, 64)):
        self.size = tuple(size)

    def transform(self, results: dict) -> dict:
        n = len(results['frame_inds'])
        frames = np.random.randint(0, 256, (n, ) + self.size + (3, ),
                                   dtype=np.uint8)
        results['imgs'] = list(frames)
        results['original_shape'] = results['img_shape'] = self.size
        return results
