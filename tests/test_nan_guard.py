"""mmext.nan_guard: NaNGuardHook stops (or skips the step) at a non-finite
loss or gradient, naming the iteration, the loss terms and a hint; the
poisoned step is never taken. BCCD's zero-size box is named."""
import logging
import math
import os.path as osp

import pytest
import torch
from helpers import ToyRegressionData, logged_errors, toy_loader
from mmengine.config import Config
from mmengine.model import BaseModel
from mmengine.registry import DATASETS, MODELS
from torch import nn

from bench_utils import build_runner
from mmext.nan_guard import NaNGuardHook, degenerate_boxes


class _ScaledGrad(torch.autograd.Function):
    """Identity forward, the gradient times ``factor`` backward."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


@MODELS.register_module(force=True)
class GuardToyModel(BaseModel):
    """``inputs`` of index ``poison`` is NaN (a NaN loss); with
    ``nan_grad`` the head gets a gradient times ``grad_factor`` (NaN by
    default) at that index only; with ``nan_const`` only the constant loss
    term is NaN there (a NaN loss, finite gradients)."""

    def __init__(self, nan_grad=False, grad_factor=math.nan,
                 nan_const=False):
        super().__init__()
        self.grad_factor, self.nan_const = grad_factor, nan_const
        torch.manual_seed(0)
        self.backbone = nn.Linear(2, 4)
        self.head = nn.Linear(4, 1)
        self.nan_grad = nan_grad

    def forward(self, inputs, labels=None, sample_idx=None, mode='tensor'):
        x = torch.stack(inputs)
        poisoned = 5 in sample_idx
        if poisoned and not (self.nan_grad or self.nan_const):
            x = x * math.nan
        out = self.head(torch.tanh(self.backbone(x)))
        if poisoned and self.nan_grad:
            out = _ScaledGrad.apply(out, self.grad_factor)
        if mode == 'loss':
            return dict(loss_mse=((out - torch.stack(labels))**2).mean(),
                        loss_const=out.new_tensor(
                            math.nan if poisoned and self.nan_const else 0.5))
        return out


@DATASETS.register_module(force=True)
class GuardToyData(ToyRegressionData):
    """8 samples; ``GuardToyModel`` poisons sample 5."""

    size = 8


def _runner(tmp_path, action='stop', counts=1, nan_grad=False,
            check_grads=True, **model):
    """8 single-sample iterations, the one of sample 5 poisoned."""
    cfg = Config(dict(
        model=dict(type='GuardToyModel', nan_grad=nan_grad, **model),
        work_dir=str(tmp_path),
        train_dataloader=toy_loader('GuardToyData', 1),
        train_cfg=dict(by_epoch=True, max_epochs=1),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9),
                           accumulative_counts=counts),
        custom_hooks=[dict(type='mmext.NaNGuardHook', action=action,
                           check_grads=check_grads)],
        default_hooks=dict(checkpoint=dict(type='CheckpointHook',
                                           interval=10)),
        launcher='none', env_cfg=dict(dist_cfg=dict(backend='gloo'))))
    return build_runner(cfg)


class _Weights:
    """Records a copy of the weights before every iteration."""

    def __init__(self, runner):
        from mmengine.hooks import Hook
        self.before = []
        outer = self

        class Recorder(Hook):
            def before_train_iter(self, runner, batch_idx, data_batch=None):
                outer.before.append([p.detach().clone()
                                     for p in runner.model.parameters()])

        runner.register_hook(Recorder(), priority='LOWEST')


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_stop_at_a_nan_loss_before_its_step(tmp_path):
    runner = _runner(tmp_path)
    weights = _Weights(runner)
    with pytest.raises(FloatingPointError) as err:
        runner.train()
    message = str(err.value)
    assert message.startswith("Non-finite loss terms ['loss', 'loss_mse'] ")
    assert 'gradients of 4 parameters (backbone.weight, ' in message
    assert 'head.weight, head.bias) at iteration 6' in message
    assert '(its step was not taken)' in message
    assert 'Loss terms: loss=nan, loss_mse=nan, loss_const=0.5.' in message
    assert message.endswith('clip gradients (optim_wrapper.clip_grad).')
    # In the run's log file too (the console has the traceback).
    [line] = logged_errors(tmp_path)
    assert 'FloatingPointError: Non-finite loss terms' in line
    # The weights are those before the poisoned iteration.
    now = [p.detach() for p in runner.model.parameters()]
    assert _same(now, weights.before[5])
    assert all(torch.isfinite(p).all() for p in now)


def test_skip_drops_only_the_poisoned_step(tmp_path):
    runner = _runner(tmp_path, action='skip')
    weights = _Weights(runner)
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, NaNGuardHook))
    assert hook.skipped == 1 and runner.iter == 8
    # Iteration 6 changed nothing, the others did; all finite.
    assert _same(weights.before[5], weights.before[6])
    assert not _same(weights.before[4], weights.before[5])
    assert not _same(weights.before[6], weights.before[7])
    assert all(torch.isfinite(p).all() for p in runner.model.parameters())


def test_a_nan_gradient_with_a_finite_loss_names_the_parameters(tmp_path):
    runner = _runner(tmp_path, nan_grad=True)
    with pytest.raises(FloatingPointError) as err:
        runner.train()
    assert str(err.value).startswith(
        'Non-finite gradients of 4 parameters (backbone.weight, ')
    assert 'at iteration 6 (its step was not taken)' in str(err.value)


def test_accumulation_stops_at_the_poisoned_micro_batch(tmp_path):
    """K=4: sample 5 is the second micro-batch of the window 4-7, so the run
    stops at it, before the window's step."""
    runner = _runner(tmp_path, counts=4)
    with pytest.raises(FloatingPointError) as err:
        runner.train()
    assert ("at iteration 6 (its window's step will not be taken)"
            in str(err.value))


