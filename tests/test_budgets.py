"""The size budgets of issue 40, each failing with the figure and the budget:
lines of the package and of the user tools, methods of ``MultigridPlan``.
(The messages' and the tests' literals: tests/test_messages.py.)"""
import ast
import os
import os.path as osp

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
MMEXT_LINES, TOOLS_LINES, PLAN_METHODS = 6300, 3200, 20


def count_lines(folder, suffixes):
    """``wc -l`` of the files under ``folder`` ending with ``suffixes``."""
    total = 0
    for root, _, names in os.walk(osp.join(REPO_ROOT, folder)):
        if '.mim' in root or '__pycache__' in root:
            continue
        for name in names:
            if name.endswith(suffixes):
                with open(osp.join(root, name), 'rb') as f:
                    total += f.read().count(b'\n')
    return total


def plan_methods():
    """The methods defined in ``MultigridPlan``'s class body."""
    with open(osp.join(REPO_ROOT, 'mmext', 'multigrid', 'plan.py')) as f:
        tree = ast.parse(f.read())
    (plan, ) = [n for n in ast.walk(tree)
                if isinstance(n, ast.ClassDef) and n.name == 'MultigridPlan']
    return [n.name for n in plan.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_package_lines():
    lines = count_lines('mmext', ('.py', ))
    assert lines <= MMEXT_LINES, f'mmext/: {lines} lines, budget {MMEXT_LINES}'


def test_tools_lines():
    # As the issue counted them: the scripts and shell scripts of tools/.
    lines = count_lines('tools', ('.py', '.sh'))
    assert lines <= TOOLS_LINES, f'tools/: {lines} lines, budget {TOOLS_LINES}'


def test_plan_methods():
    methods = plan_methods()
    assert len(methods) <= PLAN_METHODS, (
        f'MultigridPlan: {len(methods)} methods, budget {PLAN_METHODS}: '
        f'{methods}')


if __name__ == '__main__':
    print(f"mmext {count_lines('mmext', ('.py', ))}/{MMEXT_LINES} lines, "
          f"tools {count_lines('tools', ('.py', '.sh'))}/{TOOLS_LINES}, "
          f'MultigridPlan {len(plan_methods())}/{PLAN_METHODS} methods')
