"""mmext.compat: config prefix, scoped checkpoint loading, mmengine private API.

Every private attribute mmext uses is exercised here on real mmengine objects,
so an mmengine release that renames one fails these tests loudly.
"""
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.logging import HistoryBuffer, MessageHub
from mmengine.optim import OptimWrapper
from mmengine.runner import load_checkpoint as mmengine_load_checkpoint

import mmengine
from mmext import compat


def test_checked_mmengine_version():
    assert mmengine.__version__ == compat.MMENGINE_CHECKED, (
        'mmext.compat was checked against mmengine '
        f'{compat.MMENGINE_CHECKED}; re-check its private API uses for '
        f'{mmengine.__version__}')


def test_mmext_configs_inherit_through_package_prefix(tmp_path):
    cfg_file = tmp_path / 'child.py'
    cfg_file.write_text(
        "_base_ = 'mmext::demo/recognizer3d_r18_demo-video.py'\n"
        'train_cfg = dict(max_epochs=3)\n')
    cfg = Config.fromfile(str(cfg_file))
    assert cfg.train_cfg.max_epochs == 3
    assert cfg.model.backbone.depth == 18
    assert cfg.default_scope == 'mmaction'


def test_import_leaves_torch_load_defaults_alone():
    code = ('import os, torch, mmext, mmext.agvm, mmext.multigrid\n'
            'from mmengine.runner import CheckpointLoader\n'
            "assert 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD' not in os.environ\n"
            "print(CheckpointLoader._schemes[''].__module__)\n")
    env = {k: v for k, v in __import__('os').environ.items()
           if k != 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'}
    out = subprocess.run([sys.executable, '-c', code], env=env, text=True,
                         capture_output=True, check=True).stdout
    assert out.strip() == 'mmengine.runner.checkpoint'


def _message_hub_checkpoint(path):
    buf = HistoryBuffer()
    buf.update(1.5)
    torch.save({'state_dict': {'w': torch.ones(1)},
                'message_hub': {'log_scalars': {'loss': buf}}}, path)


def test_checkpoint_loading_is_relaxed_only_in_the_context(tmp_path):
    path = tmp_path / 'ckpt.pth'
    _message_hub_checkpoint(path)
    with pytest.raises(Exception, match='[Ww]eights only load failed'):
        torch.load(path)
    model = nn.Module()
    model.w = nn.Parameter(torch.zeros(1))
    with compat.trusted_checkpoint_loading():
        ckpt = mmengine_load_checkpoint(model, str(path))
        # torch.load itself keeps torch's default inside the context too.
        with pytest.raises(Exception, match='[Ww]eights only load failed'):
            torch.load(path)
    assert ckpt['message_hub']['log_scalars']['loss'].current() == 1.5
    assert model.w.item() == 1.0
    with pytest.raises(Exception, match='[Ww]eights only load failed'):
        mmengine_load_checkpoint(model, str(path))


def test_train_loop_length():
    from mmengine.runner import EpochBasedTrainLoop

    class FakeRunner:
        pass

    loader = torch.utils.data.DataLoader([torch.zeros(1)] * 3)
    loop = EpochBasedTrainLoop(FakeRunner(), loader, max_epochs=2)
    assert (loop.max_epochs, loop.max_iters) == (2, 6)
    compat.set_train_loop_length(loop, 5, 17)
    assert (loop.max_epochs, loop.max_iters) == (5, 17)


def test_optim_wrapper_counts():
    model = nn.Linear(2, 1)
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1),
                           accumulative_counts=2)
    assert (wrapper.inner_count, compat.accumulative_counts(wrapper),
            compat.max_counts(wrapper)) == (0, 2, -1)
    wrapper.initialize_count_status(model, 4, 10)
    assert compat.max_counts(wrapper) == 10
    wrapper.update_params(model(torch.ones(1, 2)).sum())
    assert wrapper.inner_count == 5


def test_random_other_index():
    from mmengine.dataset import BaseDataset

    class Tiny(BaseDataset):

        def load_data_list(self):
            return [dict(x=i) for i in range(5)]

    assert 0 <= compat.random_other_index(Tiny(serialize_data=False)) < 5


def test_batch_norm_xd_type_is_what_reverted_sync_bn_becomes():
    from mmengine.model import revert_sync_batchnorm
    net = revert_sync_batchnorm(nn.Sequential(nn.SyncBatchNorm(3)))
    assert type(net[0]) is compat.batch_norm_xd_type()
    assert issubclass(compat.batch_norm_xd_type(),
                      nn.modules.batchnorm._BatchNorm)


