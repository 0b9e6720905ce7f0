"""tools/benchmark/agvm_large_batch.py: the plan and LR arithmetic, the gate,
the paired verdict on hand-made inputs, the scenes, and a tiny end-to-end
run."""
import json
import math
import sys

import pytest
import torch
from helpers import DEVICES, run_tool

from scenes import SceneSegmentor, make_scenes, mean_iou
from tools.benchmark.agvm_large_batch import (agvm_verdict, arm_lr,
                                              background_floor,
                                              gate_verdict, parse_args, plan,
                                              summarize_arms, val_loss)


def test_defaults_give_the_large_arm_150_steps_and_a_12_percent_warmup():
    p = plan(parse_args([]))
    # 1280 // 64 = 20 large batches per epoch x 8 micro-batches x 8 epochs.
    assert p == dict(iters_per_epoch=160, iters=1280, warmup=152,
                     agvm_start=184, large_steps=160)
    # Warm-up: round(0.12 x 1280 / 8) = 19 large steps; AGVM 0.2 x 19 = 3.8
    # -> 4 large steps after it.
    assert p['large_steps'] >= 150


def test_warmup_and_agvm_start_are_whole_large_steps():
    args = parse_args(['--k', '4', '--batch', '2', '--train-images', '21',
                       '--epochs', '3', '--warmup-share', '0.3',
                       '--agvm-delay', '0.5'])
    # 21 // 8 = 2 large batches = 8 micro-batches per epoch (the 5 left
    # over are dropped), 24 in all; warm-up round(0.3 x 24 / 4) = 2 steps.
    assert plan(args) == dict(iters_per_epoch=8, iters=24, warmup=8,
                              agvm_start=12, large_steps=6)


def test_arm_learning_rates():
    args = parse_args(['--lr', '0.02', '--k', '8', '--lamb-lr', '0.005'])
    assert arm_lr(args, 'small') == pytest.approx(0.02)
    assert arm_lr(args, 'large-linear') == pytest.approx(0.16)
    assert arm_lr(args, 'large-sqrt') == pytest.approx(0.02 * 8**0.5)
    assert arm_lr(args, 'large-agvm') == pytest.approx(0.02 * 8**0.5)
    assert arm_lr(args, 'large-lamb') == pytest.approx(0.005)
    args = parse_args(['--agvm-lr', 'linear'])
    assert arm_lr(args, 'large-agvm') == pytest.approx(0.16)


def _drift(small, large):
    """Rows as variance_by_batch_size gives them: name -> (mean, std)."""

    def row(n, ratios):
        return dict(batch_size=n, ratio={
            name: dict(mean=m, std=s) for name, (m, s) in ratios.items()})

    return dict(small=row(16, small), large=row(64, large))


def test_gate_finds_drift_only_inside_the_clamp_and_beyond_the_spread():
    drift = _drift(
        small=dict(backbone=(1, 0), neck=(2.0, 0.1), head=(12.0, 1.0),
                   roi=(3.0, 0.5), bbox=(2.0, 0.1), mask=(4.0, 2.0)),
        large=dict(backbone=(1, 0), neck=(3.0, 0.2), head=(30.0, 2.0),
                   roi=(3.9, 0.5), bbox=(2.2, 0.1), mask=(13.0, 3.0)))
    present, modules = gate_verdict(drift, ratio_range=(0.5, 10.0))
    assert present
    by_name = {m['name']: m for m in modules}
    # The anchor is left out.
    assert list(by_name) == ['neck', 'head', 'roi', 'bbox', 'mask']
    # neck: 2 -> 3 is x1.5 >= 1.25, |3 - 2| > 0.2 + 0.1, inside (0.5, 10).
    assert by_name['neck']['drift'] == pytest.approx(1.5)
    assert by_name['neck']['present']
    assert by_name['neck']['small'] == (2.0, 0.1)
    # head: both clamped to 10: x1.00, the factor sits at its bound anyway.
    assert by_name['head']['drift'] == pytest.approx(1.0)
    assert not by_name['head']['present']
    # roi: x1.3 but |3.9 - 3| = 0.9 < 0.5 + 0.5 (within the repeats' spread).
    assert by_name['roi']['drift'] == pytest.approx(1.3)
    assert not by_name['roi']['present']
    # bbox: x1.1 < 1.25.
    assert not by_name['bbox']['present']
    # mask: 4 -> 13 clamps to 4 -> 10 (x2.5): the factor moves to the bound.
    assert by_name['mask']['drift'] == pytest.approx(2.5)
    assert by_name['mask']['present']
    no_drift = _drift(small=dict(backbone=(1, 0), neck=(1.1, 0.05)),
                      large=dict(backbone=(1, 0), neck=(1.15, 0.05)))
    assert gate_verdict(no_drift) == (False, [dict(
        name='neck', small=(1.1, 0.05), large=(1.15, 0.05),
        drift=pytest.approx(1.15 / 1.1), present=False)])


