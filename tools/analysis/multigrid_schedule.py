"""Print (and draw) the multigrid schedule a config's MultigridHook trains.

Usage: python tools/analysis/multigrid_schedule.py CONFIG
[--dataset | --num-samples N] [--world-size W] [--json] [--plot OUT.png]
[--no-model-check] [--cfg-options ...]

The schedule is the hook's own :class:`mmext.multigrid.MultigridPlan`,
exact when the clip count is known (``--dataset``, ``--num-samples``). The
model is built (no weights) to run the hook's checks (``check_run``) unless
``--no-model-check``. Every refusal prints ``error: <message>`` on stderr and
exits 1. Details: docs/en/multigrid.md (Print the schedule before training).
"""
import argparse
import json
import math
import os.path as osp
import sys
import warnings

from mmengine.config import Config, DictAction
from mmengine.logging import MMLogger
from mmengine.registry import DATASETS, MODELS, init_default_scope

from mmext.multigrid import MultigridPlan
from mmext.multigrid.checks import check_run
from mmext.multigrid.report import describe, summary
from mmext.multigrid.transformers import install_shape_adapters
from mmext.runner import check_ann_file, check_hook_options


def parse_args():
    parser = argparse.ArgumentParser(
        description='Print the multigrid schedule of a config')
    parser.add_argument('config')
    count = parser.add_mutually_exclusive_group()
    count.add_argument('--dataset', action='store_true',
                       help='count the train dataset (exact iterations)')
    count.add_argument('--num-samples', type=int,
                       help='number of training clips (exact iterations)')
    parser.add_argument('--world-size', type=int, default=1,
                        help='processes the run uses (default: %(default)s)')
    parser.add_argument('--json', action='store_true',
                        help='print one JSON object instead of the table')
    parser.add_argument('--plot', metavar='OUT.png',
                        help='draw the schedule into this file')
    parser.add_argument('--no-model-check', action='store_true',
                        help='skip building the model for its checks')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    return parser.parse_args()


