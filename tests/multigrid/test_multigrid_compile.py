"""mmext.multigrid.compile: torch.compile (backend 'eager', which traces
and guards as inductor does but runs the graphs as they are) across the
multigrid shapes, validation and precise BN."""
import logging
import os.path as osp

import pytest
import torch
from mg_helpers import TINY, tiny_runner
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.logging import MessageHub
from mmengine.optim import build_optim_wrapper

import mmext  # noqa: F401
from mmext import compat
from mmext.multigrid import MultigridPlan
from mmext.multigrid.bn import enable_sub_bn, update_precise_bn
from mmext.multigrid.compile import (CompiledRun, compile_enabled,
                                     run_outside_dynamo, train_shape_count)

# tiny_mg.py's plan over the 64 demo clips: its 5 distinct train shapes
# (batch, T, S, sub-BN splits), as MultigridPlan.shape_iterations lists them.
TINY_SHAPES = [(32, 8, 28, 8), (16, 8, 40, 4), (16, 16, 28, 4),
               (8, 16, 40, 2), (4, 16, 56, 1)]


@pytest.fixture
def dynamo_state():
    """Leave dynamo's limit and caches as they were."""
    previous = compat.dynamo_config('recompile_limit')
    torch.compiler.reset()
    yield
    compat.set_dynamo_config('recompile_limit', previous)
    torch.compiler.reset()


def _tiny_plan():
    return MultigridPlan.from_config(Config.fromfile(TINY),
                                     samples_per_rank=64)


def test_compile_enabled():
    assert compile_enabled(True) and compile_enabled(dict(backend='eager'))
    assert not compile_enabled(None) and not compile_enabled(False)
    assert not compile_enabled(dict(disable=True))


def test_train_shape_count():
    plan = _tiny_plan()
    keys = [(x.batch_size, x.shape.clip_len, x.shape.crop_size,
             x.sub_bn_splits) for x in plan.shape_iterations()]
    assert sorted(set(keys)) == sorted(TINY_SHAPES)
    assert train_shape_count(plan) == 5


def test_limit_is_the_shape_count_or_higher(dynamo_state):
    plan = _tiny_plan()
    for current, expected in ((2, 5), (8, 8)):
        compat.set_dynamo_config('recompile_limit', current)
        run = CompiledRun(plan)
        message = run.start()
        assert compat.dynamo_config('recompile_limit') == expected == run.limit
        assert message.startswith(
            f'torch.compile: dynamo recompile limit {expected} (was ')
        assert f"{current}) for the plan's 5 train shapes" in message
        assert run.stop().startswith('torch.compile: 0 graphs compiled; ')
        assert compat.dynamo_config('recompile_limit') == current


def test_stop_names_the_frames_that_fell_back(dynamo_state):
    compat.set_dynamo_config('recompile_limit', 1)
    run = CompiledRun(_tiny_plan())
    run.start()
    compat.set_dynamo_config('recompile_limit', 1)  # below the plan, to force a hit

    def per_value(x, n):
        return x + n

    fn = torch.compile(per_value, backend='eager', dynamic=False)
    for n in range(3):
        fn(torch.zeros(1), n)
    message = run.stop()
    assert run.graphs == 1 and len(run.fallbacks) == 1
    assert "'per_value' (" in run.fallbacks[0]
    assert message.startswith('torch.compile: 1 graphs compiled; frames that ')
    assert 'hit the recompile limit 5 and ran eagerly: ' in message
    assert run.fallbacks[0] in message
    assert compat.dynamo_config('recompile_limit') == 1


def _model_and_batches():
    """The tiny recognizer with sub-BN, its optim wrapper, one batch per
    train shape (random clips, as the speed benchmark's --project)."""
    from mmaction.registry import MODELS
    from mmaction.structures import ActionDataSample
    from mmaction.utils import register_all_modules
    register_all_modules()
    cfg = Config.fromfile(TINY)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.train()
    enable_sub_bn(model, 4)
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    gen = torch.Generator().manual_seed(0)
    batches = [dict(inputs=[torch.randint(0, 256, (1, 3, t, s, s),
                                          dtype=torch.uint8, generator=gen)
                            for _ in range(b)],
                    data_samples=[ActionDataSample().set_gt_label(i % 2)
                                  for i in range(b)])
               for b, t, s, _ in TINY_SHAPES]
    return model, wrapper, batches


def _eval_and_precise_bn(model, batches):
    with torch.no_grad():
        model.eval()
        model(**model.data_preprocessor(batches[-1], False), mode='tensor')
        model.train()
    update_precise_bn(model, batches[-1:], lambda b: model(
        **model.data_preprocessor(b, True), mode='tensor'))


def _symbolic_inputs_per_graph(step, inputs):
    """Compile ``step`` with a backend that records, per graph, whether
    any input size reached it symbolic; run it on ``inputs``."""
    graphs = []

    def backend(gm, example_inputs):
        # A dynamic graph takes its symbolic sizes as SymInt inputs.
        graphs.append(any(isinstance(x, torch.SymInt)
                          for x in example_inputs))
        return gm.forward

    compiled = torch.compile(step, backend=backend)
    for x in inputs:
        compiled(x)
    return graphs


