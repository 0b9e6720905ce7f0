"""Per-module gradient variance of a detector/segmentor against batch size.

Usage: python tools/analysis/agvm_variance.py CONFIG [--checkpoint CKPT]
    [--batch-sizes 4 8 16 32] [--repeats 3] [--modules backbone neck ...]
    [--out fig.png] [--json] [--device cpu] [--seed 0] [--cfg-options ...]

For each total batch size N, draws R pairs of independent halves of N/2
training images and prints, per module, d_i = 1 - cos(G_A, G_B), d_anchor /
d_i and the factor mu_i AGVM would apply, as mean +- std over the R repeats
(docs/en/agvm.md, "Does my recipe need AGVM?"). The model is left unchanged.
"""
import argparse
import json
import os.path as osp
import sys
import time

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import MODELS, init_default_scope
from mmengine.runner import Runner, load_checkpoint
from mmengine.runner.utils import set_random_seed

import mmext  # noqa: F401
from mmext.agvm.statistics import DEFAULT_RATIO_RANGE
from mmext.compat import trusted_checkpoint_loading
from mmext.runner import check_ann_file

from agvm_diagnostic import module_layout, variance_by_batch_size

KEYS = (('d', 'gradient variance d_i = 1 - cos(G_A, G_B)'),
        ('ratio', 'ratio d_anchor / d_i'),
        ('mu', 'factor mu_i = sqrt(clamp(d_anchor / d_i, {lo}, {hi})) '
         'AGVM would apply (one measurement, before its EMA)'))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('--checkpoint', help='model state to measure '
                        '(default: the config\'s initialisation)')
    parser.add_argument('--batch-sizes', type=int, nargs='+',
                        default=[4, 8, 16, 32],
                        help='total batch sizes N (even); two halves of N/2 '
                        '(default: %(default)s)')
    parser.add_argument('--repeats', type=int, default=3,
                        help='pairs of halves (different images) per N '
                        '(default: %(default)s)')
    parser.add_argument('--modules', nargs='+',
                        help='modules, anchor first (default: the config\'s '
                        'optim_wrapper.module_names, else the model\'s '
                        'top-level modules)')
    parser.add_argument('--out', help='draw d_i against N into this image')
    parser.add_argument('--json', action='store_true',
                        help='print the results as one JSON line at the end')
    parser.add_argument('--device', default='cuda'
                        if torch.cuda.is_available() else 'cpu',
                        help='default: cuda if available, here %(default)s')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the initialisation and image order '
                        '(default: %(default)s)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    args = parser.parse_args()
    odd = [n for n in args.batch_sizes if n < 2 or n % 2]
    if odd:
        parser.error(f'--batch-sizes must be even and >= 2 (two halves of '
                     f'N/2 images), got {odd}')
    if args.repeats < 1:
        parser.error(f'--repeats must be >= 1, got {args.repeats}')
    if args.checkpoint and not osp.isfile(args.checkpoint):
        parser.error(f'--checkpoint {args.checkpoint}: no such file')
    return args


def check_data(cfg: Config, config: str) -> None:
    """Exit with the fix if the training annotations are missing."""
    try:
        check_ann_file(cfg.train_dataloader.dataset)
    except (FileNotFoundError, ValueError) as exc:
        sys.exit(f'agvm_variance: the training data of {config}: {exc}')


