"""Test (evaluate) a checkpoint with an mm* config.

Same CLI as mmdet/mmaction2/mmseg ``tools/test.py``.
"""
import argparse

import mmext  # noqa: F401  (compat fixes and the ``mmext::`` config prefix)
from mmext.runner import add_run_args, build_runner, load_run_config


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    add_run_args(parser)
    return parser.parse_args()


def main():
    args = parse_args()
    cfg = load_run_config(args.config, args.cfg_options, args.work_dir,
                          args.launcher)
    cfg.load_from = args.checkpoint
    build_runner(cfg).test()


if __name__ == '__main__':
    main()
