"""Messages in mmengine's register: short, the why in the docs.

Counts the literal characters of every message the package raises or
warns (the string constants of the exception's or warning's arguments,
with the f-string parts and the assignments of a variable passed as the
message in the same function); each message a helper function builds for
a warning elsewhere (returned, or in the list it returns) counts as one,
with the warning call's own text; and the string literals tests compare
with messages. ``python tests/test_messages.py`` prints the figures.
"""
import ast
import collections
import os
import os.path as osp
import statistics
import sys

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
# mmengine's raises average ~58 literal characters.
MEAN_LIMIT, MAX_LIMIT, TEST_LITERAL_LIMIT = 70, 200, 60
WARN_CALLS = {'warn', 'warning'}
# Helper functions that build warnings for a warning call elsewhere, and
# how many messages each builds (DataWaitWatch.record's INFO line is a log
# line, not one of them).
HELPERS = {
    'dropped_base_hooks': 1, 'unused_scheduler_values': 3,
    'recipe_scheduler_warnings': 3, '_dropped_shapes': 1,
    '_short_cycle_warning': 1, '_few_steps': 1, '_unused_clips': 1,
    '_small_feature_maps': 1, 'unused_values': 4, 'inside_warmup': 1,
    'ema_interval_messages': 1, 'record': 1, 'stop': 2}
# Levels of a (level, text) pair that is a log line, not a warning.
LOG_LEVELS = {'DEBUG', 'INFO'}


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


def _call_name(call):
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(
        func, 'id', None)


def _is_warning(call):
    return _call_name(call) in WARN_CALLS


