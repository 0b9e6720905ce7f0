""".dev_scripts/benchmark/agvm_overhead.py: options and the per-step arithmetic on
hand-made timings."""
import pytest

from agvm_overhead import (exchange_note, parse_args, slowest_rank,
                           summarize_setting, threads_per_rank)


def test_defaults_time_4_processes_and_whole_intervals():
    args = parse_args([])
    assert args.nprocs == [1, 4]  # 4: 2 ranks per half
    assert args.steps % args.update_interval == 0


def test_options_are_validated(capsys):
    for argv, message in [
        (['--steps', '12'], '--steps (12) must be a multiple of '
         '--update-interval (10)'),
        (['--steps', '12'], 'e.g. --steps 10'),
        (['--steps', '25', '--update-interval', '10'], 'e.g. --steps 20'),
        (['--update-interval', '0'], '--update-interval must be >= 1'),
        (['--nprocs', '1', '0'], '--nprocs must be >= 1, got [1, 0]'),
    ]:
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err


def test_extra_time_is_paired_step_by_step():
    args = parse_args(['--steps', '4', '--update-interval', '2',
                       '--batch-size', '3'])
    result = dict(
        times=dict(plain=[1.0, 1.0, 2.0, 4.0], agvm=[1.5, 1.2, 2.5, 4.2]),
        # Re-estimates at timed steps 0 and 2, 0.2 s and 0.3 s in
        # update_factors.
        kinds=['estimate', 'ordinary', 'estimate', 'ordinary'],
        update_factors=[0.2, 0.0, 0.3, 0.0], hooked=True, backend='gloo')
    row = summarize_setting(4, result, args)
    assert row['setting'] == '4 proc gloo hook'
    assert row['batch'] == 12
    assert row['plain'] == pytest.approx(2.0)
    assert row['agvm'] == pytest.approx(2.35)
    assert row['ratio'] == pytest.approx(1.175)
    # Medians: agvm (1.5 + 2.5) / 2 = 2.0, plain (1 + 2) / 2 = 1.5.
    assert row['median_ratio'] == pytest.approx(2.0 / 1.5)
    # AGVM minus plain, step by step: 0.5, 0.2, 0.5, 0.2.
    assert row['ordinary'] == pytest.approx(0.2)
    assert row['estimate'] == pytest.approx(0.5)
    assert row['amortised'] == pytest.approx(0.35)
    assert row['share'] == pytest.approx(0.175)
    # update_factors: 0.25 s per re-estimate, (0.2 + 0.3) / 4 steps / 2.0.
    assert row['update_factors'] == pytest.approx(0.25)
    assert row['update_share'] == pytest.approx(0.0625)
    assert row['estimates'] == 2
    one = summarize_setting(1, dict(result, hooked=False, backend=None), args)
    assert (one['setting'], one['batch']) == ('1 process, 2 accum.', 6)


def test_every_row_runs_cores_over_ranks_threads(monkeypatch):
    import agvm_overhead as tool
    monkeypatch.setattr(tool.os, 'cpu_count', lambda: 8)
    assert [threads_per_rank(n) for n in (1, 2, 4, 16)] == [8, 4, 2, 1]


def test_a_step_counts_as_its_slowest_rank():
    ranks = [dict(times=dict(plain=[1.0, 2.0], agvm=[1.5, 2.0]),
                  update_factors=[0.1, 0.0], kinds=['estimate', 'ordinary'],
                  params=10, modules=3),
             dict(times=dict(plain=[1.2, 1.0], agvm=[1.1, 2.5]),
                  update_factors=[0.3, 0.0], kinds=['estimate', 'ordinary'],
                  params=10, modules=3)]
    out = slowest_rank(ranks)
    assert out['times'] == dict(plain=[1.2, 2.0], agvm=[1.5, 2.5])
    assert out['update_factors'] == [0.3, 0.0]
    note = exchange_note(out, parse_args([]))
    assert note['measured'] == 'cpu, one host, gloo between processes'
    # fp32 gradient of 10 parameters; 3 x 3 float64 statistics.
    assert note['per_reestimate'] == dict(half_allreduce_bytes=40,
                                          statistics_allreduce_bytes=72)


def test_work_timer_keeps_signatures_and_counts_nested_calls_once():
    import inspect

    from bench_utils import WorkTimer

    class Hooks:

        def comm_hook(self, state, bucket):
            return self.inner(bucket) + 1

        def inner(self, bucket):
            return bucket * 2

    hooks, timer = Hooks(), WorkTimer()
    timer.instrument(hooks, ['comm_hook', 'inner', 'missing'])
    # DDP's register_comm_hook checks the parameter named `bucket`.
    assert list(inspect.signature(hooks.comm_hook).parameters) == [
        'state', 'bucket']
    assert hooks.comm_hook(None, 3) == 7
    assert len(timer.seconds) == 1  # inner ran nested: counted once
    hooks.inner(1)
    assert len(timer.seconds) == 2
