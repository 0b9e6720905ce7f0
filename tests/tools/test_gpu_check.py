"""tools/gpu_check.sh: the dry run, the checks of each line, the table."""
import json
import os
import sys

import pytest
import torch
from helpers import run_tool

from tools import gpu_check


def test_without_cuda_one_line_and_exit_0_after_the_dry_run():
    args = ['bash', 'tools/gpu_check.sh']
    if torch.cuda.is_available():
        args.append('--dry-run')
    proc = run_tool(args, timeout=300)
    lines = proc.stdout.strip().splitlines()
    if torch.cuda.is_available():
        assert lines[0].startswith('gpu_check: dry run OK')
        assert [line.split()[0] for line in lines[1:]] == [
            line.name for line in gpu_check.LINES]
    else:
        assert lines == [
            'gpu_check: no CUDA device visible to torch, nothing to run '
            '(dry run OK: 9 lines, configs parse).'
        ]


@pytest.mark.parametrize('args,message', [
    (['--budget', '0'], '--budget must be positive'),
    (['--lines', 'nope'], "invalid choice: 'nope'"),
])
def test_bad_arguments_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_dry_run_reports_missing_and_broken_configs(monkeypatch, tmp_path):
    assert gpu_check.dry_run(gpu_check.LINES) == []
    broken = tmp_path / 'broken.py'
    broken.write_text('model = dict(\n')
    monkeypatch.setattr(gpu_check, 'AGVM_CONFIG', 'configs/nope.py')
    monkeypatch.setattr(gpu_check, 'MULTIGRID_CONFIG', str(broken))
    problems = gpu_check.dry_run(gpu_check.LINES)
    assert problems[0] == 'missing config configs/nope.py'
    assert problems[1].startswith(f'{broken} does not parse')
    assert len(problems) == 2
    # main stops there, before looking for CUDA.
    assert gpu_check.main([]) == 2


def _write_scalars(work_dir, records):
    path = work_dir / '20250101_000000' / 'vis_data'
    path.mkdir(parents=True)
    (path / 'scalars.json').write_text(
        '\n'.join(json.dumps(r) for r in records))


def test_agvm_scalars_check(tmp_path):
    # What the wrapper logs: factors applied per iteration (message hub)
    # and each re-estimate at its own iteration (visualizer).
    estimate = {'agvm_d/backbone': 0.3, 'agvm_d/neck': 0.1,
                'agvm_s/backbone': 1.0, 'agvm_s/neck': 1.2, 'step': 2}
    good = [
        {'loss': 2.0, 'agvm_mu/backbone': 1.0, 'agvm_mu/neck': 1.0},
        estimate,
        {'loss': 1.5, 'agvm_mu/backbone': 1.0, 'agvm_mu/neck': 1.2},
    ]
    _write_scalars(tmp_path / 'good', good)
    assert gpu_check.check_agvm_scalars('', str(tmp_path / 'good')) == (
        '1 re-estimates, factors backbone 1.0000, neck 1.2000')
    cases = {
        'nan': ([estimate, dict(good[2], **{'agvm_mu/neck': float('nan')})],
                'non-finite'),
        'nan_d': ([dict(estimate, **{'agvm_d/neck': float('inf')}), good[2]],
                  'non-finite'),
        'never': (good[::2], 'never re-estimated'),
        'one': ([estimate, good[0]], 'never moved'),
        'none': ([{'loss': 1.0}], 'no agvm_mu'),
    }
    for name, (records, message) in cases.items():
        _write_scalars(tmp_path / name, records)
        with pytest.raises(gpu_check.CheckFailed, match=message):
            gpu_check.check_agvm_scalars('', str(tmp_path / name))


def test_ranks_check(tmp_path):
    rank = dict(rank=0, backend='gloo', device='cuda:0', factors=[1.0, 1.1],
                num_updates=4, hooked=True, param_sum=3.25)
    other = dict(rank, rank=1)
    (tmp_path / 'ranks.json').write_text(json.dumps([rank, other]))
    assert gpu_check.check_ranks('', str(tmp_path)) == (
        '2 ranks, gloo, device cuda:0: identical factors [1.0, 1.1]')
    other['factors'] = [1.0, 1.1000001]
    (tmp_path / 'ranks.json').write_text(json.dumps([rank, other]))
    with pytest.raises(gpu_check.CheckFailed, match='factors differ'):
        gpu_check.check_ranks('', str(tmp_path))


