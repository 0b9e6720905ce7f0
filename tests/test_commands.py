"""Every command of the README and docs runs as written, from the project
root, in a clean environment: its script exists and takes its options (run
with ``--help`` appended, its cheapest form), a shell script parses, a make
target exists; no command names one machine's absolute path.

The children get no ``PYTHONPATH`` and none of pytest's ``pythonpath``
(setup.cfg), so a tool that imports a module only those provide fails here as
it fails for a user.
"""
import collections
import glob
import json
import os
import os.path as osp
import re
import shlex
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DOCS = (['README.md'] + sorted(
    osp.relpath(p, ROOT) for p in glob.glob(osp.join(ROOT, 'docs', 'en',
                                                     '*.md'))) +
        sorted(osp.relpath(p, ROOT)
               for p in glob.glob(osp.join(ROOT, 'configs', '*', 'README.md')))
        + ['.dev_scripts/README.md'])
_ASSIGNMENT = r'(?:[A-Z_][A-Z0-9_]*=\S+\s+)*'
# A whole command: what a reader pastes into a shell at the project root.
_COMMAND = re.compile(_ASSIGNMENT + r'(?:\.venv/bin/python\s|make\s|'
                      r'(?:tools|\.dev_scripts)/\S+\.sh\b)')
# Absolute paths a reader replaces (placeholders), not one machine's.
_PLACEHOLDERS = ('/path/to/', '/data')
# Runs each script once per argument list, as ``python SCRIPT ARGS --help``
# would: the script's folder first on sys.path (not the current folder).
_DRIVER = '''
import os.path as osp, runpy, sys, json
script, argvs = sys.argv[1], json.loads(sys.argv[2])
sys.path[0] = osp.dirname(osp.abspath(script))
failed = []
for argv in argvs:
    sys.argv = [script] + argv + ['--help']
    try:
        runpy.run_path(script, run_name='__main__')
        code = 0
    except SystemExit as exit:
        code = exit.code or 0
    if code:
        failed.append(' '.join(argv))
print(json.dumps(failed))
'''


def doc_commands(text):
    """The commands of a Markdown text: the lines of its ``bash`` blocks
    that start a command, and its inline code spans that are one.

    Args:
        text (str): The Markdown.

    Returns:
        list[str]: The commands, continuation lines joined, comments cut.
    """
    found = []
    for block in re.findall(r'^```(?:bash|sh|shell)\n(.*?)^```', text,
                            re.S | re.M):
        for line in re.sub(r'\\\n\s*', ' ', block).splitlines():
            line = line.strip().split(' #')[0].strip()
            if _COMMAND.match(line):
                found.append(line)
    prose = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
    found += [span.strip() for span in re.findall(r'`([^`\n]+)`', prose)
              if _COMMAND.match(span.strip())]
    return found


def all_commands():
    """``(doc, command)`` of every command of the docs."""
    out = []
    for doc in DOCS:
        with open(osp.join(ROOT, doc)) as f:
            out += [(doc, command) for command in doc_commands(f.read())]
    return out


def split(command):
    """The environment assignments and the arguments of a command, up to a
    synopsis' first optional part (``[--out IMAGE]``) or ellipsis.

    Args:
        command (str): A command of the docs.

    Returns:
        tuple[dict, list[str]]: The variables it sets and its words.
    """
    words = shlex.split(command)
    env = {}
    while words and re.match(r'[A-Z_][A-Z0-9_]*=', words[0]):
        name, value = words.pop(0).split('=', 1)
        env[name] = value
    end = next((i for i, w in enumerate(words)
                if w.startswith('[') or w == '...'), len(words))
    return env, words[:end]


def clean_env(extra=None):
    """The environment of a fresh shell: no ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(extra or {})
    return env


def test_commands_are_found():
    commands = [c for _, c in all_commands()]
    assert any(c.startswith('.venv/bin/python tools/train.py')
               and c.endswith('recognizer3d_r18_multigrid_demo-video.py')
               for c in commands)
    assert any('agvm_overhead.py' in c for c in commands)
    env, words = split('MMEXT_DATA_ROOT=../shared/data .venv/bin/python '
                       'tools/analysis/plot_agvm.py WORK_DIR [--out IMAGE]')
    assert env == {'MMEXT_DATA_ROOT': '../shared/data'}
    assert words == ['.venv/bin/python', 'tools/analysis/plot_agvm.py',
                     'WORK_DIR']


@pytest.mark.parametrize('doc', DOCS)
def test_commands_name_no_machine_path(doc):
    """A command names data through ``MMEXT_DATA_ROOT`` or a path relative
    to the project root (``../shared/data``), never one machine's folder."""
    absolute = [
        command for d, command in all_commands() if d == doc
        for word in shlex.split(command)
        for value in [word.split('=', 1)[-1]]
        if value.startswith('/') and not value.startswith(_PLACEHOLDERS)
    ]
    assert absolute == []


def test_python_commands_run_as_written():
    """Each script of a ``.venv/bin/python`` command takes the command's
    arguments (``--help`` appended), run from the project root without
    ``PYTHONPATH``, one process per script."""
    by_script = collections.defaultdict(list)
    modules = set()
    for doc, command in all_commands():
        env, words = split(command)
        if words[0] != '.venv/bin/python':
            continue
        if words[1] == '-m':
            modules.add(words[2])
            continue
        assert osp.isfile(osp.join(ROOT, words[1])), (doc, command)
        # --help stops before a script reads its config: check the paths.
        missing = [w for w in words[2:] if re.match(
            r'(configs|tools|docs|\.dev_scripts)/\S+\.\w+$', w)
            and not osp.exists(osp.join(ROOT, w))]
        assert missing == [], (doc, command)
        if words[2:] not in by_script[words[1]]:
            by_script[words[1]].append(words[2:])
    assert len(by_script) >= 8
    failed = {}
    for script, argvs in sorted(by_script.items()):
        proc = subprocess.run(
            [sys.executable, '-c', _DRIVER, script, json.dumps(argvs)],
            cwd=ROOT, env=clean_env(), capture_output=True, text=True,
            timeout=300)
        result = proc.stdout.strip().splitlines()
        if proc.returncode or not result or json.loads(result[-1]):
            failed[script] = (result[-1:] or ['']) + proc.stderr.splitlines(
            )[-3:]
    for module in sorted(modules):
        proc = subprocess.run([sys.executable, '-m', module, '--help'],
                              cwd=ROOT, env=clean_env(), capture_output=True,
                              text=True, timeout=300)
        if proc.returncode:
            failed[module] = proc.stderr.splitlines()[-3:]
    assert failed == {}


def test_shell_and_make_commands_run_as_written():
    """A shell script of the docs is executable and parses (``bash -n``);
    a make target exists (``make -n``)."""
    failed = []
    for doc, command in all_commands():
        env, words = split(command)
        if words[0] == 'make':
            proc = subprocess.run(['make', '-n'] + words[1:], cwd=ROOT,
                                  env=clean_env(env), capture_output=True,
                                  text=True)
        elif words[0].endswith('.sh'):
            if not os.access(osp.join(ROOT, words[0]), os.X_OK):
                failed.append((doc, command, 'not executable'))
                continue
            proc = subprocess.run(['bash', '-n', words[0]], cwd=ROOT,
                                  capture_output=True, text=True)
        else:
            continue
        if proc.returncode:
            failed.append((doc, command, proc.stderr.strip()[-200:]))
    assert failed == []
