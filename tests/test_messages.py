"""Messages in mmengine's register: short, the why in the docs.

Counts the literal characters of every message the package raises or
warns (the string constants of the exception's or warning's arguments,
with the f-string parts and the assignments of a variable passed as the
message in the same function), and of the string literals tests compare
with messages. ``python tests/test_messages.py`` prints the figures.
"""
import ast
import os
import os.path as osp
import statistics
import sys

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
# mmengine's raises average ~58 literal characters.
MEAN_LIMIT, MAX_LIMIT, TEST_LITERAL_LIMIT = 70, 200, 60
WARN_CALLS = {'warn', 'warning'}


def _python_files(folder):
    for root, _, names in os.walk(osp.join(REPO_ROOT, folder)):
        if '.mim' in root or '__pycache__' in root:
            continue
        yield from (osp.join(root, n) for n in sorted(names)
                    if n.endswith('.py'))


def _literal_chars(node):
    return sum(len(n.value) for n in ast.walk(node)
               if isinstance(n, ast.Constant) and isinstance(n.value, str))


def _assignments(function):
    """Name -> the values assigned to it in ``function``."""
    out = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = getattr(node, 'targets', None) or [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and node.value is not None:
                    out.setdefault(target.id, []).append(node.value)
    return out


def _message_args(call):
    """The message argument of a raise's exception or a warning call."""
    if not isinstance(call, ast.Call) or not call.args:
        return None
    return call.args[0]


def _is_warning(call):
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(
        func, 'id', None)
    return name in WARN_CALLS


def package_messages():
    """``[(path:line, literal characters)]`` of every raise and warning in
    mmext/."""
    found = []
    for path in _python_files('mmext'):
        with open(path) as f:
            tree = ast.parse(f.read())
        scopes = [n for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        builders = {s.name: s for s in scopes}
        owner = {}
        for scope in scopes:
            for node in ast.walk(scope):
                owner.setdefault(id(node), scope)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise):
                arg = _message_args(node.exc)
            elif isinstance(node, ast.Call) and _is_warning(node):
                arg = _message_args(node)
            else:
                continue
            if arg is None:
                continue
            chars = _literal_chars(arg)
            scope = owner.get(id(node))
            if scope is not None:
                assigned = _assignments(scope)
                for name in {n.id for n in ast.walk(arg)
                             if isinstance(n, ast.Name)}:
                    chars += sum(_literal_chars(v)
                                 for v in assigned.get(name, []))
            # A message built by a function of the module counts its
            # returned literals.
            for call in ast.walk(arg):
                if isinstance(call, ast.Call):
                    name = getattr(call.func, 'attr', None) or getattr(
                        call.func, 'id', None)
                    if name in builders:
                        chars += sum(_literal_chars(r.value)
                                     for r in ast.walk(builders[name])
                                     if isinstance(r, ast.Return)
                                     and r.value is not None)
            if chars:
                where = f'{osp.relpath(path, REPO_ROOT)}:{node.lineno}'
                found.append((where, chars))
    return found


def _compared_literals(node):
    """String literals a test matches messages against."""
    if isinstance(node, ast.keyword) and node.arg == 'match':
        yield node.value
    elif isinstance(node, ast.Compare):
        yield node.left
        yield from node.comparators
    elif isinstance(node, ast.Call) and isinstance(
            node.func, ast.Attribute) and node.func.attr in (
                'startswith', 'endswith'):
        yield from node.args


def _literal_lengths(node):
    """Characters of each whole string literal in ``node``: its string
    constants, f-string parts and their ``+`` concatenations summed (adjacent
    pieces are one node already)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield len(node.value)
    elif isinstance(node, ast.JoinedStr):
        yield sum(len(v.value) for v in node.values
                  if isinstance(v, ast.Constant))
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        pieces, stack = [], [node]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
                stack += [n.left, n.right]
            else:
                pieces.append(n)
        strings = [p for p in pieces if isinstance(p, ast.JoinedStr) or (
            isinstance(p, ast.Constant) and isinstance(p.value, str))]
        if strings:
            yield sum(sum(_literal_lengths(p)) for p in strings)
        for piece in pieces:
            if piece not in strings:
                yield from _literal_lengths(piece)
    else:
        for child in ast.iter_child_nodes(node):
            yield from _literal_lengths(child)


def long_test_literals():
    """``[(path:line, characters)]`` of compared literals of 60 or more
    characters in the tests, each counted whole."""
    found = []
    for path in _python_files('tests'):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            for value in _compared_literals(node):
                found += [(f'{osp.relpath(path, REPO_ROOT)}:{value.lineno}',
                           n) for n in _literal_lengths(value)
                          if n >= TEST_LITERAL_LIMIT]
    return found


def test_package_messages_are_short():
    messages = package_messages()
    assert messages, 'the scan found no message'
    mean = statistics.fmean(c for _, c in messages)
    assert mean <= MEAN_LIMIT, f'mean {mean:.1f} characters'
    assert [m for m in messages if m[1] > MAX_LIMIT] == []


def test_tests_match_a_fragment_not_a_whole_message():
    found = long_test_literals()
    assert not found, (f'{len(found)} compared literals of '
                       f'{TEST_LITERAL_LIMIT}+ characters (budget 0): {found}')


if __name__ == '__main__':
    messages = package_messages()
    chars = [c for _, c in messages]
    print(f'{len(chars)} messages: mean {statistics.fmean(chars):.1f}, '
          f'median {statistics.median(chars):.0f}, max {max(chars)}, '
          f'over {MAX_LIMIT}: {sum(c > MAX_LIMIT for c in chars)}')
    for where, c in sorted(messages, key=lambda m: -m[1])[:int(
            sys.argv[1]) if len(sys.argv) > 1 else 10]:
        print(f'  {c:4d}  {where}')
    literals = long_test_literals()
    print(f'{len(literals)} test literals of {TEST_LITERAL_LIMIT}+ '
          f'characters compared with messages')