def test_a_gradient_norm_overflow_is_named_as_such(tmp_path):
    """Gradients x 1e30: each finite in float32, their total norm inf."""
    runner = _runner(tmp_path, nan_grad=True, grad_factor=1e30)
    with pytest.raises(FloatingPointError) as err:
        runner.train()
    assert str(err.value).startswith(
        'Non-finite gradient norm (each gradient finite) at ')
    assert 'at iteration 6' in str(err.value)


def test_one_process_window_names_the_earlier_micro_batch(tmp_path):
    """K=4 in one process, a NaN loss with finite gradients: the window's
    step at iteration 8 is dropped for sample 5's loss (iteration 6), not
    for "another rank"."""
    runner = _runner(tmp_path, action='skip', counts=4, nan_const=True)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    runner.logger.addHandler(handler)
    try:
        runner.train()
    finally:
        runner.logger.removeHandler(handler)
    lines = [r.getMessage() for r in records
             if r.getMessage().startswith('Non-finite')]
    dropped = [line for line in lines if 'at iteration 8' in line]
    assert len(lines) == 2 and len(dropped) == 1
    assert dropped[0].startswith('Non-finite loss of an earlier micro-batch')
    assert 'of the window at iteration 8 (its step was not taken)' in (
        dropped[0])
    assert dropped[0].endswith('Skipped (1 so far).')


def test_the_guard_leaves_the_wrappers_as_it_found_them(tmp_path):
    runner = _runner(tmp_path, action='skip')
    runner.train()
    assert 'update_params' not in vars(runner.optim_wrapper)
    # Its step pre-hook is gone: a NaN step now goes through.
    param = next(runner.model.parameters())
    param.grad = torch.full_like(param, math.nan)
    runner.optim_wrapper.optimizer.step()
    assert torch.isnan(param).all()


def _two_ranks_worker(rank, world_size, path):
    """Rank 0's loss is NaN, rank 1's finite: both drop the step."""
    from types import SimpleNamespace

    from mmengine.optim import OptimWrapper
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    runner = SimpleNamespace(model=model, optim_wrapper=wrapper, iter=0)
    hook = NaNGuardHook(action='skip')
    hook.before_train(runner)
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(torch.ones(1, 2)).sum() * (math.nan if rank == 0 else 1.0)
    wrapper.update_params(loss)
    hook.after_train_iter(runner, 0, None, dict(loss=loss.detach()))
    torch.save(dict(unchanged=_same(before, list(model.parameters())),
                    skipped=hook.skipped), f'{path}.{rank}')


