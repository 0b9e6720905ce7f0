""".dev_scripts/gpu_check.sh --bundle: the mmcv ops build (a stand-in sdist whose
setup.py succeeds, fails or hangs) beside stand-in lines, its table row, the
lines it skips and why; the environment row's parts."""
import os
import os.path as osp
import sys
import tarfile
import time

import pytest
import torch
from helpers import run_tool

import gpu_check
import mmcv_ops

SETUP = '''\
import os, sys, time
mode = os.environ['FAKE_BUILD']
print('running build_ext')
if mode == 'fail':
    print('mmcv/ops/csrc/pytorch/cuda/nms_cuda.cu(12): error: identifier '
          '"THCCeilDiv" is undefined')
    print('RuntimeError: Error compiling objects for extension')
    sys.exit(1)
if mode == 'slow':
    time.sleep(120)
with open(os.path.join('mmcv', '_ext.cpython-312-x86_64-linux-gnu.so'),
          'w') as f:
    f.write('built')
'''


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    """A bundle with a stand-in mmcv sdist, installed into ``target``;
    the checks' other parts replaced by stand-ins."""
    source = tmp_path / 'src' / 'mmcv-2.1.0'
    (source / 'mmcv').mkdir(parents=True)
    (source / 'setup.py').write_text(SETUP)
    (source / 'mmcv' / '__init__.py').write_text('')
    (tmp_path / 'bundle' / 'sdist').mkdir(parents=True)
    with tarfile.open(tmp_path / 'bundle' / 'sdist' / 'mmcv-2.1.0.tar.gz',
                      'w:gz') as tar:
        tar.add(source, arcname='mmcv-2.1.0')
    (tmp_path / 'bundle' / 'manifest.json').write_text(
        '{"mmcv_sdist": "sdist/mmcv-2.1.0.tar.gz", "files": '
        '[{"path": "wheels/a.whl"}, {"path": "sdist/mmcv-2.1.0.tar.gz"}]}')
    (tmp_path / 'target' / 'mmcv').mkdir(parents=True)
    (tmp_path / 'target' / '.bundle-manifest.json').write_text('{}')
    lines = [
        gpu_check.Line('plain', 'plain', lambda _: [
            sys.executable, '-c', 'print("1 process 0.1 0.1 1.0")'
        ], gpu_check.check_last_line, 60),
        gpu_check.Line('with-ops', 'with-ops', lambda _: [
            sys.executable, '-c', 'print("2 procs 0.2 0.2 1.0")'
        ], gpu_check.check_last_line, 60, needs_ops=True),
    ]
    monkeypatch.setattr(gpu_check, 'LINES', lines)
    monkeypatch.setattr(gpu_check, 'dry_run', lambda lines: [])
    monkeypatch.setattr(gpu_check, '_ensure_demo_data', lambda: None)
    monkeypatch.setattr(gpu_check, 'environment', lambda: 'python 3.12.3')
    monkeypatch.setattr(gpu_check, 'import_report',
                        lambda modules: {name: '' for name in modules})
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(mmcv_ops, 'cuda_arch_list', lambda: '9.0')
    return tmp_path


def _run(root, capsys, budget=300):
    code = gpu_check.main([
        '--bundle', str(root / 'bundle'), '--target', str(root / 'target'),
        '--work-dir', str(root / 'work'), '--budget', str(budget)
    ])
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ['line', 'result', 's', 'detail']
    return code, {row.split()[0]: row for row in rows}


def _status(row):
    """The result column (it may hold spaces: 'skipped: ...')."""
    return row.split(None, 1)[1].split('  ')[0]


def test_ops_build_then_the_lines_that_need_it(bundle, capsys, monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'ok')
    code, rows = _run(bundle, capsys)
    assert code == 0
    assert list(rows) == ['environment', 'bundle-install', 'mmcv-ops-build',
                          'plain', 'with-ops']
    assert rows['environment'].endswith('python 3.12.3')
    assert rows['bundle-install'].endswith(
        f'reused {bundle / "target"} (installed by an earlier call)')
    ext = bundle / 'target' / 'mmcv' / '_ext.cpython-312-x86_64-linux-gnu.so'
    assert ext.read_text() == 'built'
    assert _status(rows['mmcv-ops-build']) == 'pass'
    assert rows['mmcv-ops-build'].endswith(
        f'FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS={os.cpu_count()}: '
        f'{ext}')
    assert _status(rows['plain']) == _status(rows['with-ops']) == 'pass'
    assert rows['with-ops'].endswith('2 procs 0.2 0.2 1.0')
    # A second call on the machine reuses the built ops.
    code, rows = _run(bundle, capsys)
    assert code == 0
    assert rows['mmcv-ops-build'].split()[1:] == ['pass', '0.0', 'reused',
                                                  str(ext)]


