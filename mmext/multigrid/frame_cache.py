"""Decode once: a video dataset whose clips are decoded once, at the size of
the train pipeline's first resize, and then served from a cache on disk
that the loader workers map into memory.

Why: decord decodes from the keyframe before the sampled frames, so a
clip's decoding costs the same at every grid shape (MSR Action3D: 25 ms at
``(T, S) = (16, 64)``, 22 ms at ``(4, 45)``), while a coarse multigrid
stage covers 2-8x more clips per second (docs/en/multigrid.md, "Data-bound
runs"). From the cache a clip costs a copy of its ``T`` sampled frames at
the first resize's size; the coarse shapes resize from there.

The cache is a folder: ``manifest.json`` (the pipeline it was made for and,
per video, its file's size, modification time and BLAKE2b digest, frame
count, fps, raw and cached frame sizes) and one ``.npy`` array of all frames
``(N, H, W, C)`` uint8 per video, written when the clip is first loaded
(the first epoch decodes as before). Each file is written under a
temporary name and renamed when complete, so an interrupted run leaves
only files that are whole or ignored. Loader workers read the arrays with
``numpy.load(mmap_mode='r')``: the pages are the kernel's page cache, one
copy for all workers and runs."""
import hashlib
import json
import multiprocessing
import os
import os.path as osp
from typing import Dict, List, Optional, Sequence

import numpy as np
from mmaction.datasets import VideoDataset
from mmcv.transforms import BaseTransform
from mmaction.registry import TRANSFORMS
from mmengine.logging import print_log

from mmext.log import refuse
from mmext.options import is_number, type_name
from mmext.registry import DATASETS

__all__ = ['CachedVideoDataset', 'FrameCache']

# Bump when the layout of the folder changes: an older cache is refused.
CACHE_VERSION = 1
GIB = 2**30