class HalfSampler:
    """``sampler(images)``: micro-batches of the config's batch size (fewer
    for a smaller half) of fresh images, from an infinite shuffled loader."""

    def __init__(self, cfg: Config, seed: int):
        self.loader_cfg = cfg.train_dataloader
        self.micro = self.loader_cfg.batch_size
        self.seed = seed
        self.iters = {}

    def __call__(self, images: int):
        size = min(self.micro, images)
        if images % size:
            raise SystemExit(f'agvm_variance: a half of {images} images is '
                             f'not a whole number of micro-batches of '
                             f'{size}; choose batch sizes N with N/2 a '
                             f'multiple of {size}')
        if size not in self.iters:
            loader = Runner.build_dataloader(
                dict(self.loader_cfg, batch_size=size, batch_sampler=None,
                     persistent_workers=False,
                     sampler=dict(type='InfiniteSampler', shuffle=True)),
                seed=self.seed)
            self.dataset_size = len(loader.dataset)
            self.iters[size] = iter(loader)
        return [next(self.iters[size]) for _ in range(images // size)]


def print_tables(rows, names, ratio_range):
    lo, hi = ratio_range
    for key, title in KEYS:
        print(f'\n{title.format(lo=lo, hi=hi)}, mean +- std over repeats')
        print(f'{"N":>5}' + ''.join(f'{n:>20}' for n in names))
        for row in rows:
            cells = [row[key][n] for n in names]
            print(f'{row["batch_size"]:>5}' + ''.join(
                f'{c["mean"]:>12.4f} +-{c["std"]:>6.4f}' for c in cells))


def plot(rows, names, out, title):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    sizes = [row['batch_size'] for row in rows]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name in names:
        mean = [row['d'][name]['mean'] for row in rows]
        std = [row['d'][name]['std'] for row in rows]
        line, = ax.plot(sizes, mean, marker='o', label=name)
        ax.fill_between(sizes, [m - s for m, s in zip(mean, std)],
                        [m + s for m, s in zip(mean, std)],
                        color=line.get_color(), alpha=0.2)
    ax.set_xscale('log', base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel('total batch size N (two halves of N/2)')
    ax.set_ylabel('d_i = 1 - cos(G_A, G_B)')
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    args = parse_args()
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    if cfg.get('default_scope'):
        init_default_scope(cfg.default_scope)
    check_data(cfg, args.config)
    optim_cfg = cfg.get('optim_wrapper', {})
    ratio_range = tuple(optim_cfg.get('ratio_range') or DEFAULT_RATIO_RANGE)
    if optim_cfg.get('statistic', 'grad') != 'grad':
        print(f"note: the config's AGVM measures statistic="
              f"{optim_cfg['statistic']!r}; this tool measures the raw "
              f'gradient', file=sys.stderr)
    set_random_seed(args.seed)
    model = MODELS.build(cfg.model)
    model.init_weights()
    if args.checkpoint:
        with trusted_checkpoint_loading():
            load_checkpoint(model, args.checkpoint, map_location='cpu',
                            strict=True)
    model.to(args.device)
    layout = module_layout(model, args.modules
                           or optim_cfg.get('module_names'))
    names = layout.module_names
    draw = HalfSampler(cfg, args.seed)
    start = time.perf_counter()
    rows = variance_by_batch_size(model, draw, args.batch_sizes, args.repeats,
                                  layout, ratio_range)
    seconds = time.perf_counter() - start
    too_big = [n for n in args.batch_sizes if n > draw.dataset_size]
    state = args.checkpoint or f'initialisation (seed {args.seed})'
    print(f'\n{args.config} at {state}; anchor {names[0]}; '
          f'{args.repeats} repeat(s); micro-batch {draw.micro}; '
          f'{draw.dataset_size} training images; {seconds:.0f} s')
    if too_big:
        print(f'warning: N = {too_big} exceed the {draw.dataset_size} '
              f'training images: the two halves share images, which lowers '
              f'd_i')
    print_tables(rows, names, ratio_range)
    if args.out:
        plot(rows, names, args.out,
             f'{osp.basename(args.config)}\n{osp.basename(state)}')
        print(f'\nfigure: {args.out}')
    if args.json:  # NaN (an invalid measurement) as null
        rows = json.loads(json.dumps(rows), parse_constant=lambda _: None)
        print(json.dumps(dict(
            config=args.config, checkpoint=args.checkpoint, seed=args.seed,
            modules=names, ratio_range=list(ratio_range),
            micro_batch=draw.micro, dataset_size=draw.dataset_size,
            seconds=round(seconds, 1), results=rows)))


if __name__ == '__main__':
    main()