def test_failed_build_skips_the_lines_that_need_it(bundle, capsys,
                                                   monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'fail')
    code, rows = _run(bundle, capsys)
    assert code == 1
    reason = ('build failed: mmcv/ops/csrc/pytorch/cuda/nms_cuda.cu(12): '
              'error: identifier "THCCeilDiv" is undefined')
    log = bundle / 'work' / 'mmcv-ops' / 'build.log'
    assert _status(rows['mmcv-ops-build']) == 'FAIL'
    assert rows['mmcv-ops-build'].endswith(f'{reason} (log {log})')
    assert _status(rows['plain']) == 'pass'
    assert _status(rows['with-ops']) == 'skipped: needs mmcv CUDA ops'
    assert rows['with-ops'].endswith(f'0.0  {reason}')


def test_build_stopped_when_the_lines_need_the_rest_of_the_budget(
        bundle, capsys, monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'slow')
    monkeypatch.setattr(gpu_check, 'OPS_RESERVE', 55)
    start = time.monotonic()
    code, rows = _run(bundle, capsys, budget=60)
    assert time.monotonic() - start < 30  # not the build's 120 s
    assert code == 1
    assert _status(rows['mmcv-ops-build']) == 'FAIL'
    assert 'build not finished after ' in rows['mmcv-ops-build']
    assert "stopped, 55 s before the budget's end" in rows['mmcv-ops-build']
    assert _status(rows['with-ops']) == 'skipped: needs mmcv CUDA ops'
    assert 'build not finished after ' in rows['with-ops']
    assert _status(rows['plain']) == 'pass'


def test_built_ops_that_do_not_load_skip_the_lines(bundle, capsys,
                                                   monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'ok')
    monkeypatch.setattr(
        gpu_check, 'import_report',
        lambda modules: {'mmcv.ops': 'ImportError: undefined symbol: _Z3fooi'})
    code, rows = _run(bundle, capsys)
    assert code == 1
    why = 'the built ops do not load: ImportError: undefined symbol: _Z3fooi'
    assert rows['mmcv-ops-build'].endswith(why)
    assert rows['with-ops'].endswith(why)


def test_no_build_without_a_line_that_needs_it(bundle, capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, 'LINES', gpu_check.LINES[:1])
    code, rows = _run(bundle, capsys)
    assert code == 0
    assert list(rows) == ['environment', 'bundle-install', 'plain']
    assert not osp.exists(bundle / 'work' / 'mmcv-ops')


def test_lines_that_need_compiled_ops():
    assert [line.name for line in gpu_check.LINES if not line.needs_ops] == [
        'multigrid', 'mg-speedup-gpu', 'mg-speedup-amp-cl-gpu',
        'mg-speedup-compile-gpu', 'mg-project-gpu', 'mg-accuracy-gpu'
    ]


def test_bundle_imports_split_missing_ops_from_failures(monkeypatch):
    no_ext = "ModuleNotFoundError: No module named 'mmcv._ext'"
    report = {'mmcv.ops': no_ext, 'mmdet.models': no_ext, 'decord': '',
              'mmaction.models': "ImportError: cannot import name 'x'"}
    monkeypatch.setattr(gpu_check, 'import_report', lambda modules: report)
    problems, summary = gpu_check.check_bundle_imports()
    assert problems == ["import mmaction.models: ImportError: cannot import "
                        "name 'x'"]
    assert summary == ("2 of the 4 modules the check imports load, 2 wait "
                       "for mmcv's compiled ops: mmcv.ops, mmdet.models")


def test_import_report_in_a_fresh_interpreter():
    assert gpu_check.import_report(['json', 'no_such_module_here']) == {
        'json': '',
        'no_such_module_here': "ModuleNotFoundError: No module named "
                               "'no_such_module_here'"
    }


@pytest.mark.parametrize('version,text', [(91900, '9.19.0'),
                                          (8906, '8.9.6'), (None, 'none')])
def test_cudnn_version(version, text):
    assert gpu_check._cudnn_version(version) == text


def test_failure_reason_is_the_first_error():
    log = '\n'.join([
        'creating build/temp', 'c++ -c a.cpp ' + '-Ipath/error ' * 200,
        'a.cpp:3:1: warning: unused', 'b.cu(7): error: expected a ";"',
        'RuntimeError: Error compiling objects for extension'
    ])
    assert mmcv_ops.failure_reason(log) == 'b.cu(7): error: expected a ";"'
    assert mmcv_ops.failure_reason('running\nKilled\n') == 'Killed'


def test_gpu_check_help_names_the_one_command():
    out = run_tool(['bash', '.dev_scripts/gpu_check.sh', '--help']).stdout
    assert out.startswith('Usage: .dev_scripts/gpu_check.sh [--bundle DIR')
    assert '    .dev_scripts/gpu_check.sh --bundle .gpu_bundle\n' in out
    assert 'usage: gpu_check.py' in out  # then the options
    assert '--budget BUDGET' in out