def _stat(path: str) -> List[int]:
    """``[size in bytes, modification time in ns]`` of ``path``."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _digest(path: str) -> str:
    """BLAKE2b of the file's bytes: a copy of a video with a new
    modification time (a dataset copied again) is the same video."""
    digest = hashlib.blake2b()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(2**20), b''):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: str, write) -> None:
    """Call ``write(tmp)`` on a temporary name beside ``path``, then rename
    it to ``path``: a reader sees the whole file or none."""
    tmp = f'{path}.{os.getpid()}.tmp'
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if osp.exists(tmp):
            os.remove(tmp)


def _dump(path: str, manifest: dict) -> None:
    with open(path, 'w') as f:
        json.dump(manifest, f)


def _save(path: str, frames: np.ndarray) -> None:
    with open(path, 'wb') as f:  # np.save(path) would append '.npy'
        np.save(f, frames)


def _only(pipeline: Sequence, name: str) -> int:
    """Index of the one transform config of type ``name``."""
    found = [i for i, t in enumerate(pipeline)
             if isinstance(t, dict) and type_name(t['type']) == name]
    if len(found) != 1:
        raise ValueError(f'CachedVideoDataset needs one {name} in its '
                         f'pipeline, got {len(found)}.')
    return found[0]


class FrameCache:
    """The decoded frames of a set of videos, at one size, in a folder.

    Args:
        cache_dir (str, optional): The folder (created if missing by
            :meth:`prepare`; its owner names it before, if None).
        max_gib (float): Refuse a dataset whose frames need more than this
            many GiB (2**30 bytes) of cache.
        init_cfg (dict): The pipeline's ``DecordInit`` config (opens the
            file: its ``io_backend`` and ``num_threads`` are kept).
        decode_cfg (dict): The pipeline's ``DecordDecode`` config.
        resize_cfg (dict, optional): The ``Resize`` right after the decode,
            at whose size frames are kept (None: the decoded size).
    """

    def __init__(self, cache_dir: Optional[str], max_gib: float,
                 init_cfg: dict, decode_cfg: dict,
                 resize_cfg: Optional[dict] = None):
        self.cache_dir = cache_dir
        self.max_gib = max_gib
        self.pipeline = dict(version=CACHE_VERSION, init=init_cfg,
                             decode=decode_cfg, resize=resize_cfg)
        # What the frames depend on (not how the file is opened or how
        # many threads decode it).
        self.identity = json.loads(json.dumps(dict(
            version=CACHE_VERSION, decode=decode_cfg, resize=resize_cfg)))
        self.clips: Dict[str, dict] = {}  # by the video's real path
        self._keys: Dict[str, str] = {}
        # Shared memory: loader workers load, the main process reads.
        self._hits = multiprocessing.Value('q', 0)
        self._misses = multiprocessing.Value('q', 0)
        self._transforms = None

    @classmethod
    def from_pipeline(cls, pipeline: Sequence[dict],
                      cache_dir: Optional[str],
                      max_gib: float) -> 'FrameCache':
        """The cache of a decord pipeline config.

        Args:
            pipeline (Sequence[dict]): The pipeline config: its
                ``DecordInit`` and ``DecordDecode``, and the ``Resize``
                right after the decode if it sets a size in pixels (a
                relative ``scale=0.5`` does not).
            cache_dir (str, optional): The cache folder (None: named
                before :meth:`prepare`).
            max_gib (float): The bound of :meth:`prepare`, in GiB.

        Returns:
            FrameCache: The cache (nothing read or written yet).

        Raises:
            ValueError: Without exactly one ``DecordInit`` and one
                ``DecordDecode``.
        """
        init, decode = _only(pipeline, 'DecordInit'), _only(
            pipeline, 'DecordDecode')
        after = pipeline[decode + 1] if decode + 1 < len(pipeline) else {}
        resize = None
        if type_name(after.get('type', '')) == 'Resize' and not isinstance(
                after.get('scale'), float):
            resize = dict(after, type='Resize', lazy=False)
        return cls(cache_dir, max_gib, dict(pipeline[init], type='DecordInit'),
                   dict(pipeline[decode], type='DecordDecode'), resize)

    # -- what the folder holds ----------------------------------------
    @property
    def manifest_path(self) -> str:
        """str: The path of ``manifest.json``."""
        return osp.join(self.cache_dir, 'manifest.json')

    def _built(self):
        """The ``(DecordInit, DecordDecode, Resize or None)`` transforms,
        built once per process."""
        if self._transforms is None:
            cfg = self.pipeline
            self._transforms = (TRANSFORMS.build(dict(cfg['init'])),
                                TRANSFORMS.build(dict(cfg['decode'])),
                                cfg['resize'] and TRANSFORMS.build(
                                    dict(cfg['resize'])))
        return self._transforms

    def _scan(self, filename: str, stat: List[int]) -> dict:
        """Frame count, fps and frame sizes of one video (its file is opened
        and its first frame decoded), with its ``stat`` (:func:`_stat`,
        taken once by the caller)."""
        init, _, resize = self._built()
        try:
            info = init(dict(filename=filename))
            raw = tuple(info['video_reader'][0].shape)  # (H, W, C)
        except Exception as error:  # noqa: B902 any decoder's error
            # Named when the clip is loaded, as an uncached clip would be.
            return dict(stat=stat, frames=0,
                        broken=f'{type(error).__name__}: {error}')
        size = raw[:2] if resize is None else resize(
            dict(img_shape=raw[:2], modality='RGB'))['img_shape']
        return dict(stat=stat, digest=_digest(filename),
                    frames=int(info['total_frames']),
                    fps=float(info['avg_fps']), raw_shape=list(raw[:2]),
                    shape=[int(size[0]), int(size[1]), raw[2]],
                    file=hashlib.sha1(osp.realpath(filename).encode())
                    .hexdigest() + '.npy')

    def nbytes(self, filenames: Optional[Sequence[str]] = None) -> int:
        """Bytes the frames of some videos take in the cache.

        Args:
            filenames (Sequence[str], optional): Prepared videos. Defaults
                to every video the cache knows.

        Returns:
            int: ``N * H * W * C`` (uint8) summed over the videos;
            unreadable ones count 0.
        """
        clips = self.clips.values() if filenames is None else [
            self.clip(f) for f in filenames]
        return sum(c['frames'] * int(np.prod(c['shape'])) for c in clips
                   if 'broken' not in c)

    def prepare(self, filenames: Sequence[str]) -> str:
        """Check the folder against ``filenames`` and the pipeline, scan
        the videos it does not know, and write its manifest.

        Args:
            filenames (Sequence[str]): The videos of the dataset.

        Returns:
            str: A line for the log: the cache's size and how much of it is
            already filled.

        Raises:
            ValueError: The folder was made for another pipeline, a video
                changed since it was cached (its size or modification time
                differ and so do its bytes), or the frames need more than
                ``max_gib``.
        """
        old = {}
        if osp.exists(self.manifest_path):
            with open(self.manifest_path) as f:
                old = json.load(f)
            differ = [k for k in self.identity
                      if old.get('pipeline', {}).get(k) != self.identity[k]]
            if differ:
                raise ValueError(
                    f'Frame cache {self.cache_dir} holds other frames: '
                    f'{differ[0]} {old["pipeline"].get(differ[0])}, now '
                    f'{self.identity[differ[0]]}; delete it or set cache_dir.')
        self.clips = dict(old.get('clips', {}))
        self._keys = {name: osp.realpath(name) for name in filenames}
        keys = list(self._keys.values())
        for name, key in self._keys.items():
            clip, stat = self.clips.get(key), _stat(name)
            if clip is not None and 'broken' not in clip and (
                    clip['stat'] != stat):
                if clip.get('digest') != _digest(name):
                    raise ValueError(f'Frame cache {self.cache_dir} is '
                                     f'stale: {name} changed since it was '
                                     f'cached; delete the cache folder.')
                self.clips[key] = dict(clip, stat=stat)
            if clip is None or 'broken' in clip:
                self.clips[key] = self._scan(name, stat)
        need = self.nbytes(keys)
        if need > self.max_gib * GIB:
            raise ValueError(
                f'The frames of {len(keys)} videos need '
                f'{need / GIB:.2f} GiB of cache > max_cache_gib='
                f'{self.max_gib}; raise it or drop the frame cache.')
        if self.clips != old.get('clips'):  # a read-only cache stays one
            try:
                os.makedirs(self.cache_dir, exist_ok=True)
                _write_atomic(self.manifest_path, lambda tmp: _dump(
                    tmp, dict(pipeline=self.identity, clips=self.clips)))
            except OSError as error:
                raise ValueError(
                    f'Frame cache {self.cache_dir} is not writable '
                    f'({error.strerror}); set a writable cache_dir.')
        done = sum(osp.isfile(self._path(k)) for k in keys)
        broken = [n for n, k in self._keys.items()
                  if 'broken' in self.clips[k]]
        return (f'Frame cache {self.cache_dir}: {len(keys)} videos, '
                f'{sum(self.clips[k]["frames"] for k in keys)} frames, '
                f'{need / 2**20:.0f} MiB of {self.max_gib} GiB; {done} '
                f'already cached, {len(keys) - done - len(broken)} decoded '
                f'once when first loaded' +
                (f', {len(broken)} unreadable (e.g. {broken[0]}).'
                 if broken else '.'))

    def _key(self, filename: str) -> str:
        """The manifest's key of ``filename``: its real path."""
        key = self._keys.get(filename)
        return osp.realpath(filename) if key is None else key

    def _path(self, key: str) -> str:
        return osp.join(self.cache_dir, self.clips[key].get('file', ''))

    # -- serving -----------------------------------------------------
    def clip(self, filename: str) -> dict:
        """The manifest's entry of a prepared video.

        Args:
            filename (str): The video.

        Returns:
            dict: ``frames``, ``fps``, ``raw_shape`` (H, W) and ``shape``
            (H, W, C) at the cached size, ``stat`` (bytes, mtime in ns),
            ``digest`` (BLAKE2b of the file), ``file``; an unreadable video
            has ``broken`` (the error).

        Raises:
            KeyError: ``filename`` was not prepared.
        """
        return self.clips[self._key(filename)]

    def frames(self, filename: str) -> np.ndarray:
        """All frames of a prepared video at the cached size.

        Mapped from the cache (a hit), or decoded, resized and stored
        there when not cached yet or not whole (a miss).

        Args:
            filename (str): The video.

        Returns:
            np.ndarray: ``(N, H, W, C)`` uint8, RGB (read-only on a hit).

        Raises:
            ValueError: The video decoded to another shape than its
                manifest entry says (changed during the run).
        """
        key = self._key(filename)
        clip, path = self.clips[key], self._path(key)
        shape = (clip['frames'], *clip['shape'])
        try:
            frames = np.load(path, mmap_mode='r')
        except (OSError, ValueError):  # not filled yet, or not whole
            frames = None
        if frames is not None and frames.shape == shape:
            with self._hits.get_lock():
                self._hits.value += 1
            return frames
        frames = self.decode(filename, clip['frames'])
        if frames.shape != shape:
            raise ValueError(f'{filename} decoded to {frames.shape}, '
                             f'cached as {shape}; delete the cache folder.')
        try:
            _write_atomic(path, lambda tmp: _save(tmp, frames))
        except OSError:  # a read-only or full cache: serve, do not store
            pass
        with self._misses.get_lock():
            self._misses.value += 1
        return frames

    def decode(self, filename: str,
               frames: Optional[int] = None) -> np.ndarray:
        """Decode a video as the pipeline does, resized as the cache keeps
        it (nothing is stored).

        Args:
            filename (str): The video.
            frames (int, optional): Its first ``frames`` frames. Defaults
                to all.

        Returns:
            np.ndarray: ``(N, H, W, C)`` uint8, RGB.
        """
        init, decode, resize = self._built()
        info = init(dict(filename=filename))
        info = decode(dict(info, frame_inds=np.arange(
            info['total_frames'] if frames is None else frames)))
        return np.stack((info if resize is None else resize(info))['imgs'])

    def fill(self, filenames: Sequence[str]) -> int:
        """Decode and store the videos not cached yet, before training
        instead of on their first load.

        Args:
            filenames (Sequence[str]): Prepared videos; unreadable ones are
                left to be named when loaded.

        Returns:
            int: How many were decoded.
        """
        todo = [name for name in filenames if 'broken' not in
                self.clip(name) and not osp.isfile(self._path(
                    self._key(name)))]
        for name in todo:
            self.frames(name)
        return len(todo)

    @property
    def hits(self) -> int:
        """int: Loads served from the cache since the last reset."""
        return self._hits.value

    @property
    def misses(self) -> int:
        """int: Loads that decoded the video (and filled the cache)."""
        return self._misses.value

    def reset_counts(self) -> None:
        """Restart :attr:`hits` and :attr:`misses` (e.g. per stage)."""
        for value in (self._hits, self._misses):
            with value.get_lock():
                value.value = 0

    def __getstate__(self) -> dict:
        """Pickled without the built transforms (rebuilt per process)."""
        return dict(vars(self), _transforms=None)


