"""Train a model with an mm* config, mmext's hooks and wrappers available.

Same CLI as mmdet/mmaction2/mmseg ``tools/train.py``. Works for any config
the toolboxes accept; on a CPU-only machine ``--launcher pytorch`` (what
``tools/dist_train.sh`` passes) trains with the gloo backend.
"""
import argparse

import mmext  # noqa: F401  (compat fixes and the ``mmext::`` config prefix)
from mmext.runner import add_run_args, build_runner, enable_amp, load_run_config


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--amp', action='store_true',
        help='enable automatic mixed precision training (needs CUDA)')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from the given checkpoint; without a value, from the '
        'latest checkpoint in the work dir')
    add_run_args(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = load_run_config(args.config, args.cfg_options, args.work_dir,
                          args.launcher)
    if args.amp:
        enable_amp(cfg)
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume
    build_runner(cfg).train()


if __name__ == '__main__':
    main()