def _real_runner(tmp_path, batch_size):
    from mmengine.dataset import BaseDataset
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Model(BaseModel):

        def __init__(self):
            super().__init__()
            self.w = nn.Linear(1, 1)

        def forward(self, inputs, mode='tensor', **kwargs):
            out = self.w(torch.stack(inputs))
            return dict(loss=out.sum()) if mode == 'loss' else out

    class Data(BaseDataset):

        def load_data_list(self):
            return [dict(inputs=torch.ones(1)) for _ in range(8)]

    return Runner(
        model=Model(), work_dir=str(tmp_path),
        train_dataloader=dict(
            dataset=Data(serialize_data=False),
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='pseudo_collate'), batch_size=batch_size),
        train_cfg=dict(by_epoch=True, max_epochs=1),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)))


def test_train_loader_batch_size(tmp_path):
    """Read from the config until the loader is built, then from it."""
    runner = _real_runner(tmp_path, 3)
    assert compat.train_loader_batch_size(runner) == 3
    runner.train()
    assert not isinstance(runner.train_dataloader, dict)
    assert compat.train_loader_batch_size(runner) == 3


def test_calling_runner_is_found_from_the_runners_own_calls(tmp_path):
    """``Runner.build_optim_wrapper`` calls the constructor and
    ``Runner.train`` ``initialize_count_status`` from their methods."""
    from mmengine.optim import DefaultOptimWrapperConstructor
    from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
    found = {}

    class Recorder(OptimWrapper):

        def initialize_count_status(self, *args):
            found['init'] = compat.calling_runner()
            super().initialize_count_status(*args)

    class Constructor(DefaultOptimWrapperConstructor):

        def __call__(self, model):
            found['build'] = compat.calling_runner()
            return super().__call__(model)

    OPTIM_WRAPPER_CONSTRUCTORS.register_module(
        name='CompatRecordingConstructor', module=Constructor, force=True)
    runner = _real_runner(tmp_path, 4)
    runner.optim_wrapper = dict(
        type=Recorder, constructor='CompatRecordingConstructor',
        optimizer=dict(type='SGD', lr=0.1))
    runner.train()
    assert found == dict(build=runner, init=runner)
    assert compat.calling_runner() is None


def test_drop_logged_scalar():
    from mmengine.logging import MessageHub
    hub = MessageHub.get_instance('compat_drop_logged_scalar')
    hub.update_scalar('train/grad_norm', 2.0)
    compat.drop_logged_scalar(hub, 'train/grad_norm')
    assert 'train/grad_norm' not in hub.log_scalars
    compat.drop_logged_scalar(hub, 'train/grad_norm')  # absent: no error


def _clipped_grad(wrapper, model):
    wrapper.update_params((model(torch.ones(1, 2)) * 100).sum())
    return model.weight.detach().clone()


def test_grad_clipping_off():
    torch.manual_seed(0)
    model = nn.Linear(2, 1, bias=False)
    start = model.weight.detach().clone()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=1.0),
                           clip_grad=dict(max_norm=1.0))
    clipped = _clipped_grad(wrapper, model) - start
    assert clipped.norm().item() == pytest.approx(1.0)
    with compat.grad_clipping_off(wrapper) as was_on:
        before = model.weight.detach().clone()
        unclipped = _clipped_grad(wrapper, model) - before
    assert was_on and unclipped.norm().item() == pytest.approx(
        100 * 2**0.5)
    assert wrapper.clip_grad_kwargs == dict(max_norm=1.0)


def test_reset_to_initial_values():
    from mmengine.optim.scheduler import LinearLR
    optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.2)
    group = optimizer.param_groups[0]
    scheduler = LinearLR(optimizer, start_factor=0.1, end=4)
    assert group['lr'] == pytest.approx(0.02)
    assert group['initial_lr'] == 0.2
    compat.reset_to_initial_values(optimizer.param_groups)
    assert group['lr'] == 0.2
    assert scheduler.end == 4


def test_scheduler_inf_is_the_default_end():
    from mmengine.optim.scheduler import ConstantLR
    optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.2)
    assert ConstantLR(optimizer).end == compat.SCHEDULER_INF


def test_norm_base_types():
    for layer in (nn.BatchNorm1d(2), nn.BatchNorm3d(2), nn.SyncBatchNorm(2)):
        assert isinstance(layer, compat.BatchNormBase)
    assert isinstance(nn.InstanceNorm2d(2), compat.InstanceNormBase)
    assert not isinstance(nn.InstanceNorm2d(2), compat.BatchNormBase)


