""".dev_scripts/benchmark/agvm_large_batch.py: the plan, the backbone cache key,
the arm table, tuning, the gate, the static arm, diverged runs, paired
intervals and gap shares on hand-made inputs, the scenes, and a tiny
end-to-end run."""
import json
import math
import sys
import warnings

import pytest
import torch
from helpers import DEVICES, run_tool

import agvm_large_batch as bench
from agvm_large_batch import (ARM, MODULES, StaticFactorWrapper,
                              background_floor, compare, gate_modules,
                              mean_factors, parse_args, plan, val_loss)
from mmext.agvm import AGVMOptimWrapper
from mmext.compat import accumulative_counts
from scenes import SceneSegmentor, make_scenes, mean_iou
from seed_stats import bootstrap_interval, detectable_difference, summary

TINY = ['--epochs', '2', '--k', '2', '--batch', '4', '--train-images', '32',
        '--val-images', '8', '--image-size', '16', '--seeds', '0', '1',
        '--pretrain-images', '32', '--pretrain-steps', '3']


def test_defaults_warm_up_for_30_percent_of_240_large_steps():
    p = plan(parse_args([]))
    # 1280 // 64 = 20 large batches per epoch x 8 micro-batches x 12 epochs;
    # warm-up round(0.3 x 1920 / 8) = 72 large steps; AGVM 0.2 x 72 = 14.4
    # -> 15 large steps after it.
    assert p == dict(iters_per_epoch=160, iters=1920, warmup=576,
                     agvm_start=696, large_steps=240)


def test_warmup_and_agvm_start_are_whole_large_steps():
    args = parse_args(['--k', '4', '--batch', '2', '--train-images', '21',
                       '--epochs', '3', '--warmup-share', '0.3',
                       '--agvm-delay', '0.5'])
    # 21 // 8 = 2 large batches = 8 micro-batches per epoch (the 5 left
    # over are dropped), 24 in all; warm-up round(0.3 x 24 / 4) = 2 steps.
    assert plan(args) == dict(iters_per_epoch=8, iters=24, warmup=8,
                              agvm_start=12, large_steps=6)


def test_backbone_cache_key_follows_code_settings_and_torch(monkeypatch):
    args = parse_args([])
    key = bench.backbone_key(args)
    assert key == bench.backbone_key(parse_args([]))
    assert bench.backbone_key(parse_args(['--image-size', '24'])) != key
    assert bench.backbone_key(parse_args(['--pretrain-steps', '9'])) != key
    real = bench.inspect.getsource
    monkeypatch.setattr(bench.inspect, 'getsource', lambda obj: real(obj) + (
        '# changed' if obj is bench.scenes_module else ''))
    assert bench.backbone_key(args) != key
    monkeypatch.setattr(bench.inspect, 'getsource', real)
    monkeypatch.setattr(bench.torch, '__version__', '0.0.0')
    assert bench.backbone_key(args) != key


def _rows(small, large):
    """Rows as variance_by_batch_size gives them: name -> per-repeat
    d_backbone / d_i values."""

    def row(n, ratios):
        return dict(batch_size=n, ratio={
            name: dict(mean=sum(v) / len(v), std=0.0, values=v)
            for name, v in ratios.items()})

    return [row(16, small), row(64, large)]


def test_gate_reports_the_clamped_change_with_a_bootstrap_interval():
    rows = _rows(
        small=dict(backbone=[1, 1], neck=[2.0, 2.0, 2.0],
                   decode_head=[4.0, 12.0]),
        large=dict(backbone=[1, 1], neck=[3.0, 3.0, 3.0],
                   decode_head=[30.0, 13.0]))
    neck, head = gate_modules(rows, ratio_range=(0.5, 10.0))
    # neck: every repeat 2 -> 3: x1.5, and so is every bootstrap draw.
    assert (neck['name'], neck['change']) == ('neck', pytest.approx(1.5))
    assert neck['interval'] == (pytest.approx(1.5), pytest.approx(1.5))
    assert neck['small'] == (2.0, 0.0)
    # decode_head clamped: [4, 10] -> [10, 10]: x10 / 7; draws of the small
    # side are 4 (x2.5), 10 (x1) or their mean (x10/7).
    assert head['change'] == pytest.approx(10 / 7)
    assert head['interval'] == (pytest.approx(1.0), pytest.approx(2.5))


def _runs(arm, values, lr=0.1):
    # Seeds listed 2, 0, 1 on purpose: pairing must go by seed.
    return [dict(arm=arm, seed=seed, lr=lr, steps=10, miou=m, val_loss=1 - m,
                 train_loss=0.5, seconds=10.0 + seed, agvm=[], diverged=None)
            for seed, m in zip((2, 0, 1), values)]