class CachedDecordInit(BaseTransform):
    """``DecordInit`` from the cache's manifest: sets ``total_frames`` and
    ``avg_fps`` without opening the video."""

    def __init__(self, cache: FrameCache):
        self.cache = cache

    def transform(self, results: dict) -> dict:
        """Set the clip's frame count and fps.

        Args:
            results (dict): The pipeline's dict with ``filename``.

        Returns:
            dict: ``results`` with ``total_frames`` and ``avg_fps``.

        Raises:
            RuntimeError: The video could not be decoded when prepared
                (its error).
        """
        clip = self.cache.clip(results['filename'])
        if 'broken' in clip:
            raise RuntimeError(f'{results["filename"]} cannot be decoded: '
                               f'{clip["broken"]}')
        results['total_frames'] = clip['frames']
        results['avg_fps'] = clip['fps']
        return results


class CachedDecordDecode(BaseTransform):
    """``DecordDecode`` from the cache: the frames ``frame_inds`` of the
    video at the cached size (``original_shape`` stays the decoded
    size)."""

    def __init__(self, cache: FrameCache):
        self.cache = cache

    def transform(self, results: dict) -> dict:
        """Take the sampled frames from the cache.

        Args:
            results (dict): The pipeline's dict with ``filename`` and
                ``frame_inds`` (the frame sampler's).

        Returns:
            dict: ``results`` with ``imgs`` (a list of ``(H, W, C)``
            uint8 arrays), ``original_shape`` and ``img_shape``.
        """
        inds = results['frame_inds']
        if inds.ndim != 1:
            inds = results['frame_inds'] = np.squeeze(inds)
        frames = np.asarray(self.cache.frames(results['filename'])[inds])
        results['imgs'] = list(frames)
        results['original_shape'] = tuple(
            self.cache.clip(results['filename'])['raw_shape'])
        results['img_shape'] = frames.shape[1:3]
        return results


