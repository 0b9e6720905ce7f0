"""Test (evaluate) a checkpoint with an mm* config.

The options of mmdet 3.3, mmaction2 1.2 and mmseg 1.2 ``tools/test.py``
(``python tools/test.py -h``; meanings in :func:`mmext.cli.config_for_test`).
"""
from mmext.cli import build_runner, config_for_test, parser_for_test
from mmext.dist import finish_distributed


def main(argv=None):
    args = parser_for_test().parse_args(argv)
    build_runner(config_for_test(args)).test()
    finish_distributed()


if __name__ == '__main__':
    main()