def test_compare_pairs_by_seed_with_t_intervals_and_the_gap_closed():
    runs = (_runs('small', [0.60, 0.62, 0.58]) +
            _runs('large', [0.50, 0.40, 0.45]) +
            _runs('large-agvm', [0.55, 0.44, 0.45]) +
            _runs('large-agvm0', [0.50, 0.40, 0.45]) +
            _runs('large-static', [0.53, 0.42, 0.45]) +
            _runs('large-lamb', [0.40, 0.30, 0.35]))
    result = compare(runs)
    assert result['arms']['small']['miou']['mean'] == pytest.approx(0.60)
    d = result['differences']['large-agvm - large: miou']
    assert d['seeds'] == [0, 1, 2]
    assert d['differences'] == pytest.approx([0.04, 0.0, 0.05])
    # mean 0.03, sd 0.0265 (n=3): t(0.975, 2) = 4.303, half 0.0657.
    assert d['summary']['low'] == pytest.approx(0.03 - 4.3027 * math.sqrt(
        (0.01**2 + 0.03**2 + 0.02**2) / 2) / math.sqrt(3), abs=1e-4)
    assert d['summary']['covers_zero']
    gap = 0.60 - 0.45
    closed = result['gap_closed']
    assert list(closed) == ['sgd']  # no AdamW arm ran
    assert closed['sgd']['large-agvm'] == pytest.approx(0.03 / gap)
    assert closed['sgd']['large-agvm0'] == pytest.approx(0.0)
    assert closed['sgd']['large-lamb'] == pytest.approx(-0.1 / gap)
    static = result['differences']['large-agvm - large-static: miou']
    assert static['differences'] == pytest.approx([0.02, 0.0, 0.02])
    loss = result['differences']['large-agvm - large: val_loss']
    assert loss['differences'] == pytest.approx([-0.04, 0.0, -0.05])


def test_adamw_block_gap_shares_and_a_diverged_seed_left_out():
    runs = (_runs('large-lamb', [0.70, 0.60, 0.65]) +
            _runs('small-adamw', [0.80, 0.80, 0.80]) +
            _runs('large-adamw', [0.60, 0.70, 0.65]) +
            _runs('large-adamw-agvm', [0.62, 0.75, 0.65]) +
            _runs('large-adamw-static', [0.60, 0.70, 0.65]) +
            _runs('large-lamb-agvm', [0.72, 0.61, 0.0]))
    runs[-1].update(diverged=30)  # large-lamb-agvm, seed 1
    for key in ('miou', 'val_loss', 'train_loss'):
        del runs[-1][key]
    result = compare(runs)
    # Gap per seed 2: 0.2, 0: 0.1, 1: 0.15 -> 0.15.
    shares = result['gap_closed']['adamw']
    assert shares['large-adamw-agvm'] == pytest.approx((0.02 + 0.05) / 3 /
                                                       0.15)
    assert shares['large-adamw-static'] == pytest.approx(0.0)
    assert shares['large-lamb'] == pytest.approx(0.0)
    # The diverged seed is listed and paired nowhere: seeds 0 and 2 only.
    lamb_agvm = result['arms']['large-lamb-agvm']
    assert lamb_agvm['diverged'] == {1: 30}
    assert lamb_agvm['miou']['values'] == pytest.approx([0.72, 0.61])
    d = result['differences']['large-lamb-agvm - large-lamb: miou']
    assert (d['seeds'], d['differences']) == ([0, 2], pytest.approx(
        [0.01, 0.02]))
    assert shares['large-lamb-agvm'] == pytest.approx((-0.09 + 0.12) / 2 /
                                                      0.15)
    assert [tuple(p) for p in result['pairs']] == [
        ('large-lamb', 'large-adamw'), ('small-adamw', 'large-adamw'),
        ('large-adamw-agvm', 'large-adamw'),
        ('large-adamw-agvm', 'large-adamw-static'),
        ('large-adamw-static', 'large-adamw'),
        ('large-lamb-agvm', 'large-adamw'), ('large-lamb-agvm', 'large-lamb')]


def test_arm_table_blocks_optimizers_and_lrs():
    names = [a.name for a in bench.arms(parse_args(['--block', 'adamw']))]
    assert names == ['large-lamb', 'small-adamw', 'large-adamw',
                     'large-adamw-agvm', 'large-adamw-static',
                     'large-lamb-agvm']
    assert len(bench.arms(parse_args([]))) == len(bench.ARMS) == 11
    assert [a.name for a in bench.arms(parse_args(['--block', 'sgd']))] == [
        'small', 'large', 'large-agvm', 'large-agvm0', 'large-static',
        'large-lamb']
    best = dict(large=0.3, small=0.1, **{'large-adamw-static': 0.02})
    assert bench.tuned_lr(best, ARM['large-static']) == 0.3
    assert bench.tuned_lr(best, ARM['large-adamw-static']) == 0.02