def _runs(arm, mious, lr=0.1, steps=10):
    return [dict(arm=arm, seed=seed, lr=lr, steps=steps, miou=m,
                 val_loss=1 - m,
                 epoch_losses=[2.0, 1.0 + seed], seconds=10.0 + seed,
                 data_share=0.01) for seed, m in zip((2, 0, 1), mious)]


def test_summary_pairs_by_seed_and_the_share_of_the_gap_closed():
    # Seeds listed 2, 0, 1 on purpose: pairing must go by seed, not order.
    runs = (_runs('small', [0.60, 0.62, 0.58]) +
            _runs('large-sqrt', [0.50, 0.40, 0.45]) +
            _runs('large-agvm', [0.55, 0.44, 0.45]))
    args = parse_args(['--arms', 'small', 'large-sqrt', 'large-agvm'])
    summary = summarize_arms(runs, args)
    assert summary['small']['per_seed'] == [0.62, 0.58, 0.60]  # seeds 0,1,2
    assert summary['small']['miou'] == (pytest.approx(0.60),
                                        pytest.approx(0.02))
    assert summary['small']['final_loss'] == pytest.approx(2.0)
    assert summary['small']['seconds'] == pytest.approx(11.0)
    verdict = agvm_verdict(summary, 'large-sqrt', testable=True)
    assert verdict['paired'] == pytest.approx([0.04, 0.0, 0.05])
    assert verdict['paired_mean'] == pytest.approx(0.03)
    assert verdict['paired_std'] == pytest.approx(math.sqrt(
        ((0.01)**2 + 0.03**2 + 0.02**2) / 2))
    assert verdict['gap'] == pytest.approx(0.60 - 0.45)
    assert verdict['closed'] == pytest.approx(0.03 / 0.15)
    assert verdict['testable'] is True
    assert verdict['paired_val_loss'] == pytest.approx([-0.04, 0.0, -0.05])
    assert summary['small']['val_loss'] == (pytest.approx(0.40),
                                            pytest.approx(0.02))
    # No gap (large as good as small): no share.
    runs = (_runs('small', [0.4, 0.4, 0.4]) +
            _runs('large-sqrt', [0.5, 0.5, 0.5]) +
            _runs('large-agvm', [0.5, 0.5, 0.5]))
    assert math.isnan(agvm_verdict(summarize_arms(runs, args), 'large-sqrt',
                                   False)['closed'])


def test_options_are_validated(capsys):
    for argv, message in [
        (['--k', '3'], '--k must be even and >= 2'),
        (['--jobs', '0'], '--jobs must be >= 1, got 0'),
        (['--batch', '0'], '--batch must be >= 1, got 0'),
        (['--train-images', '6', '--k', '2', '--batch', '4'],
         '--train-images (6) must hold one large batch of --k x --batch = 8'),
        (['--warmup-share', '0.5'], '--warmup-share must be in (0, 0.5)'),
    ]:
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err


def test_lamb_arm_without_its_library_names_the_fix(monkeypatch, capsys):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None
                        if name == 'pytorch_optimizer' else real(name, *a))
    with pytest.raises(SystemExit):
        parse_args([])
    assert ('`pip install pytorch_optimizer`, or leave the arm out'
            in capsys.readouterr().err)
    assert 'large-lamb' not in parse_args(
        ['--arms', 'small', 'large-agvm']).arms


