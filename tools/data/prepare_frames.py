"""Prepare a video dataset as frames at the training size, for data too
large for the frame cache (mmext.CachedVideoDataset).

Usage, from the project root:
python tools/data/prepare_frames.py CONFIG --out DIR [--split train]
[--quality 95] [--cfg-options key=value ...]

Decodes every video of the config's ``--split`` set as its pipeline does
(``DecordInit``, ``DecordDecode``), resized by the ``Resize`` right after
the decode (the frame cache's size: the first resize), and writes the
frames as JPEG files ``DIR/<video path without extension>/img_00001.jpg``
... and mmaction2's rawframe list (a video that cannot be decoded is
named and left out) ``DIR/<split>.txt`` (``frame_dir
total_frames label``). Trained from these with ``RawframeDataset`` and
``RawFrameDecode``, a clip reads and decodes only its ``T`` sampled
frames, small ones: its loading cost follows the grid shape, where a video
decoder's does not (docs/en/multigrid.md, "Data-bound runs"). The tool
prints the config lines to use.
"""
import argparse
import os
import os.path as osp
import sys

import cv2
from mmengine.config import Config, DictAction
from mmengine.registry import DATASETS, DefaultScope

from mmext.multigrid import FrameCache


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument('config', help='a video recognition config')
    parser.add_argument('--out', required=True, help='the frames folder')
    parser.add_argument('--split', choices=['train', 'val', 'test'],
                        default='train', help='the set (default: train)')
    parser.add_argument('--quality', type=int, default=95,
                        help='JPEG quality 1-100 (default: 95)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='overrides of the config')
    args = parser.parse_args()
    if not 1 <= args.quality <= 100:
        parser.error(f'--quality must be in 1..100, got {args.quality}')
    return args


def main():
    args = parse_args()
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    ds_cfg = cfg[f'{args.split}_dataloader'].dataset.copy()
    for key in ('cache_dir', 'max_cache_gib'):  # a CachedVideoDataset's
        ds_cfg.pop(key, None)
    ds_cfg.type = 'VideoDataset'
    try:
        # Its decode and first resize only: no cache folder, no bound.
        cache = FrameCache.from_pipeline(ds_cfg.pipeline, None, 0.0)
    except ValueError as error:
        raise SystemExit(f'{args.config}: {error}')
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        dataset = DATASETS.build(ds_cfg)
    root = dataset.data_prefix['video']
    lines, skipped = [], []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        try:
            frames = cache.decode(info['filename'])
        except Exception as error:  # noqa: B902 any decoder's error
            skipped.append(info['filename'])
            print(f'skipped {info["filename"]}: cannot decode it '
                  f'({type(error).__name__}: {error})', file=sys.stderr)
            continue
        if i % 100 == 99:
            print(f'{i + 1} of {len(dataset)} videos', flush=True)
        folder = osp.splitext(osp.relpath(info['filename'], root))[0]
        os.makedirs(osp.join(args.out, folder), exist_ok=True)
        for k, frame in enumerate(frames):
            cv2.imwrite(osp.join(args.out, folder, f'img_{k + 1:05d}.jpg'),
                        frame[..., ::-1],  # RGB -> the file's BGR
                        [cv2.IMWRITE_JPEG_QUALITY, args.quality])
        lines.append(f'{folder} {len(frames)} {info["label"]}\n')
    ann = osp.join(args.out, f'{args.split}.txt')
    with open(ann, 'w') as f:
        f.writelines(lines)
    left_out = f' ({len(skipped)} left out)' if skipped else ''
    print(f'wrote {len(lines)} videos as frames into {args.out} and {ann}'
          f'{left_out}. In the config: '
          f"dataset=dict(type='RawframeDataset', ann_file='{ann}', "
          f"data_prefix=dict(img='{args.out}'), filename_tmpl="
          f"'img_{{:05d}}.jpg'), and in its pipeline RawFrameDecode for "
          f'DecordDecode, without DecordInit.')


if __name__ == '__main__':
    main()
