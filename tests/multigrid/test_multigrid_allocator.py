"""mmext.multigrid.allocator: glibc keeps freed memory in CPU multigrid runs.

``mallopt`` acts on the whole process and cannot be read back, so each case
runs in a fresh interpreter and observes the effect: after the setting, a
64 MiB tensor comes from the heap (glibc's ``mallinfo2().hblkhd``, the bytes
in mmapped blocks, does not grow); without it, from a fresh ``mmap``.
"""
import os.path as osp
import subprocess
import sys

import pytest
from helpers import CUDA_MARKS, REPO_ROOT

from mmext.multigrid.allocator import mmapped_bytes

pytestmark = pytest.mark.skipif(
    mmapped_bytes() is None, reason='needs glibc >= 2.33 (mallinfo2)')

_PROBE = """
import torch
from mmext.multigrid.allocator import mmapped_bytes
before = mmapped_bytes()
block = torch.empty(16 * 2**20)  # 64 MiB
print('MMAPPED', mmapped_bytes() - before)
"""

_HOOK = """
import logging, os, sys
sys.path[:0] = [{tests!r}, {multigrid!r}]
os.chdir({root!r})
from mmext.cli import build_runner, load_run_config
cfg = load_run_config('tests/multigrid/tiny_mg.py', None, {work_dir!r})
cfg.custom_hooks[0].update(keep_cpu_memory={keep})
runner = build_runner(cfg)
# What Runner.train does before its hooks' before_run.
runner.optim_wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
if {device!r} == 'meta':  # a device other than the CPU, as CUDA is
    runner.model.to('meta')
records = []
handler = logging.Handler()
handler.emit = records.append
runner.logger.addHandler(handler)
runner.call_hook('before_run')
print('LOGGED', sum('keeps freed memory' in r.getMessage() for r in records))
"""


def _run(code):
    out = subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.split()[0]: int(line.split()[1])
            for line in out.stdout.splitlines()
            if line.startswith(('MMAPPED', 'LOGGED'))}


def test_keep_freed_memory_serves_large_blocks_from_the_heap():
    assert _run(_PROBE)['MMAPPED'] >= 64 * 2**20
    applied = _run('from mmext.multigrid.allocator import keep_freed_memory\n'
                   'assert keep_freed_memory()\n' + _PROBE)
    assert applied['MMAPPED'] == 0


@pytest.mark.usefixtures('demo_data')
@pytest.mark.parametrize('keep,device,applied', [
    (True, 'cpu', True), (False, 'cpu', False), (True, 'meta', False),
    pytest.param(True, 'cuda', False, marks=CUDA_MARKS)
], ids=['cpu', 'opt-out', 'not-cpu', 'cuda'])
def test_hook_keeps_memory_on_cpu_only(keep, device, applied, tmp_path):
    """MultigridHook.before_run on the tiny recipe's runner (CUDA when the
    runner trains there), then the probe in the same process."""
    code = _HOOK.format(tests=osp.join(REPO_ROOT, 'tests'),
                        multigrid=osp.join(REPO_ROOT, 'tests', 'multigrid'),
                        root=REPO_ROOT, work_dir=str(tmp_path), keep=keep,
                        device=device) + _PROBE
    if device == 'cpu':
        code = "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\n" + code
    out = _run(code)
    assert out['LOGGED'] == int(applied)
    assert (out['MMAPPED'] == 0) == applied