def test_ranks_agree_to_drop_a_step_one_of_them_poisoned(tmp_path):
    from bench_utils import run_processes
    path = str(tmp_path / 'result')
    run_processes(_two_ranks_worker, 2, (path, ), timeout=300)
    results = [torch.load(f'{path}.{r}') for r in range(2)]
    assert results == [dict(unchanged=True, skipped=1)] * 2


def test_bad_action():
    with pytest.raises(ValueError, match=r"action='halt': expected one of "
                       r"\['stop', 'skip'\]"):
        NaNGuardHook(action='halt')


def test_degenerate_boxes_in_original_pixels():
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData
    sample = DetDataSample(metainfo=dict(img_path='a.jpg',
                                         scale_factor=(0.5, 0.5)))
    sample.gt_instances = InstanceData(
        bboxes=torch.tensor([[10., 10., 20., 30.], [90.5, 164.5, 90.5,
                                                    170.]]),
        labels=torch.tensor([1, 0]))
    assert degenerate_boxes(dict(data_samples=[sample])) == [
        'a.jpg: box [181.0, 329.0, 181.0, 340.0] (label 0)']
    assert degenerate_boxes(dict(inputs=[])) == []


def test_bccd_zero_size_box_is_named(tmp_path, shared_data):
    """BCCD's BloodImage_00343 holds an RBC box of zero size (181, 329,
    181, 329 in its XML; mmdet's VOC reader makes it 180, 328, ...): the
    detector's loss_bbox is NaN (its gradients stay finite) and the guard
    stops at the first iteration, naming the image and the box."""
    (tmp_path / 'one.txt').write_text('BloodImage_00343\n')
    demo = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))),
                    'configs', 'demo', 'faster-rcnn_r18_fpn_demo-det.py')
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', with_bbox=True),
        dict(type='Resize', scale=(160, 120), keep_ratio=True),
        dict(type='PackDetInputs')
    ]
    cfg = Config.fromfile(demo)
    cfg.merge_from_dict(dict(
        model=dict(roi_head=dict(bbox_head=dict(num_classes=3))),
        train_dataloader=dict(
            batch_size=1, num_workers=0, persistent_workers=False,
            dataset=dict(
                _delete_=True, type='XMLDataset',
                data_root=osp.join(shared_data, 'bccd', 'BCCD') + '/',
                ann_file=str(tmp_path / 'one.txt'),
                data_prefix=dict(sub_data_root=''),
                metainfo=dict(classes=('RBC', 'WBC', 'Platelets')),
                pipeline=pipeline)),
        work_dir=str(tmp_path / 'work'), launcher='none',
        custom_hooks=[dict(type='mmext.NaNGuardHook')]))
    cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    cfg.param_scheduler = []
    with pytest.raises(FloatingPointError) as err:
        build_runner(cfg).train()
    message = str(err.value)
    assert message.startswith("Non-finite loss terms ['loss', 'loss_bbox'] "
                              'at iteration 1')
    assert 'Boxes of zero size: ' in message
    assert 'BloodImage_00343.jpg: box [180.0, 328.0, 180.0, 328.0]' in message
    assert '(label 0). Filter them' in message
    assert message.endswith("min_gt_bbox_wh=(1, 1)).")


def test_collectives_take_the_model_device_without_gradients(monkeypatch):
    """A rank whose step has no gradient and whose outputs hold no tensor
    still all-reduces on the model's device (NCCL takes CUDA tensors only):
    checked with the model on the ``meta`` device, which a CPU default
    would not match."""
    from types import SimpleNamespace

    import mmext.nan_guard as guard

    class Reduced(Exception):
        """Stops at the collective (a meta tensor has no value to read)."""

    def all_reduce(tensor, op):
        raise Reduced(tensor.device)

    monkeypatch.setattr(guard, 'get_world_size', lambda: 2)
    monkeypatch.setattr(guard, 'all_reduce', all_reduce)
    model = nn.Linear(2, 1, device='meta')
    hook = NaNGuardHook()
    with pytest.raises(Reduced) as pre_step:
        hook._pre_step(torch.optim.SGD(model.parameters(), lr=0.1), (), {})
    with pytest.raises(Reduced) as after_iter:
        hook.after_train_iter(SimpleNamespace(model=model, iter=0), 0,
                              outputs=dict(loss=1.0))
    assert pre_step.value.args == after_iter.value.args == (
        torch.device('meta'), )