@pytest.mark.parametrize('arm,optimizer,wrapper,statistic,counts', [
    ('small-adamw', 'AdamW', 'OptimWrapper', None, 1),
    ('large-adamw', 'AdamW', 'OptimWrapper', None, 4),
    ('large-adamw-agvm', 'AdamW', 'AGVMOptimWrapper', 'adam', 4),
    ('large-adamw-static', 'AdamW', 'StaticFactorWrapper', None, 4),
    ('large-lamb-agvm', 'Lamb', 'AGVMOptimWrapper', 'adam', 4),
    ('large-agvm0', 'SGD', 'AGVMOptimWrapper', 'grad', 4),
])
def test_each_arm_builds_its_optimizer_and_wrapper(arm, optimizer, wrapper,
                                                   statistic, counts):
    args = parse_args(['--k', '4'])
    p = dict(agvm_start=40)
    model = SceneSegmentor()
    built = bench.optim_wrapper(args, ARM[arm], 0.01, model, p,
                                factors=[1.0, 1.1, 1.2])
    assert type(built).__name__ == wrapper
    assert type(built.optimizer).__name__ == optimizer
    assert accumulative_counts(built) == counts
    groups = built.optimizer.param_groups
    assert {g['lr'] for g in groups} == {0.01}
    assert groups[0]['weight_decay'] == (0.01 if optimizer == 'AdamW'
                                         else 1e-4)
    if statistic:
        assert built.statistic == statistic
        assert built.module_names == MODULES
        assert built.schedule.start_iter == (0 if arm == 'large-agvm0'
                                             else 40)
    if wrapper == 'StaticFactorWrapper':
        assert [sum(p.numel() for p in g['params']) for g in groups] == [
            sum(p.numel() for p in getattr(model, m).parameters())
            for m in MODULES]


def test_a_diverging_run_is_recorded_not_raised(monkeypatch, tmp_path):
    """AGVM's FloatingPointError at a re-estimate (inf gradients, finite
    loss) and a NaN loss both end the run as diverged."""
    args = parse_args(TINY + ['--work-dir', str(tmp_path)])
    p = plan(args)  # 8 large steps of 2 micro-batches; AGVM from 6
    real = bench.optim_wrapper

    def inf_grads_from_agvm_start(args, arm, lr, model, p, factors=None):
        built = real(args, arm, lr, model, p, factors)
        calls = []
        model.neck.laterals[0].weight.register_hook(lambda g: g * (
            math.inf if calls.append(1) or len(calls) > p['agvm_start']
            else 1))
        return built

    monkeypatch.setattr(bench, 'optim_wrapper', inf_grads_from_agvm_start)
    bench._quiet()
    agvm = bench.train(args, 'large-adamw-agvm', 1e-3, 0)
    assert p['agvm_start'] == 6
    # Micro-batch 6 (step 4) has inf gradients: AGVM raises there.
    assert agvm['diverged'] == 4 and 'miou' not in agvm
    assert isinstance(real(args, ARM['large-adamw-agvm'], 1e-3,
                           SceneSegmentor(), p), AGVMOptimWrapper)
    monkeypatch.setattr(bench, 'optim_wrapper', real)
    plain = bench.train(args, 'large-adamw', 1e6, 0)
    assert plain['diverged'] is not None and 'val_loss' not in plain
    monkeypatch.setattr(bench, 'run_all', lambda args, jobs: [
        agvm, dict(arm='large-adamw-agvm', lr=2e-3, val_loss=0.5,
                   diverged=None)])
    assert bench.tune(args, [ARM['large-adamw-agvm']])['best'] == {
        'large-adamw-agvm': 2e-3}


def test_runs_without_a_runner_do_not_warn_about_start_checks(tmp_path):
    args = parse_args(TINY + ['--work-dir', str(tmp_path)])
    with warnings.catch_warnings(record=True) as caught:
        bench._quiet()
        bench.train(args, 'large-agvm', 0.01, 0, stop=8)
    assert not [w for w in caught if 'start checks' in str(w.message)]


def test_static_arm_takes_agvms_mean_factors_from_its_start():
    runs = [dict(agvm=[dict(s=[1.0, 1.2, 2.0]), dict(s=[1.0, 1.4, 3.0])]),
            dict(agvm=[dict(s=[1.0, 1.0, 1.0])])]
    assert mean_factors(runs) == pytest.approx([1.0, 1.2, 2.0])
    model = SceneSegmentor()
    groups = [dict(params=getattr(model, m).parameters()) for m in MODULES]
    optimizer = torch.optim.SGD(groups, lr=0.1)
    seen = []
    optimizer.register_step_pre_hook(lambda opt, *_: seen.append(
        [g['lr'] for g in opt.param_groups]))
    wrapper = StaticFactorWrapper(optimizer, [1.0, 2.0, 3.0], start=2)
    wrapper.initialize_count_status(model, 0, 4)
    images, labels = make_scenes(2, size=16, seed=0)
    for _ in range(4):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        wrapper.update_params(loss)
    assert [pytest.approx(lrs) for lrs in [[0.1] * 3] * 2 +
            [[0.1, 0.2, 0.3]] * 2] == seen
    assert [g['lr'] for g in optimizer.param_groups] == [0.1] * 3


