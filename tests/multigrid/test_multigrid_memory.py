"""mmext.multigrid.memory: glibc keeps freed memory in CPU runs, set by
the hook only when the model trains on the CPU."""
import os.path as osp
import subprocess
import sys

import pytest
from helpers import CUDA_MARKS, REPO_ROOT
from mg_helpers import TINY
from multigrid_speedup import mmapped_bytes

# A 64 MiB tensor from a fresh mmap, or from the heap (glibc's
# mallinfo2().hblkhd, the bytes in mmapped blocks, does not grow).
_PROBE = """
import torch
from multigrid_speedup import mmapped_bytes
before = mmapped_bytes()
block = torch.empty(16 * 2**20)  # 64 MiB
print('MMAPPED', mmapped_bytes() - before)
"""

_HOOK = """
import logging
from bench_utils import build_runner, load_run_config
cfg = load_run_config({tiny!r}, None, {work_dir!r})
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
    env = dict(__import__('os').environ, PYTHONPATH=osp.join(
        REPO_ROOT, 'tools', 'benchmark'))
    out = subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.split()[0]: int(line.split()[1])
            for line in out.stdout.splitlines()
            if line.startswith(('MMAPPED', 'LOGGED'))}


GLIBC = pytest.mark.skipif(mmapped_bytes() is None,
                           reason='needs glibc >= 2.33 (mallinfo2)')


@GLIBC
def test_keep_freed_memory_serves_large_blocks_from_the_heap():
    assert _run(_PROBE)['MMAPPED'] >= 64 * 2**20
    applied = _run('from mmext.multigrid.memory import keep_freed_memory\n'
                   'assert keep_freed_memory()\n' + _PROBE)
    assert applied['MMAPPED'] == 0


@GLIBC
@pytest.mark.usefixtures('demo_data')
@pytest.mark.parametrize('keep,device,applied', [
    (True, 'cpu', True), (False, 'cpu', False), (True, 'meta', False),
    pytest.param(True, 'cuda', False, marks=CUDA_MARKS)
], ids=['cpu', 'opt-out', 'not-cpu', 'cuda'])
def test_hook_keeps_memory_on_cpu_only(keep, device, applied, tmp_path):
    """MultigridHook.before_run on the tiny recipe's runner (CUDA when the
    runner trains there), then the probe in the same process."""
    code = _HOOK.format(tiny=TINY, work_dir=str(tmp_path), keep=keep,
                        device=device) + _PROBE
    if device == 'cpu':
        code = "import os\nos.environ['CUDA_VISIBLE_DEVICES'] = ''\n" + code
    out = _run(code)
    assert out['LOGGED'] == int(applied)
    assert (out['MMAPPED'] == 0) == applied
