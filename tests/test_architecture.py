"""The package's layers (docs/en/design.md): import-linter contracts and
module sizes."""
import os
import os.path as osp
import shutil
import subprocess
import sys

from helpers import REPO_ROOT

LINT = osp.join(osp.dirname(sys.executable), 'lint-imports')
MAX_LINES = 500


def _lint(root):
    return subprocess.run(
        [LINT, '--no-cache', osp.join(REPO_ROOT, 'setup.cfg')], cwd=root,
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=root))


def test_import_contracts_are_kept():
    proc = _lint(REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert 'Contracts: 3 kept, 0 broken.' in proc.stdout


def test_runner_importing_a_method_breaks_the_contracts(tmp_path):
    """What the contracts are for: the runner must not know the methods
    (an import inside a function counts too)."""
    shutil.copytree(osp.join(REPO_ROOT, 'mmext'), tmp_path / 'mmext',
                    ignore=shutil.ignore_patterns('.mim', '__pycache__'))
    with open(tmp_path / 'mmext' / 'runner.py', 'a') as f:
        f.write('\n\ndef _peek():\n'
                '    from mmext.multigrid import MultigridHook\n'
                '    return MultigridHook\n')
    proc = _lint(str(tmp_path))
    assert proc.returncode == 1
    assert 'Contracts: 0 kept, 3 broken.' in proc.stdout
    assert 'mmext.runner is not allowed to import mmext.multigrid' in (
        proc.stdout)


def test_no_module_is_over_the_size_limit():
    sizes = {}
    for folder, _, names in os.walk(osp.join(REPO_ROOT, 'mmext')):
        for name in names:
            if name.endswith('.py'):
                path = osp.join(folder, name)
                with open(path) as f:
                    sizes[osp.relpath(path, REPO_ROOT)] = len(f.readlines())
    assert len(sizes) >= 30
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
