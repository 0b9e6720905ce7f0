"""Train a model with an mm* config, mmext's hooks and wrappers available.

Same CLI as mmdet/mmaction2/mmseg ``tools/train.py``. Works for any config
the toolboxes accept; on a CPU-only machine ``--launcher pytorch`` (what
``tools/dist_train.sh`` passes) trains with the gloo backend.
"""
import argparse
import os

import mmext  # noqa: F401  (compat fixes and the ``mmext::`` config prefix)
from mmengine.config import DictAction

from mmext.utils import build_runner, enable_amp, load_run_config


def parse_args():
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--amp', action='store_true',
        help='enable automatic mixed precision training (needs CUDA)')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from the given checkpoint; without a value, from the '
        'latest checkpoint in the work dir')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings of the config, key=value pairs in xxx=yyy '
        'format, e.g. train_dataloader.batch_size=4')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch', 'slurm'], default='none',
        help='job launcher')
    # torch.distributed.launch passes --local-rank; torchrun sets LOCAL_RANK.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


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
