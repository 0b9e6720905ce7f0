"""Test (evaluate) a checkpoint with an mm* config.

The options of mmdet 3.3, mmaction2 1.2 and mmseg 1.2 ``tools/test.py``
(``python tools/test.py -h``; meanings in :func:`mmext.runner.test_config`).
"""
import mmext  # noqa: F401  (the ``mmext::`` config prefix)
from mmext.runner import (build_runner, finish_distributed, test_config,
                          test_parser)


def main(argv=None):
    args = test_parser().parse_args(argv)
    build_runner(test_config(args)).test()
    finish_distributed()


if __name__ == '__main__':
    main()
