"""Test (evaluate) a checkpoint with an mm* config.

Same CLI as mmdet/mmaction2/mmseg ``tools/test.py``.
"""
import argparse
import os

import mmext  # noqa: F401  (compat fixes and the ``mmext::`` config prefix)
from mmengine.config import DictAction

from mmext.utils import build_runner, load_run_config


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and eval) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir', help='the directory to save the evaluation metrics')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings of the config, key=value pairs in xxx=yyy '
        'format')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch', 'slurm'], default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main():
    args = parse_args()
    cfg = load_run_config(args.config, args.cfg_options, args.work_dir,
                          args.launcher)
    cfg.load_from = args.checkpoint
    build_runner(cfg).test()


if __name__ == '__main__':
    main()
