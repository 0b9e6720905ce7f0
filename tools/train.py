"""Train a model with an mm* config, mmext's hooks and wrappers available.

The options of mmdet 3.3, mmaction2 1.2 and mmseg 1.2 ``tools/train.py``
(``python tools/train.py -h``; meanings in
:func:`mmext.cli.config_for_train`). Works for any config the toolboxes
accept, with ``mmext.Runner`` unless the config names another
``runner_type``; on a CPU-only machine ``--launcher pytorch`` (what
``tools/dist_train.sh`` passes) trains with the gloo backend.
"""
from mmext.cli import build_runner, config_for_train, parser_for_train
from mmext.dist import finish_distributed


def main(argv=None):
    args = parser_for_train().parse_args(argv)
    build_runner(config_for_train(args)).train()
    finish_distributed()


if __name__ == '__main__':
    main()