def test_every_shape_compiles_a_static_graph(dynamo_state):
    """Left to dynamo, the second shape recompiles the frame with symbolic
    sizes (automatic dynamic shapes), which inductor's convolution lowering
    rejects on torch 2.13 (``ValueRangeError: Invalid ranges [0:-1]`` on
    the fight benchmark's ResNet3d); under CompiledRun each grid shape gets
    a static graph, and stop() gives dynamo its setting back."""
    conv = torch.nn.Conv3d(3, 4, 3, padding=1)
    bn = torch.nn.BatchNorm3d(4)
    enable_sub_bn(torch.nn.Sequential(conv, bn), 2)

    def step(x):
        return bn(conv(x)).sum()

    inputs = [torch.randn(b, 3, t, s, s)
              for b, t, s in ((4, 2, 8), (2, 4, 6), (8, 2, 4))]
    assert True in _symbolic_inputs_per_graph(step, inputs)
    torch.compiler.reset()
    run = CompiledRun(_tiny_plan())
    run.start()
    assert not torch._dynamo.config.automatic_dynamic_shapes
    assert _symbolic_inputs_per_graph(step, inputs) == [False] * 3
    run.stop()
    assert torch._dynamo.config.automatic_dynamic_shapes


@pytest.mark.slow
def test_every_shape_compiles_once_val_and_precise_bn_add_nothing(
        dynamo_state):
    """mmengine's compile of train_step under a limit of 3: left alone,
    frames fall back to eager (the model's forward at the 4th shape; the
    data preprocessor and the history buffer recompile at every batch);
    with CompiledRun and the frames outside dynamo the limit is the plan's 5
    shapes, every shape compiles once, a second pass over the shapes after
    validation and precise BN (eager) compiles nothing, and nothing falls
    back."""
    model, wrapper, batches = _model_and_batches()
    compat.set_dynamo_config('recompile_limit', 3)
    step = torch.compile(model.train_step, backend='eager')
    with compat.DynamoRecompileLimitWatch() as watch:
        for batch in batches:
            step(batch, wrapper)
    assert len(watch.fallbacks) >= 2

    torch.compiler.reset()
    model, wrapper, batches = _model_and_batches()
    run = CompiledRun(_tiny_plan())
    run.start()
    undo = run_outside_dynamo(model, MessageHub.get_current_instance(),
                              wrapper)
    assert compat.dynamo_config('recompile_limit') == 5
    step = torch.compile(model.train_step, backend='eager')
    losses = [step(batch, wrapper)['loss_cls'] for batch in batches]
    first = compat.dynamo_graph_count()
    _eval_and_precise_bn(model, batches)
    assert compat.dynamo_graph_count() == first
    again = [step(batch, wrapper)['loss_cls'] for batch in batches]
    assert compat.dynamo_graph_count() == first
    message = run.stop()
    assert run.fallbacks == [] and run.graphs > 0
    assert message.startswith(f'torch.compile: {run.graphs} graphs ')
    assert message.endswith('; no frame fell back to eager')
    assert all(torch.isfinite(x) for x in losses + again)
    undo()
    assert 'forward' not in vars(model.data_preprocessor)


class _GraphCounts(Hook):
    """dynamo's graph count after every train epoch and validation."""

    priority = 'LOWEST'

    def __init__(self):
        self.counts = []

    def after_train_epoch(self, runner):
        self.counts.append(('train', runner.epoch,
                            compat.dynamo_graph_count()))

    def after_val_epoch(self, runner, metrics=None):
        self.counts.append(('val', runner.epoch, compat.dynamo_graph_count()))


@pytest.mark.slow
def test_compiled_multigrid_run(tmp_path, dynamo_state, demo_data):
    """The tiny recipe with compile=dict(backend='eager') and the default
    limit (8): graphs are compiled only in the epochs that bring new shapes
    (0 and 3, the stages' first), not in repeated epochs, validation or
    precise BN (both after epochs 2 and 5); the hook logs the count and no
    fallback."""
    runner = tiny_runner(tmp_path, compile=dict(backend='eager'))
    counts = _GraphCounts()
    runner.register_hook(counts)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    runner.logger.addHandler(handler)
    start = compat.dynamo_graph_count()
    try:
        with compat.DynamoRecompileLimitWatch() as watch:
            runner.train()
    finally:
        runner.logger.removeHandler(handler)
    assert watch.fallbacks == []
    by_epoch = {e: n - start for kind, e, n in counts.counts
                if kind == 'train'}
    val = [n - start for kind, e, n in counts.counts if kind == 'val']
    assert by_epoch[0] > 0 and by_epoch[0] == by_epoch[1] == by_epoch[2]
    assert by_epoch[3] > by_epoch[2]
    assert by_epoch[3] == by_epoch[4] == by_epoch[5]
    assert val == [by_epoch[2], by_epoch[5]]
    total = by_epoch[5]
    logged = [r.getMessage() for r in records
              if 'torch.compile:' in r.getMessage()]
    assert "dynamo recompile limit 8 (was 8) for the plan's 5 train" in (
        ' '.join(logged))
    assert logged[-1].startswith(f'Multigrid: torch.compile: {total} ')
    assert logged[-1].endswith('; no frame fell back to eager')
    assert osp.isfile(osp.join(tmp_path, 'epoch_6.pth'))