def test_scenes_are_seeded_balanced_and_disjoint_by_seed():
    images, labels = make_scenes(16, size=24, seed=5)
    assert images.shape == (16, 3, 24, 24) and images.dtype == torch.float32
    assert labels.shape == (16, 24, 24) and labels.dtype == torch.int64
    again, again_labels = make_scenes(16, size=24, seed=5)
    assert torch.equal(images, again) and torch.equal(labels, again_labels)
    other, _ = make_scenes(16, size=24, seed=6)
    assert not torch.equal(images, other)
    # Every image has at least one object; the four shapes all occur.
    assert ((labels > 0).flatten(1).any(1)).all()
    assert set(labels.unique().tolist()) == {0, 1, 2, 3, 4}
    assert abs(images.mean()) < 0.5


class _Constant(torch.nn.Module):
    """Predicts class ``c`` everywhere (logits one-hot)."""

    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, images):
        out = images.new_zeros(len(images), 5, *images.shape[-2:])
        out[:, self.c] = 1
        return out


@pytest.mark.parametrize('device', DEVICES)
def test_mean_iou_against_a_hand_computed_case(device):
    labels = torch.zeros(2, 2, 2, dtype=torch.int64, device=device)
    labels[0, 0, 0] = 1  # 1 pixel of class 1, 7 of background
    images = torch.zeros(2, 3, 2, 2, device=device)
    # All background: IoU(bg) = 7 / 8, IoU(1) = 0 / 1; classes 2-4 absent.
    assert mean_iou(_Constant(0), images, labels) == pytest.approx(7 / 16)
    # All class 1: IoU(bg) = 0 / 7, IoU(1) = 1 / 8.
    assert mean_iou(_Constant(1), images, labels) == pytest.approx(1 / 16)
    # Predicting background everywhere, without a model.
    assert background_floor(labels) == pytest.approx(7 / 16)
    model = SceneSegmentor()
    model.train()
    mean_iou(model, torch.zeros(2, 3, 16, 16), labels.new_zeros(2, 16, 16))
    assert model.training  # restored after the eval-mode pass


def test_val_loss_is_the_pixel_mean_over_uneven_batches():
    images, labels = make_scenes(5, size=16, seed=0)
    model = SceneSegmentor()
    with torch.no_grad():
        model.eval()
        expected = torch.nn.functional.cross_entropy(model(images), labels)
    model.train()
    assert val_loss(model, images, labels, batch_size=2) == pytest.approx(
        float(expected), rel=1e-5)
    assert model.training


@pytest.mark.slow
def test_tiny_benchmark_runs_end_to_end(tmp_path):
    pytest.importorskip('pytorch_optimizer',
                        reason='the large-lamb arm needs pytorch_optimizer')
    proc = run_tool([
        sys.executable, 'tools/benchmark/agvm_large_batch.py', '--epochs',
        '2', '--k', '2', '--batch', '4', '--train-images', '32',
        '--val-images', '8', '--image-size', '16', '--seeds', '0', '1',
        '--pretrain-images', '32', '--pretrain-steps', '3',
        '--gate-repeats', '2', '--jobs', '1', '--work-dir', str(tmp_path),
        '--json'
    ])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['plan'] == dict(iters_per_epoch=8, iters=16, warmup=2,
                                  agvm_start=4, large_steps=8)
    summary = result['summary']
    assert list(summary) == ['small', 'large-linear', 'large-sqrt',
                             'large-agvm', 'large-lamb']
    assert summary['small']['steps'] == 16
    assert summary['large-agvm']['steps'] == 8
    assert summary['large-linear']['lr'] == pytest.approx(0.04)
    # The verdict is the one computed from the per-seed values it reports.
    expected = agvm_verdict(summary, 'large-sqrt', result['gate']['testable'])
    for key, value in expected.items():
        assert result['verdict'][key] == pytest.approx(value, nan_ok=True)
    assert 'GATE: ' in proc.stdout
    assert proc.stdout.index('GATE: ') < proc.stdout.index('mIoU mean')
    agvm = [r for r in result['runs'] if r['arm'] == 'large-agvm']
    # AGVM re-estimates every large step from its start (step 2 of 8).
    assert [e['step'] for e in agvm[0]['agvm']] == [3, 4, 5, 6, 7, 8]
    assert len(agvm[0]['agvm'][0]['s']) == 3
    # The backbone is pre-trained once and then read from the cache.
    assert proc.stdout.count('pre-trained the backbone') == 1
