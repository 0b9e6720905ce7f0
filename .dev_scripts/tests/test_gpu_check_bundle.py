""".dev_scripts/gpu_check.sh --bundle: the mmcv ops build (a stand-in sdist whose
setup.py succeeds, fails or hangs) beside stand-in lines, its table row, the
lines it skips and why; the environment row's parts."""
import json
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
    monkeypatch.setattr(gpu_check, '_ensure_demo_data', lambda _: None)
    monkeypatch.setattr(gpu_check, 'environment', lambda: 'python 3.12.3')
    monkeypatch.setattr(gpu_check, 'import_report',
                        lambda modules, deadline=None: {m: '' for m in modules})
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(mmcv_ops, 'machine_stack', lambda mmcv: dict(
        STACK, mmcv=mmcv))
    monkeypatch.setattr(mmcv_ops, 'cuda_arch_list', lambda: '9.0')
    monkeypatch.delenv('OUT', raising=False)
    return tmp_path


STACK = dict(mmcv='2.1.0', python='3.12', torch='2.11.0+cu130', cuda='13.0',
             cudnn='91900', capability='9.0')


def _run(root, capsys, budget=300):
    code = gpu_check.main([
        '--bundle', str(root / 'bundle'), '--target', str(root / 'target'),
        '--work-dir', str(root / 'work'), '--budget', str(budget)
    ])
    header, *rows, end = capsys.readouterr().out.splitlines()
    assert header.split() == ['line', 'result', 's', 'detail']
    assert end.startswith('gpu_check: ')
    return code, {row.split()[0]: row for row in rows}


def _status(row):
    """The result column (it may hold spaces: 'skipped: ...')."""
    return row.split(None, 1)[1].split('  ')[0]


def test_ops_build_then_the_lines_that_need_it(bundle, capsys, monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'ok')
    code, rows = _run(bundle, capsys)
    assert code == 0
    # In the order they ended: 'plain' beside the build.
    assert list(rows) == ['environment', 'bundle-install', 'plain',
                          'mmcv-ops-build', 'with-ops']
    assert rows['environment'].endswith('python 3.12.3')
    assert rows['bundle-install'].endswith(
        f'reused {bundle / "target"} (installed by an earlier call)')
    ext = bundle / 'target' / 'mmcv' / '_ext.cpython-312-x86_64-linux-gnu.so'
    assert ext.read_text() == 'built'
    assert _status(rows['mmcv-ops-build']) == 'pass'
    assert rows['mmcv-ops-build'].endswith(
        f'built (no prebuilt ops in the bundle) with FORCE_CUDA=1 '
        f'TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS={os.cpu_count()}: {ext}')
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
        lambda modules, deadline=None: {
            'mmcv.ops': 'ImportError: undefined symbol: _Z3fooi'})
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


def test_line_order_beside_and_after_a_build():
    """While the ops build: the lines that need neither them nor an idle
    machine (the CUDA tests: AGVM's numerics on toy models); after it the
    op lines, then the timings, shortest limit first."""
    names = [line.name for line in gpu_check.LINES]
    assert [[line.name for line in part] for part in gpu_check.schedule(
        gpu_check.LINES, False)] == [names, []]
    beside, after = gpu_check.schedule(gpu_check.LINES, True)
    assert [line.name for line in beside] == ['cuda-tests', 'multigrid',
                                              'mg-accuracy-gpu']
    assert [line.name for line in after] == [
        'agvm-fp32', 'agvm-amp', 'agvm-2proc', 'agvm-overhead',
        'mg-speedup-gpu', 'mg-speedup-amp-cl-gpu', 'mg-project-gpu',
        'agvm-large-batch-gpu', 'agvm-large-batch-adamw-gpu',
        'mg-speedup-compile-gpu']
    assert all(line.timing for line in after[3:])


def test_stack_differences():
    assert mmcv_ops.stack_differences(STACK, dict(STACK)) == []
    assert mmcv_ops.stack_differences(
        dict(STACK, torch='2.12.0+cu130', file='x.so'),
        dict(STACK, capability='8.0')) == [
            'torch 2.12.0+cu130 (machine 2.11.0+cu130)',
            'capability 9.0 (machine 8.0)']