def test_tuning_picks_the_lowest_val_loss(monkeypatch):
    def fake(args, jobs):
        return [dict(arm=arm, lr=lr, val_loss=abs(lr - 0.05), miou=0.0,
                     diverged=None) for arm, lr, _, _ in jobs]

    monkeypatch.setattr(bench, 'run_all', fake)
    args = parse_args([])
    tuned = bench.tune(args, [a for a in bench.ARMS
                              if a.lrs.startswith('lrs_')])
    assert tuned['best'] == {'small': 0.04, 'large': 0.08,
                             'large-lamb': 0.04, 'small-adamw': 0.016,
                             'large-adamw': 0.064,
                             'large-adamw-agvm': 0.064,
                             'large-adamw-static': 0.064,
                             'large-lamb-agvm': 0.04}
    assert len(tuned['runs']) == 8 * 4
    # Each is the edge of its grid.
    assert tuned['at_grid_edge'] == list(tuned['best'])


def test_seed_statistics():
    s = summary([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.3027: 2 +- 2.484.
    assert (s['mean'], s['std']) == (2.0, 1.0)
    assert (s['low'], s['high']) == (pytest.approx(2 - 2.4841, abs=1e-4),
                                     pytest.approx(2 + 2.4841, abs=1e-4))
    # (t(0.975, 4) + z(0.8)) x 0.1 / sqrt(5) = (2.7764 + 0.8416) x 0.0447.
    assert detectable_difference(0.1, 5) == pytest.approx(0.1618, abs=1e-4)
    assert bootstrap_interval([1.0], [2.0, 2.0], lambda a, b: b[0] - a[0]
                              ) == (1.0, 1.0)


def test_options_are_validated(capsys):
    for argv, message in [
        (['--k', '3'], '--k must be even and >= 2'),
        (['--jobs', '0'], '--jobs must be >= 1, got 0'),
        (['--batch', '0'], '--batch must be >= 1, got 0'),
        (['--train-images', '6', '--k', '2', '--batch', '4'],
         '--train-images (6) must hold one large batch of --k x --batch = 8'),
        (['--warmup-share', '0.5'], '--warmup-share must be in (0, 0.5)'),
        (['--seeds', '0'], '--seeds: at least 2 distinct seeds'),
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
    assert '`pip install pytorch_optimizer`' in capsys.readouterr().err


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
    proc = run_tool([
        sys.executable, '.dev_scripts/benchmark/agvm_large_batch.py', *TINY,
        '--lrs-small', '0.02', '0.04', '--lrs-large', '0.04',
        '--lrs-lamb', '0.01', '--lrs-small-adamw', '0.001',
        '--lrs-large-adamw', '0.001', '0.002', '--gate-repeats', '2',
        '--jobs', '1', '--work-dir', str(tmp_path), '--json'
    ])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['plan'] == dict(iters_per_epoch=8, iters=16, warmup=4,
                                  agvm_start=6, large_steps=8)
    assert list(result['arms']) == [a.name for a in bench.ARMS]
    assert result['arms']['small-adamw']['steps'] == 16
    assert result['arms']['large-adamw-agvm']['steps'] == 8
    # 7 grids (2 + 1 + 1 + 1 + 2 + 2 + 1 LRs), then the static AdamW grid.
    assert len(result['tuning']['runs']) == 10 + 2
    assert len(result['runs']) == 11 * 2
    for arm, of in (('large-static', 'large-agvm'),
                    ('large-adamw-static', 'large-adamw-agvm')):
        agvm = [r for r in result['runs'] if r['arm'] == of]
        # AGVM re-estimates every large step from its start (step 3 of 8).
        assert [e['step'] for e in agvm[0]['agvm']] == [4, 5, 6, 7, 8]
        assert result['static_factors'][arm] == pytest.approx(
            mean_factors(agvm))
    assert result['arms']['large-static']['lr'] == 0.04  # large's
    assert [g['iteration'] for g in result['gate'].values()] == [6, 8]
    assert 'share of the small/large mIoU gap closed' in proc.stdout
    assert 'share of the small-adamw/large-adamw mIoU' in proc.stdout
    assert '| large-adamw-agvm \u2212 large-adamw | ' in proc.stdout
    assert 'start checks' not in proc.stderr
