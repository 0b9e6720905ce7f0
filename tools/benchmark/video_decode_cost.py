"""Seconds per clip of a recipe's train pipeline at each multigrid shape.

Usage: python tools/benchmark/video_decode_cost.py
[--config configs/multigrid/recognizer3d_r18w64_multigrid_fight.py]
[--clips 24] [--rounds 3] [--json]

Runs the train pipeline of the config (as ``MultigridHook`` rewrites it for
each long-cycle ``(T, S)``) on the first ``--clips`` clips of its train list,
in one process (one worker's view), for these decoding variants:

- ``accurate``: the recipe's ``DecordDecode`` (``get_batch`` of the sampled
  frames: decodes from the preceding keyframe up to each sampled frame);
- ``efficient``: ``DecordDecode(mode='efficient')``: seeks and returns
  keyframes, so frames are duplicated and not the sampled ones (not correct
  for short clips; shown for its cost only);
- ``threads2``: ``DecordInit(num_threads=2)`` (ffmpeg threads per reader);
- ``decode_only``: ``accurate`` without the augmentations after decoding.

Variants and shapes are timed round-robin (``--rounds``) so a change of
machine load hits all alike; the median per clip is printed. Compare with the
compute time per clip of ``multigrid_speedup.py``: a run whose workers cannot
produce clips that fast is data-bound.
"""
import argparse
import json
import os
import statistics
import time

from mmengine.dataset import Compose

from mmext.cli import load_run_config
from mmext.multigrid import MultigridPlan
from mmext.multigrid.pipeline import resize_pipeline

DEFAULT_CONFIG = 'configs/multigrid/recognizer3d_r18w64_multigrid_fight.py'


def _variants(pipeline):
    """Named edited copies of the train pipeline config."""

    def edit(type_, **kwargs):
        return [dict(t, **kwargs) if t['type'] == type_ else dict(t)
                for t in pipeline]

    return dict(
        accurate=[dict(t) for t in pipeline],
        efficient=edit('DecordDecode', mode='efficient'),
        threads2=edit('DecordInit', num_threads=2),
        decode_only=[dict(t) for t in pipeline])


def _shape_pipeline(name, pipeline, clip_len, crop_size):
    """The variant at one grid shape (``decode_only`` cut after decoding)."""
    out = resize_pipeline(pipeline, clip_len, crop_size)
    if name == 'decode_only':
        out = out[:[t['type'] for t in out].index('DecordDecode') + 1]
    return out


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    parser.add_argument('--clips', type=int, default=24)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--json', action='store_true')
    args = parser.parse_args()
    from mmaction.registry import DATASETS
    from mmaction.utils import register_all_modules
    register_all_modules()
    cfg = load_run_config(args.config)
    dataset = DATASETS.build(cfg.train_dataloader.dataset)
    infos = [dataset.get_data_info(i)
             for i in range(min(args.clips, len(dataset)))]
    plan = MultigridPlan.from_config(cfg)
    shapes = sorted({(t, s) for _, t, s in plan.stage_shapes()}, reverse=True)
    pipeline = list(cfg.train_dataloader.dataset.pipeline)
    runs = {(name, t, s): Compose(_shape_pipeline(name, p, t, s))
            for name, p in _variants(pipeline).items() for t, s in shapes}
    times = {key: [] for key in runs}
    print(f'load average (1, 5, 15 min): {os.getloadavg()}', flush=True)
    for _ in range(args.rounds):
        for key, compose in runs.items():
            start = time.perf_counter()
            for info in infos:
                compose(dict(info))
            times[key].append((time.perf_counter() - start) / len(infos))
    rows = [dict(variant=name, clip_len=t, crop_size=s,
                 ms_per_clip=1000 * statistics.median(times[(name, t, s)]))
            for name, t, s in runs]
    print(f'{"variant":>12} {"T":>4} {"S":>4} {"ms/clip":>8}')
    for r in rows:
        print(f'{r["variant"]:>12} {r["clip_len"]:>4} {r["crop_size"]:>4} '
              f'{r["ms_per_clip"]:>8.1f}')
    print(f'load average (1, 5, 15 min): {os.getloadavg()}')
    if args.json:
        print(json.dumps(dict(rows=rows, load_average=os.getloadavg())))


if __name__ == '__main__':
    main()