def _prebuilt(root, **stack):
    """Prebuilt ops in the bundle, for ``STACK`` changed by ``stack``."""
    so = root / '_ext.cpython-312-x86_64-linux-gnu.so'
    so.write_text('prebuilt')
    mmcv_ops.pack(str(so), dict(STACK, **stack), str(root / 'bundle' /
                                                      'prebuilt'))
    return root / 'target' / 'mmcv' / so.name


def test_prebuilt_ops_for_this_stack_are_installed_not_built(
        bundle, capsys, monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'fail')  # a build would fail
    ext = _prebuilt(bundle)
    code, rows = _run(bundle, capsys)
    assert code == 0
    assert list(rows) == ['environment', 'bundle-install', 'mmcv-ops-build',
                          'plain', 'with-ops']
    assert rows['mmcv-ops-build'].split(None, 3)[1:] == [
        'pass', '0.0', f'prebuilt for this stack, installed: {ext}']
    assert ext.read_text() == 'prebuilt'
    assert not osp.exists(bundle / 'work' / 'mmcv-ops')
    assert _status(rows['with-ops']) == 'pass'


def test_prebuilt_ops_for_another_stack_build_and_pack_to_out(
        bundle, capsys, monkeypatch):
    monkeypatch.setenv('FAKE_BUILD', 'ok')
    monkeypatch.setenv('OUT', str(bundle / 'out'))
    _prebuilt(bundle, torch='2.12.0+cu130')
    code, rows = _run(bundle, capsys)
    assert code == 0
    ext = bundle / 'target' / 'mmcv' / '_ext.cpython-312-x86_64-linux-gnu.so'
    assert ext.read_text() == 'built'
    archive = bundle / 'out' / 'mmcv-ops.tar.xz'
    assert (f'built (prebuilt ops for another torch 2.12.0+cu130 (machine '
            f'2.11.0+cu130)) with FORCE_CUDA=1') in rows['mmcv-ops-build']
    assert rows['mmcv-ops-build'].endswith(
        f'{ext}; packed into {archive} (0.0 MiB)')
    # What comes back from $OUT installs on the next machine of the stack.
    with open(bundle / 'out' / 'mmcv-ops.json') as f:
        meta = json.load(f)
    assert len(meta.pop('sha256')) == 64
    assert meta == dict(STACK, file=ext.name)
    ext.unlink()
    assert mmcv_ops.unpack(str(bundle / 'out'),
                           str(bundle / 'target')) == str(ext)
    assert ext.read_text() == 'built'


def test_bundle_imports_split_missing_ops_from_failures(monkeypatch):
    no_ext = "ModuleNotFoundError: No module named 'mmcv._ext'"
    report = {'mmcv.ops': no_ext, 'mmdet.models': no_ext, 'decord': '',
              'mmaction.models': "ImportError: cannot import name 'x'"}
    monkeypatch.setattr(gpu_check, 'import_report',
                        lambda modules, deadline=None: report)
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


def test_a_changed_prebuilt_archive_is_built_and_a_failed_pack_kept(
        bundle, capsys, monkeypatch):
    """An archive other than its json names is not installed; ops that
    cannot be packed into $OUT fail their row, not the lines."""
    monkeypatch.setenv('FAKE_BUILD', 'ok')
    _prebuilt(bundle)
    with open(bundle / 'bundle' / 'prebuilt' / 'mmcv-ops.tar.xz', 'ab') as f:
        f.write(b'x')
    (bundle / 'out').write_text('a file, not a folder')
    monkeypatch.setenv('OUT', str(bundle / 'out'))
    code, rows = _run(bundle, capsys)
    assert code == 1 and _status(rows['mmcv-ops-build']) == 'FAIL'
    for part in ('built (prebuilt ops unusable: ', 'sha256 differs from its '
                 'json', '; not packed into $OUT: '):
        assert part in rows['mmcv-ops-build']
    assert _status(rows['with-ops']) == 'pass'


def test_dry_run_says_how_the_ops_come(bundle, capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, 'check_bundle_imports', lambda: ([], ''))
    args = ['--bundle', str(bundle / 'bundle'), '--target',
            str(bundle / 'target'), '--dry-run']
    assert gpu_check.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3].split()[0] == 'plain' and 'after' not in out[-3]
    assert out[-2].endswith('(after an mmcv ops build)')
    assert out[-1].split(None, 1)[1].startswith(
        'build (no prebuilt ops in the bundle): FORCE_CUDA=1 ')
    _prebuilt(bundle)
    assert gpu_check.main(args) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        'mmcv-ops-build             prebuilt, for this stack')