def test_shadow_tensor_reads_value_and_keeps_the_registered_tensor():
    layer = nn.Linear(3, 2)
    layer.register_buffer('table', torch.arange(4.))
    weight, table = layer.weight, layer.table
    doubled = weight * 2
    compat.shadow_tensor(layer, 'weight', doubled)
    compat.shadow_tensor(layer, 'table', torch.zeros(2))
    assert layer.weight is doubled and layer.table.tolist() == [0, 0]
    assert compat.registered_tensor(layer, 'weight') is weight
    assert compat.registered_tensor(layer, 'table') is table
    with pytest.raises(KeyError):
        compat.registered_tensor(layer, 'missing')
    # The registered tensors stay what the module saves, moves and trains.
    assert dict(layer.named_parameters())['weight'] is weight
    assert list(layer.state_dict()) == ['weight', 'bias', 'table']
    assert layer.state_dict()['table'].tolist() == [0, 1, 2, 3]
    layer.to(torch.float64)
    assert dict(layer.named_parameters())['weight'].dtype == torch.float64
    layer.to(torch.float32)
    weight = dict(layer.named_parameters())['weight']
    compat.shadow_tensor(layer, 'weight', weight * 2)
    layer(torch.ones(1, 3)).sum().backward()
    assert weight.grad.tolist() == [[2., 2., 2.], [2., 2., 2.]]
    compat.clear_shadow(layer, 'weight')
    compat.clear_shadow(layer, 'table')
    compat.clear_shadow(layer, 'table')
    assert layer.weight is weight and layer.table.tolist() == [0, 1, 2, 3]


def test_dynamo_recompile_limit_graph_count_and_fallback_watch():
    """A function compiled once per value of a guarded int: 2 graphs under
    a limit of 2, then dynamo gives up on it, which the watch records."""
    import torch._dynamo

    def scaled(x, n):
        return x * n

    previous = compat.dynamo_config('recompile_limit')
    assert previous == torch._dynamo.config.recompile_limit
    torch.compiler.reset()
    try:
        compat.set_dynamo_config('recompile_limit', 2)
        assert torch._dynamo.config.recompile_limit == 2
        fn = torch.compile(scaled, backend='eager', dynamic=False)
        before = compat.dynamo_graph_count()
        with compat.DynamoRecompileLimitWatch() as watch:
            outputs = [fn(torch.ones(2), n) for n in range(4)]
        assert compat.dynamo_graph_count() - before == 2
        assert [o.tolist() for o in outputs] == [[n, n] for n in range(4)]
        assert len(watch.fallbacks) == 1
        assert watch.fallbacks[0].startswith("recompile_limit: 'scaled' (")
        # Outside the context nothing is collected any more.
        fn(torch.ones(2), 7)
        assert len(watch.fallbacks) == 1
    finally:
        compat.set_dynamo_config('recompile_limit', previous)
        torch.compiler.reset()


# mmengine internals with public-looking names: attributes and keys that
# mmengine documents nowhere, used by mmext through compat only (the train
# loop's validation intervals among them).
_INTERNAL_NAMES = ('clip_grad_kwargs', 'log_scalars', 'MODULE2PACKAGE',
                   'INF', 'dynamic_milestones', 'dynamic_intervals')


def _private_uses(path):
    """``obj._name`` (``self``/``cls``/``super()`` excepted), imports of
    ``_names`` or from ``_modules`` of other packages, and
    :data:`_INTERNAL_NAMES` in a file."""
    import ast
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            value = node.value
            if node.attr in _INTERNAL_NAMES:
                found.append((node.lineno, ast.unparse(node)))
            elif (node.attr.startswith('_') and not node.attr.endswith('__')
                  and not (isinstance(value, ast.Name)
                           and value.id in ('self', 'cls'))
                  and not (isinstance(value, ast.Call)
                           and getattr(value.func, 'id', '') == 'super')):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            private = any(part.startswith('_')
                          for part in node.module.split('.'))
            found += [(node.lineno, f'import {a.name}') for a in node.names
                      if private or a.name.startswith('_')
                      or a.name in _INTERNAL_NAMES]
        elif isinstance(node, ast.Constant) and isinstance(
                node.value, str) and node.value.startswith('initial_'):
            found.append((node.lineno, repr(node.value)))
    return found


def test_private_use_scan_finds_each_kind(tmp_path):
    path = tmp_path / 'offender.py'
    path.write_text(
        'from mmengine.model.utils import _BatchNormXd\n'
        'from mmengine.optim.scheduler.param_scheduler import INF\n'
        'def f(runner, wrapper, group, self):\n'
        '    runner._train_dataloader\n'
        '    wrapper.clip_grad_kwargs = {}\n'
        "    group['initial_lr']\n"
        '    self._fine, super()._fine\n'
        '    runner.train_loop.dynamic_milestones\n'
        'from torch._dynamo import config\n')
    assert sorted(line for line, _ in _private_uses(path)) == [
        1, 2, 4, 5, 6, 8, 9]


def test_no_private_api_use_outside_compat():
    """The package, its tools and the maintainers' scripts use private
    attributes of other objects, private names of other packages and
    mmengine's undocumented internals in compat only."""
    import pathlib
    root = pathlib.Path(compat.__file__).parent.parent
    scripts = [*(root / 'mmext').rglob('*.py'), *(root / 'tools').rglob('*.py'),
               *(root / '.dev_scripts').glob('*.py')]
    offenders = [
        f'{p.relative_to(root)}:{line}: {text}' for p in scripts
        if p.name != 'compat.py' for line, text in _private_uses(p)
    ]
    assert offenders == []
