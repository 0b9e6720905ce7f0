import os

import torch
from mmengine.config import Config
from mmengine.logging import HistoryBuffer

import mmext  # noqa: F401


def test_mmext_configs_inherit_through_package_prefix(tmp_path):
    cfg_file = tmp_path / 'child.py'
    cfg_file.write_text(
        "_base_ = 'mmext::demo/recognizer3d_r18_demo-video.py'\n"
        'train_cfg = dict(max_epochs=3)\n')
    cfg = Config.fromfile(str(cfg_file))
    assert cfg.train_cfg.max_epochs == 3
    assert cfg.model.backbone.depth == 18
    assert cfg.default_scope == 'mmaction'


def test_mmengine_state_loads_with_torch_default(tmp_path):
    """`torch.load` without `weights_only` reads mmengine's message hub again.

    torch >= 2.6 defaults to weights_only=True and refuses HistoryBuffer.
    """
    buf = HistoryBuffer()
    buf.update(1.5)
    path = tmp_path / 'ckpt.pth'
    torch.save({'message_hub': {'log_scalars': {'loss': buf}}}, path)
    loaded = torch.load(path)
    assert loaded['message_hub']['log_scalars']['loss'].current() == 1.5
    assert os.environ['TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'] == '1'