@DATASETS.register_module()
class CachedVideoDataset(VideoDataset):
    """mmaction2's ``VideoDataset`` whose videos are decoded once.

    The pipeline is written as for ``VideoDataset`` with decord
    (``DecordInit``, a frame sampler, ``DecordDecode``); its decoding is
    served by a :class:`FrameCache`. When a ``Resize`` follows
    ``DecordDecode`` the frames are kept at its size (the resize then
    changes nothing at that size, and resizes from it at the smaller sizes
    of a multigrid stage); otherwise at the decoded size. At the cached
    size a clip equals a fresh decode's, value for value.

    Args:
        ann_file (str): The video list (``VideoDataset``'s: ``path label``
            lines), under ``data_root`` if given.
        pipeline (list[dict]): The pipeline config.
        cache_dir (str, optional): The cache folder, shared by the runs of
            the same videos and pipeline. Defaults to
            ``work_dirs/frame_cache/<folder of ann_file>_<its name>_<hash>``
            (the hash of the decode and first resize: one folder per
            pipeline).
        max_cache_gib (float): Refuse, before training, a dataset whose
            frames need more cache than this (GiB). Defaults to 8.0.
        **kwargs: ``VideoDataset``'s arguments.

    Examples:
        >>> train_dataloader = dict(dataset=dict(
        ...     type='mmext.CachedVideoDataset', max_cache_gib=2.0))
    """

    def __init__(self, ann_file: str, pipeline: List[dict],
                 cache_dir: Optional[str] = None,
                 max_cache_gib: float = 8.0, **kwargs):
        if not is_number(max_cache_gib) or max_cache_gib <= 0:
            raise refuse(ValueError(f'max_cache_gib must be > 0, got '
                                    f'{max_cache_gib!r}.'))
        # None: named in full_init, after data_root joins the ann_file.
        self.frame_cache = FrameCache.from_pipeline(pipeline, cache_dir,
                                                    float(max_cache_gib))
        super().__init__(ann_file, self.use_cache(pipeline), **kwargs)

    def use_cache(self, pipeline: Sequence) -> list:
        """A pipeline served by this dataset's cache, e.g. a multigrid
        stage's (:class:`~mmext.multigrid.data.MultigridDataset` calls it).

        Args:
            pipeline (Sequence[dict]): A pipeline config of this dataset's
                videos.

        Returns:
            list: ``pipeline`` with ``DecordInit`` and ``DecordDecode``
            replaced by the cache's transforms.

        Raises:
            ValueError: Without exactly one ``DecordInit`` and one
                ``DecordDecode``.
        """
        out = list(pipeline)
        out[_only(out, 'DecordInit')] = CachedDecordInit(self.frame_cache)
        out[_only(out, 'DecordDecode')] = CachedDecordDecode(
            self.frame_cache)
        return out

    def full_init(self) -> None:
        """Load the data list, then prepare the cache and log its line.

        Raises:
            ValueError: As :meth:`FrameCache.prepare` (before training),
                also written to the run's log file.
        """
        if self._fully_initialized:
            return
        super().full_init()
        if self.frame_cache.cache_dir is None:
            stem = osp.splitext(osp.basename(self.ann_file))[0]
            parent = osp.basename(osp.dirname(osp.abspath(self.ann_file)))
            # The frames' identity in the name: a list seen by two
            # pipelines (validating on the train list) gets two caches.
            tag = hashlib.sha1(json.dumps(self.frame_cache.identity).encode(
            )).hexdigest()[:8]
            self.frame_cache.cache_dir = osp.join(
                'work_dirs', 'frame_cache', f'{parent}_{stem}_{tag}')
        names = [self.get_data_info(i)['filename'] for i in range(len(self))]
        try:
            line = self.frame_cache.prepare(names)
        except ValueError as exc:
            raise refuse(exc)
        print_log(line, logger='current')
