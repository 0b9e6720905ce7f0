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
from mmengine.logging import HistoryBuffer
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
    assert compat.optim_wrapper_counts(wrapper) == (0, 2, -1)
    wrapper.initialize_count_status(model, 4, 10)
    assert compat.optim_wrapper_counts(wrapper) == (4, 2, 10)
    wrapper.update_params(model(torch.ones(1, 2)).sum())
    assert compat.optim_wrapper_counts(wrapper)[0] == 5


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


def test_train_loader_batch_size():
    from types import SimpleNamespace
    runner = SimpleNamespace(_train_dataloader=dict(batch_size=3))
    assert compat.train_loader_batch_size(runner) == 3
    runner._train_dataloader = torch.utils.data.DataLoader([0] * 8,
                                                           batch_size=5)
    assert compat.train_loader_batch_size(runner) == 5


def test_no_private_mmengine_use_outside_compat():
    """Underscore attributes of mmengine objects appear in compat only."""
    import pathlib
    import re
    root = pathlib.Path(compat.__file__).parent
    private = re.compile(
        r'\._(max_iters|max_epochs|inner_count|accumulative_counts|'
        r'max_counts|clip_grad|rand_another|schemes|locations|module_dict|'
        r'train_dataloader)'
        r'\b|MODULE2PACKAGE|_BatchNormXd')
    offenders = [
        f'{p.relative_to(root)}:{n}'
        for p in root.rglob('*.py') if p.name != 'compat.py'
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert offenders == []
