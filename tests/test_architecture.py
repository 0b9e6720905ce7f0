"""The package's shape (docs/en/design.md): import-linter contracts, and one
concept per module, each module one line of the design's tree."""
import os
import os.path as osp
import re
import shutil
import subprocess
import sys

from helpers import REPO_ROOT

LINT = osp.join(osp.dirname(sys.executable), 'lint-imports')


def _lint(root):
    return subprocess.run(
        [LINT, '--no-cache', osp.join(REPO_ROOT, 'setup.cfg')], cwd=root,
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=root))


def test_import_contracts_are_kept():
    proc = _lint(REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_runner_importing_a_method_breaks_the_contracts(tmp_path):
    """What the contracts are for: the runner must not know the methods
    (an import inside a function counts too)."""
    shutil.copytree(osp.join(REPO_ROOT, 'mmext'), tmp_path / 'mmext',
                    ignore=shutil.ignore_patterns('.mim', '__pycache__'))
    with open(tmp_path / 'mmext' / 'runner.py', 'a') as f:
        f.write('\n\ndef _peek():\n'
                '    from mmext.multigrid import MultigridHook\n'
                '    return MultigridHook\n')
    assert _lint(str(tmp_path)).returncode == 1


def _design_tree():
    """Module paths of the package tree in docs/en/design.md, each with its
    one-line concept."""
    with open(osp.join(REPO_ROOT, 'docs', 'en', 'design.md')) as f:
        text = f.read()
    block = re.search(r'## Package layout.*?```\n(.*?)```', text, re.S)
    modules, folders = {}, []
    for line in block.group(1).splitlines():
        match = re.match(r'( *)(\S+\.py|\S+/)(\s.*|)$', line)
        if not match:
            continue  # a concept continued on the next line
        depth = len(match.group(1)) // 2
        name, concept = match.group(2), match.group(3).strip()
        folders[depth:] = []
        if name.endswith('/'):
            folders.append(name.rstrip('/'))
        else:
            modules[osp.join(*folders, name)] = concept
    return modules


def test_every_module_is_one_concept_of_the_design():
    """One concept per file: each module of the package has its line in the
    design's tree (what it holds), and the tree lists no other file."""
    package = {
        osp.relpath(osp.join(folder, name), REPO_ROOT)
        for folder, _, names in os.walk(osp.join(REPO_ROOT, 'mmext'))
        if '.mim' not in folder and '__pycache__' not in folder
        for name in names if name.endswith('.py')
    }
    tree = _design_tree()
    assert set(tree) == package
    assert [path for path, concept in tree.items() if not concept] == []
