""".dev_scripts/gpu_check.sh: the dry run, the checks of each line, the table."""
import json
import os
import re
import sys
import time

import pytest
import torch
from helpers import run_tool

import gpu_check


def test_without_cuda_one_line_and_exit_0_after_the_dry_run():
    args = ['bash', '.dev_scripts/gpu_check.sh']
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
            '(dry run OK: 13 lines, configs parse).'
        ]


@pytest.mark.parametrize('args,message', [
    (['--budget', '0'], '--budget must be positive'),
    (['--lines', 'nope'], "invalid choice: 'nope'"),
    (['--bundle', 'b'], '--bundle and --target go together'),
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
    """Read from the hook's scalars: two shapes, one precise BN pass."""
    from mmext.multigrid import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN,
                                 SCALAR_CROP_SIZE, SCALAR_PRECISE_BN)
    first = {SCALAR_BATCH_SIZE: 16, SCALAR_CLIP_LEN: 8, SCALAR_CROP_SIZE: 40,
             'step': 0}
    second = {SCALAR_BATCH_SIZE: 4, SCALAR_CLIP_LEN: 16,
              SCALAR_CROP_SIZE: 56, 'step': 9}
    records = [first, {'loss': 1.4}, {SCALAR_PRECISE_BN: 4, 'step': 9},
               second, {'loss': 1.25}]
    _write_scalars(tmp_path, records)
    (tmp_path / 'epoch_2.pth').write_text('')
    assert gpu_check.check_multigrid('', str(tmp_path)) == (
        '2 shapes, precise BN x1, 2 iterations, last loss 1.250')
    _write_scalars(tmp_path / 'one', records[:3])
    with pytest.raises(gpu_check.CheckFailed, match='shape change'):
        gpu_check.check_multigrid('', str(tmp_path / 'one'))


def test_benchmark_lines_pass_their_arguments_and_work_dir():
    line = {line.name: line for line in gpu_check.LINES}['mg-project-gpu']
    assert line.command('WD')[1:] == [
        'tools/benchmark/multigrid_speedup.py', '--project', '--device',
        'cuda', '--config', gpu_check.SLOWFAST_CONFIG, '--samples-per-rank',
        '30055', '--amp', 'bfloat16', '--channels-last', '--work-dir', 'WD']


def _line(name, code, timeout=60, check=gpu_check.check_overhead):
    return gpu_check.Line(name, name, lambda _: [sys.executable, '-c', code],
                          check, timeout)


OVERHEAD_JSON = json.dumps(dict(settings=[
    dict(setting='1 process, 2 accum.', ratio=1.0412, share=0.0305),
    dict(setting='4 proc gloo hook', ratio=0.9911, share=0.0252)]))
# mmaction2's import-time warning, on stderr after the tool's result line.
WARNING = ("SyntaxWarning: invalid escape sequence '\\.'\n  periodStrip = "
           "re.compile('(?!<=\\d)(\\.)(?!\\d)')  # noqa: W605")


def _main(monkeypatch, tmp_path, lines, *args):
    monkeypatch.setattr(gpu_check, 'LINES', lines)
    monkeypatch.setattr(gpu_check, 'dry_run', lambda lines: [])
    monkeypatch.setattr(gpu_check, '_ensure_demo_data', lambda _: None)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    return gpu_check.main(['--work-dir', str(tmp_path), *args])


def test_table_and_exit_code(monkeypatch, capsys, tmp_path):
    lines = [
        _line('good', f'print("figures"); print({OVERHEAD_JSON!r})'),
        _line('bad', 'import sys; print("boom"); sys.exit(3)'),
        _line('slow', 'import time; time.sleep(30)', timeout=1),
    ]
    assert _main(monkeypatch, tmp_path, lines) == 1
    header, environment, *rows, end = capsys.readouterr().out.splitlines()
    assert header.split() == ['line', 'result', 's', 'detail']
    assert environment.split()[:2] == ['environment', 'info']
    assert f'torch {torch.__version__}, CUDA {torch.version.cuda}' in (
        environment)
    assert rows[0].split()[:2] == ['good', 'pass']
    assert rows[0].endswith(
        '1 process, 2 accum.: ratio 1.041, share 3.0% | 4 proc gloo hook: '
        'ratio 0.991, share 2.5%')
    assert rows[1].split()[:2] == ['bad', 'FAIL']
    assert 'exit 3: boom' in rows[1]
    assert rows[2].split()[:2] == ['slow', 'FAIL']
    assert 'timed out after 1 s, its limit' in rows[2]
    assert end == (f'gpu_check: 2 of 4 rows failed; the table is in '
                   f'{tmp_path / "summary.txt"}')
    assert os.path.exists(tmp_path / 'bad.log')
    with pytest.raises(gpu_check.CheckFailed, match=r'no JSON result '
                       r'printed \(--json\)'):
        gpu_check.check_overhead('setting  plain s/step\n', str(tmp_path))
    with pytest.raises(gpu_check.CheckFailed, match='no setting measured'):
        gpu_check.check_overhead('{"settings": []}', str(tmp_path))
    # Only the passing line: exit 0.
    assert _main(monkeypatch, tmp_path, lines[:1]) == 0
    # A budget used up before a line starts fails that line.
    status, _, detail = gpu_check.run_line(lines[0], str(tmp_path), 0)
    assert status == 'FAIL' and 'budget' in detail


def test_rows_survive_the_deadline_and_show_the_result_not_warnings(
        monkeypatch, capsys, tmp_path):
    """Each row is printed and written to summary.txt as its line ends; a
    line running at the deadline is stopped (with the child it started);
    the detail is the tool's result line, not the stderr warning or the
    line printed after it."""
    warns = (f'import sys; print("speed-up 1.52x; iteration saving 2.00x"); '
             f'print({WARNING!r}, file=sys.stderr); print("load average 1.0")')
    # The sleeper starts a child that would outlive a kill of its parent.
    sleeps = ('import subprocess, sys, time; subprocess.Popen([sys.executable,'
              ' "-c", "import time; time.sleep(60)"]); print("started", '
              'flush=True); time.sleep(60)')
    lines = [
        _line('warns', warns, check=gpu_check.result_line('^speed-up')),
        _line('sleeps', sleeps, check=gpu_check.check_last_line),
        _line('late', 'print(1)'),
    ]
    start = time.monotonic()
    assert _main(monkeypatch, tmp_path, lines, '--budget', '6') == 1
    assert time.monotonic() - start < 6 + 2  # the environment row aside
    out = capsys.readouterr().out.splitlines()
    rows = {row.split()[0]: row for row in out[2:-1]}
    assert rows['warns'].split()[:2] == ['warns', 'pass']
    assert rows['warns'].endswith('  speed-up 1.52x; iteration saving 2.00x')
    assert re.search(r'^sleeps +FAIL +[\d.]+  stopped at the deadline after '
                     r'[56] s \(log ', rows['sleeps'])
    assert rows['late'].endswith('not run: the budget is used up')
    with open(tmp_path / 'summary.txt') as f:
        assert f.read().splitlines() == out[:-1]
    assert 'periodStrip' in (tmp_path / 'warns.err.log').read_text()
    with pytest.raises(gpu_check.CheckFailed, match='no result line'):
        gpu_check.result_line('^speed-up')('load average 1.0\n', '')


def _speedup_json(compile_result=None):
    mg = dict(compile=compile_result) if compile_result else {}
    return 'log line\n' + json.dumps(dict(
        stack=dict(channels_last=True, compile='inductor' if compile_result
                   else None, amp='float16', repeat_aug=None),
        speedup=2.1, ratio=0.7, ratio_net_of_first_iters=0.75,
        multigrid=mg, baseline={}))


def test_speedup_stack_check():
    assert gpu_check.check_speedup_stack(_speedup_json(), '') == (
        'channels_last+amp: speed-up 2.10x, ratio 0.70 (net of first '
        'iterations 0.75)')
    assert gpu_check.check_speedup_stack(_speedup_json(dict(
        graphs=12, fallbacks=[], fell_back=False)), '').endswith(
            '; 12 graphs, no eager fallback')
    with pytest.raises(gpu_check.CheckFailed,
                       match="fell back to eager: recompile_limit: 'f'"):
        gpu_check.check_speedup_stack(_speedup_json(dict(
            graphs=9, fallbacks=["recompile_limit: 'f' (x.py:1)"],
            fell_back=True)), '')
    with pytest.raises(gpu_check.CheckFailed, match='no JSON result'):
        gpu_check.check_speedup_stack('no json here', '')