def test_multigrid_check(tmp_path):
    output = '\n'.join([
        'Multigrid: epoch 0: batches [32, 16], T=8, crops [28, 40], 3 iters',
        'Multigrid: precise BN over 4 batches at epoch 1',
        'Multigrid: epoch 2: batches [16, 8], T=16, crops [28, 56], 6 iters',
    ])
    _write_scalars(tmp_path, [{'loss': 1.4}, {'loss': 1.25}])
    (tmp_path / 'epoch_2.pth').write_text('')
    assert gpu_check.check_multigrid(output, str(tmp_path)) == (
        '2 shapes, precise BN x1, 2 iterations, last loss 1.250')
    with pytest.raises(gpu_check.CheckFailed, match='shape change'):
        gpu_check.check_multigrid(output.splitlines()[0], str(tmp_path))


def _script(tmp_path, flags):
    """A benchmark stand-in whose --help lists ``flags``."""
    path = tmp_path / 'bench.py'
    adds = ''.join(f'p.add_argument({flag!r})\n' for flag in flags)
    path.write_text('import argparse\np = argparse.ArgumentParser()\n'
                    f'{adds}p.parse_args()\n')
    return str(path)


def test_optional_benchmarks_run_only_when_supported(tmp_path):
    script = _script(tmp_path, ['--device', '--epochs', '--work-dir'])
    command = gpu_check._optional_benchmark(
        script, ['--device', 'cuda'], [['--epochs', '1'], ['--seeds', '0']])
    assert command('WD')[1:] == [script, '--device', 'cuda', '--epochs', '1',
                                 '--work-dir', 'WD']
    unsupported = gpu_check._optional_benchmark(
        script, ['--synthetic', '--device', 'cuda'], [])
    line = gpu_check.Line('speedup', '', unsupported,
                          gpu_check.check_last_line, 60)
    status, _, detail = gpu_check.run_line(line, str(tmp_path), 1e12)
    assert (status, detail) == ('skipped: not supported', '')


def _line(name, code, timeout=60):
    return gpu_check.Line(name, name, lambda _: [sys.executable, '-c', code],
                          gpu_check.check_table, timeout)


def test_table_and_exit_code(monkeypatch, capsys, tmp_path):
    lines = [
        _line('good', 'print("1 process   0.10  0.11  1.010")'),
        _line('bad', 'import sys; print("boom"); sys.exit(3)'),
        _line('slow', 'import time; time.sleep(30)', timeout=1),
    ]
    monkeypatch.setattr(gpu_check, 'LINES', lines)
    monkeypatch.setattr(gpu_check, 'dry_run', lambda lines: [])
    monkeypatch.setattr(gpu_check, '_ensure_demo_data', lambda: None)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    assert gpu_check.main(['--work-dir', str(tmp_path)]) == 1
    header, environment, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ['line', 'result', 's', 'detail']
    assert environment.split()[:2] == ['environment', 'info']
    assert f'torch {torch.__version__}, CUDA {torch.version.cuda}' in (
        environment)
    assert rows[0].split()[:2] == ['good', 'pass']
    assert rows[0].endswith('1 process 0.10 0.11 1.010')
    assert rows[1].split()[:2] == ['bad', 'FAIL']
    assert 'exit 3: boom' in rows[1]
    assert rows[2].split()[:2] == ['slow', 'FAIL']
    assert 'timed out after 1 s' in rows[2]
    assert os.path.exists(tmp_path / 'bad.log')
    with pytest.raises(gpu_check.CheckFailed, match='no result row'):
        gpu_check.check_table('setting  plain s/step\n', str(tmp_path))
    # Only the passing line: exit 0.
    monkeypatch.setattr(gpu_check, 'LINES', lines[:1])
    assert gpu_check.main(['--work-dir', str(tmp_path)]) == 0
    # A budget used up before a line starts fails that line.
    monkeypatch.setattr(gpu_check, 'LINES', lines)
    status, _, detail = gpu_check.run_line(lines[0], str(tmp_path), 0)
    assert status == 'FAIL' and 'budget' in detail
