"""The user tools' modules the harnesses build on, importable as run.

The harnesses run as scripts from the project root, their own folder first
on ``sys.path``; the modules they build on are the user tools' own
(``multigrid_speedup`` and ``bench_utils`` in tools/benchmark,
``agvm_diagnostic`` in tools/analysis), which a harness reuses rather than
copies. Importing this module puts those two folders on ``sys.path``, once,
so that no command needs ``PYTHONPATH``: every harness imports it first.
"""
import os.path as osp
import sys

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
# The folders of the user tools' modules, in the order they are searched.
FOLDERS = [osp.join(ROOT, 'tools', 'benchmark'),
           osp.join(ROOT, 'tools', 'analysis')]

for folder in FOLDERS:
    if folder not in sys.path:
        sys.path.append(folder)