def _add_pieces(node):
    """The operands of a chain of ``+``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _add_pieces(node.left) + _add_pieces(node.right)
    return [node]


def _is_text(node):
    """Whether ``node`` builds a string: a literal, an f-string or a ``+``
    of them."""
    return any(
        isinstance(p, ast.JoinedStr) or (
            isinstance(p, ast.Constant) and isinstance(p.value, str))
        for p in _add_pieces(node))


def _is_log_line(node):
    """A ``(logging.INFO, text)`` pair: a log line, not a warning."""
    return (isinstance(node, ast.Tuple) and len(node.elts) == 2
            and isinstance(node.elts[0], ast.Attribute)
            and getattr(node.elts[0].value, 'id', None) == 'logging'
            and node.elts[0].attr in LOG_LEVELS)


def _bindings(function):
    """Name -> the values that bind it or feed it in ``function``: its
    assignments, ``name.append(x)``/``extend(x)`` and the iterable of a
    ``for`` or comprehension over it."""
    out = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets, value = (getattr(node, 'targets', None)
                              or [node.target]), node.value
        elif isinstance(node, (ast.For, ast.comprehension)):
            targets, value = [node.target], node.iter
        elif (isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute)
              and node.func.attr in ('append', 'extend') and node.args):
            targets, value = [node.func.value], node.args[0]
        else:
            continue
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and value is not None:
                    out.setdefault(name.id, []).append(value)
    return out


class _Package:
    """The functions of mmext/ and the messages their code builds."""

    def __init__(self):
        self.trees, self.path_of, self.functions = {}, {}, {}
        for path in _python_files('mmext'):
            with open(path) as f:
                tree = ast.parse(f.read())
            self.trees[path] = tree
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.path_of[node] = path
                    self.functions.setdefault(node.name, []).append(node)
        self._cache = {}

    def _of(self, read, function):
        if (read, function) not in self._cache:
            self._cache[read, function] = read(function)
        return self._cache[read, function]

    def bindings(self, function):
        return self._of(_bindings, function)

    def chars(self, node, function):
        """Literal characters of the message ``node`` built in
        ``function`` (None: module level): its own, those assigned to a
        name it formats, those a function of its module returns into it."""
        chars = _literal_chars(node)
        if function is None:
            return chars
        assigned = self._of(_assignments, function)
        for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
            chars += sum(_literal_chars(v) for v in assigned.get(name, []))
        path = self.path_of[function]
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            for builder in self.functions.get(_call_name(call), []):
                if self.path_of[builder] == path:
                    chars += sum(_literal_chars(r.value)
                                 for r in ast.walk(builder)
                                 if isinstance(r, ast.Return)
                                 and r.value is not None)
        return chars

    def carried(self, node, function, seen):
        """``(message node, its function)`` of each message that ``node``
        carries: itself if it builds a string, else what the names and the
        calls of the package it passes on build (a list, a comprehension,
        a conditional, a ``+`` of lists)."""
        if _is_text(node):
            yield node, function
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            if not _is_log_line(node):
                for element in node.elts:
                    yield from self.carried(element, function, seen)
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            yield from self.carried(node.elt, function, seen)
        elif isinstance(node, ast.IfExp):
            yield from self.carried(node.body, function, seen)
            yield from self.carried(node.orelse, function, seen)
        elif isinstance(node, ast.BinOp):
            yield from self.carried(node.left, function, seen)
            yield from self.carried(node.right, function, seen)
        elif isinstance(node, ast.Name) and function is not None:
            if (function, node.id) not in seen:
                seen.add((function, node.id))
                for value in self.bindings(function).get(node.id, []):
                    yield from self.carried(value, function, seen)
        elif isinstance(node, ast.Call):
            for builder in self.functions.get(_call_name(node), []):
                if builder not in seen:
                    seen.add(builder)
                    for out in ast.walk(builder):
                        if isinstance(out, (ast.Return, ast.Yield)) and (
                                out.value is not None):
                            yield from self.carried(out.value, builder, seen)

    def messages(self):
        """``{path:line: characters}`` of every raise and warning of
        mmext/, and ``{path:line: function}`` of those a helper function
        builds."""
        found, built = {}, {}
        for path, tree in self.trees.items():
            owner = {}
            for function in self.path_of:
                if self.path_of[function] == path:
                    for node in ast.walk(function):
                        owner.setdefault(node, function)
            for node in ast.walk(tree):
                if isinstance(node, ast.Raise):
                    arg = _message_args(node.exc)
                elif isinstance(node, ast.Call) and _is_warning(node):
                    arg = _message_args(node)
                else:
                    continue
                if arg is None:
                    continue
                site = owner.get(node)
                pieces = _add_pieces(arg)
                # A warning passes on what a helper function built: each of
                # its messages counts, with the site's own text.
                carriers = [p for p in pieces if isinstance(
                    p, (ast.Name, ast.Call))] if isinstance(
                        node, ast.Call) else []
                messages = {m for p in carriers
                            for m in self.carried(p, site, set())}
                prefix = sum(_literal_chars(p) for p in pieces
                             if p not in carriers)
                for message, function in messages:
                    where = self._where(message, function)
                    found[where] = max(found.get(where, 0), prefix
                                       + self.chars(message, function))
                    if function is not site:
                        built[where] = function.name
                if not messages:
                    chars = self.chars(arg, site)
                    if chars:
                        found[self._where(node, site, path)] = chars
        return found, built

    def _where(self, node, function, path=None):
        path = path or self.path_of[function]
        return f'{osp.relpath(path, REPO_ROOT)}:{node.lineno}'


def package_messages():
    """``[(path:line, literal characters)]`` of every raise and warning in
    mmext/ and of every warning a helper function builds."""
    return sorted(_Package().messages()[0].items())


def built_warnings():
    """``{path:line: (helper function, literal characters)}`` of the
    warnings that helper functions build (a list of messages, a message
    returned) for a warning call elsewhere."""
    found, built = _Package().messages()
    return {where: (name, found[where]) for where, name in built.items()}


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


def test_warnings_built_by_helper_functions_are_counted():
    """Each message a helper builds for a warning elsewhere counts on its
    own (its literals, those of the names it formats); the watch's log line
    at INFO is no warning."""
    built = built_warnings()
    per_helper = collections.Counter(name for name, _ in built.values())
    assert {name: per_helper[name] for name in HELPERS} == HELPERS
    assert len(built) >= sum(HELPERS.values()) == 21
    [few_steps] = [c for name, c in built.values() if name == '_few_steps']
    # Its f-string's 115 literal characters (with a format spec's 3) and
    # the 19 of the 'short_cycle=False, ' a helper of its module adds.
    assert few_steps == 115 + 19


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
