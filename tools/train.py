"""Train a model with an mm* config, mmext's hooks and wrappers available.

The options of mmdet 3.3, mmaction2 1.2 and mmseg 1.2 ``tools/train.py``
(``python tools/train.py -h``; meanings in :func:`mmext.runner.train_config`).
Works for any config the toolboxes accept, with ``mmext.Runner`` unless the
config names another ``runner_type``; on a CPU-only machine
``--launcher pytorch`` (what ``tools/dist_train.sh`` passes) trains with the
gloo backend.
"""
import mmext  # noqa: F401  (the ``mmext::`` config prefix)
from mmext.runner import (build_runner, finish_distributed, train_config,
                          train_parser)


def main(argv=None):
    args = train_parser().parse_args(argv)
    build_runner(train_config(args)).train()
    finish_distributed()


if __name__ == '__main__':
    main()
