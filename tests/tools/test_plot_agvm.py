"""tools/analysis/plot_agvm.py reads mmengine's scalars.json and draws."""
import json

import pytest

from tools.analysis import plot_agvm as tool


def _write_runs(tmp_path):
    """Two runs (a resume) of re-estimates at iterations 2, 4 and 6."""
    for run, steps in (('20260101_000000', (2, 4)), ('20260101_010000',
                                                      (6, ))):
        vis = tmp_path / run / 'vis_data'
        vis.mkdir(parents=True)
        # Logger records (every iteration) and re-estimate records (every
        # other one), as mmengine's LoggerHook and the wrapper write them.
        lines = []
        for s in steps:
            lines.append({'step': s - 1, 'lr': 0.1, 'agvm_mu/neck': 1.0})
            lines.append({'step': s, 'agvm_s/backbone': 1.0,
                          'agvm_s/neck': 1 + s / 100, 'agvm_d/neck': 0.1 * s})
            lines.append({'step': s, 'lr': 0.1, 'agvm_mu/neck': 1 + s / 100})
        vis.joinpath('scalars.json').write_text('\n'.join(
            json.dumps(line) for line in lines))
    (tmp_path / 'run.py').write_text(
        'optim_wrapper = dict(start_iter=2, clip_grad_window=(0, 2))\n')


def test_load_and_plot(tmp_path):
    # The curves continue across the resume.
    _write_runs(tmp_path)
    factors, variances = tool.load_agvm_scalars(str(tmp_path))
    # One point per re-estimate, not per logged iteration.
    assert factors['neck'] == [(2, 1.02), (4, 1.04), (6, 1.06)]
    assert variances['neck'] == [(2, pytest.approx(0.2)),
                                 (4, pytest.approx(0.4)),
                                 (6, pytest.approx(0.6))]
    window = tool.agvm_window(tool.saved_config(str(tmp_path)))
    assert window == dict(start_iter=2, end_iter=None,
                          clip_grad_window=(0, 2))
    out = tmp_path / 'new' / 'agvm.png'
    tool.plot(factors, variances, str(out), window)
    assert out.stat().st_size > 1000


def test_work_dir_without_agvm_scalars(tmp_path):
    with pytest.raises(FileNotFoundError, match='agvm_s'):
        tool.load_agvm_scalars(str(tmp_path))


def test_image_goes_into_the_work_dir_by_default(tmp_path, monkeypatch,
                                                 capsys):
    work_dir = tmp_path / 'work'
    _write_runs(work_dir)
    elsewhere = tmp_path / 'cwd'
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tool.main([str(work_dir)])
    assert (work_dir / 'agvm.png').stat().st_size > 1000
    assert list(elsewhere.iterdir()) == []
    assert capsys.readouterr().out.startswith(
        f'wrote {work_dir / "agvm.png"}: 2 modules, 3 re-estimates')
    tool.main([str(work_dir), '--out', 'mine.png'])
    assert (elsewhere / 'mine.png').stat().st_size > 1000