def plot(plan: MultigridPlan, title: str, out: str) -> None:
    """Batch size, T, S and LR over epochs, one axis each."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(4, 1, sharex=True, figsize=(9, 8))
    ax_b, ax_t, ax_s, ax_lr = axes
    for stage in plan.stages:
        span = [stage.start_epoch, stage.end_epoch]
        batches = plan.batch_sizes(stage)
        for k, (b, shape) in enumerate(zip(batches, stage.short_cycle)):
            long_shape = k == len(batches) - 1
            style = dict(color='C0' if long_shape else 'C1',
                         lw=2.5 if long_shape else 1,
                         ls='-' if long_shape else ':')
            ax_b.plot(span, [b, b], **style)
            ax_s.plot(span, [shape.crop_size] * 2, **style)
        ax_t.plot(span, [stage.shape.clip_len] * 2, color='C2', lw=2.5)
        ax_lr.plot(span, [stage.lr_factor] * 2, color='C3', lw=2.5)
    lr_starts = [b.start_epoch for a, b in zip(plan.stages, plan.stages[1:])
                 if a.lr_stage != b.lr_stage]
    for ax in axes:
        for x in lr_starts:
            ax.axvline(x, color='grey', lw=0.8, ls='--')
        ax.grid(alpha=0.3)
    ax_b.set_ylabel('batch per process')
    ax_b.set_yscale('log', base=2)
    ax_t.set_ylabel('clip length T\n(frames)')
    ax_s.set_ylabel('crop size S\n(pixels)')
    ax_lr.set_ylabel('LR / recipe LR')
    ax_lr.set_yscale('log')
    ax_lr.set_xlabel('epoch (multigrid)')
    for ax, values in ((ax_b, sorted({b for s in plan.stages
                                      for b in plan.batch_sizes(s)})),
                       (ax_t, sorted({s.shape.clip_len
                                      for s in plan.stages})),
                       (ax_s, sorted({x.crop_size for s in plan.stages
                                      for x in s.short_cycle}))):
        ax.set_yticks(values)
        ax.set_yticklabels([str(v) for v in values])
        ax.minorticks_off()
    ax_b.plot([], [], color='C0', lw=2.5, label='long-cycle shape')
    ax_b.plot([], [], color='C1', lw=1, ls=':', label='short-cycle shapes')
    ax_b.plot([], [], color='grey', lw=0.8, ls='--', label='LR stage start')
    ax_b.legend(loc='upper right', fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def refuse(message: str, caught=()) -> None:
    """Print the warnings given so far and exit 1 with ``error: message``."""
    for w in caught:
        print(f'warning: {w.message}', file=sys.stderr)
    sys.exit(f'error: {message}')


def _failure(error: Exception) -> str:
    return f'{type(error).__name__}: {error}'


def load_config(args) -> Config:
    """The config with ``--cfg-options`` merged; refuses on any error."""
    if args.json:
        # stdout is the JSON alone: mmengine logs config substitutions
        # (e.g. ``Using env variable ...``) at INFO to the current logger.
        MMLogger.get_instance('multigrid_schedule', log_level='WARNING')
    try:
        cfg = Config.fromfile(args.config)
        if args.cfg_options:
            cfg.merge_from_dict(args.cfg_options)
    except Exception as error:  # noqa: B902 any load error is reported
        options = ' with its --cfg-options' if args.cfg_options else ''
        refuse(f'cannot read the config {args.config}{options}: '
               f'{_failure(error)}')
    try:
        check_hook_options(cfg, args.cfg_options)
    except ValueError as error:
        refuse(str(error))
    return cfg


def clips_per_rank(cfg: Config, args):
    """Clips per process (``--dataset``/``--num-samples``), or None."""
    for name in ('world_size', 'num_samples'):
        value = getattr(args, name)
        if value is not None and value < 1:
            refuse(f'--{name.replace("_", "-")} must be at least 1, got '
                   f'{value}')
    num_clips = args.num_samples
    if args.dataset:
        dataset = cfg.get('train_dataloader', {}).get('dataset', {})
        try:  # a missing list: the train tool's message
            check_ann_file(dataset)
        except (FileNotFoundError, ValueError) as error:
            refuse(str(error))
        try:
            num_clips = len(DATASETS.build(cfg.train_dataloader.dataset))
        except Exception as error:  # noqa: B902 reported with its cause
            refuse(f'cannot build the train dataset '
                   f'(train_dataloader.dataset, type '
                   f'{dataset.get("type", "?")}) to count its clips: '
                   f'{_failure(error)}. Fix the dataset config, or give the '
                   f'count with --num-samples N.')
    return None if num_clips is None else math.ceil(num_clips /
                                                    args.world_size)


def plan_and_check(cfg: Config, args, per_rank):
    """``(plan, warnings, shape adapter lines)``; refuses on any error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        try:
            plan = MultigridPlan.from_config(cfg, samples_per_rank=per_rank,
                                             world_size=args.world_size)
        except ValueError as error:
            refuse(str(error), caught)
        except Exception as error:  # noqa: B902 a malformed config
            refuse(f'cannot plan the multigrid schedule of the config: '
                   f'{_failure(error)}', caught)
    model = None
    if not args.no_model_check:
        try:
            model = MODELS.build(cfg.model)
        except Exception as error:  # noqa: B902 reported with its cause
            refuse(f'cannot build the model (model.type '
                   f'{cfg.model.get("type", "?")}) for the checks: '
                   f'{_failure(error)}. Fix the model config, or skip the '
                   f'model checks with --no-model-check.', caught)
    # The model as the hook trains it.
    adapters = install_shape_adapters(model) if model is not None else []
    with warnings.catch_warnings(record=True) as checked:
        warnings.simplefilter('always')
        try:
            plan.clip_flops = check_run(
                plan, model,
                cfg.train_dataloader.dataset.get('pipeline')).clip_flops
        except ValueError as error:
            refuse(str(error), caught + checked)
        except Exception as error:  # noqa: B902 a model the probe breaks
            refuse(f'cannot check the model against the plan: '
                   f'{_failure(error)}', caught + checked)
    return plan, [str(w.message) for w in caught + checked], adapters


def main():
    args = parse_args()
    cfg = load_config(args)
    init_default_scope(cfg.get('default_scope', 'mmaction'))
    per_rank = clips_per_rank(cfg, args)
    plan, messages, adapters = plan_and_check(cfg, args, per_rank)
    if args.json:
        print(json.dumps(dict(summary(plan, messages),
                              shape_adapters=adapters), indent=1))
    else:
        for message in messages:
            print(f'warning: {message}')
        for line in adapters:
            print(f'shape adapter: {line}')
        print(describe(plan))
    if args.plot:
        name = osp.splitext(osp.basename(args.config))[0]
        try:
            plot(plan, f'{name}\n{plan.max_epochs} epochs, '
                 f'{plan.iteration_saving():.2f}x fewer iterations than the '
                 f'recipe', args.plot)
        except Exception as error:  # noqa: B902 e.g. an unwritable path
            refuse(f'cannot draw the plot into {args.plot}: '
                   f'{_failure(error)}')
        print(f'plot: {osp.abspath(args.plot)}',
              file=sys.stderr if args.json else sys.stdout)


if __name__ == '__main__':
    main()
