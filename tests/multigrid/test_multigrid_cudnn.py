"""mmext.multigrid.hook.cudnn_autotuner: a CUDA multigrid run autotunes
cuDNN for its few grid shapes unless the config says otherwise; the start
log says which."""
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config

from mmext.multigrid import hook as hook_module


@pytest.mark.parametrize('text,on,why', [
    ('', True, 'for the grid shapes; env_cfg = dict(cudnn_benchmark=False)'),
    ('env_cfg = dict(cudnn_benchmark=False)', False,
     'env_cfg.cudnn_benchmark in '),
    ('env_cfg = dict(cudnn_benchmark=True)', True,
     'env_cfg.cudnn_benchmark=True'),
    ('randomness = dict(deterministic=True)', False,
     'randomness.deterministic=True'),
])
def test_autotuner_unless_the_config_file_says_otherwise(tmp_path, text, on,
                                                         why):
    # mmaction2's default_runtime sets cudnn_benchmark=False for every
    # recipe: inherited, it does not count as the config's choice.
    base = tmp_path / 'base.py'
    base.write_text('env_cfg = dict(cudnn_benchmark=False)\n')
    config = tmp_path / 'config.py'
    config.write_text(f"_base_ = './base.py'\n{text}\n")
    decision = hook_module.cudnn_autotuner(Config.fromfile(str(config)))
    assert decision[0] is on and decision[1].startswith(why)
    # A config built in code names nothing: on.
    assert hook_module.cudnn_autotuner(Config(dict(env_cfg={})))[0] is True


@pytest.mark.parametrize('device,logged', [
    ('cuda', ['cuDNN autotuner on: for the grid shapes; ']), ('cpu', [])])
def test_prepare_run_sets_and_logs_it_on_cuda_only(monkeypatch, device,
                                                   logged):
    param = SimpleNamespace(device=torch.device(device))
    runner = SimpleNamespace(
        model=SimpleNamespace(parameters=lambda: iter([param])),
        cfg=Config(dict(env_cfg=dict(cudnn_benchmark=False))))
    messages = []
    monkeypatch.setattr(hook_module, 'print_log',
                        lambda message, logger: messages.append(message))
    monkeypatch.setattr(torch.backends.cudnn, 'benchmark', False)
    hook_module.prepare_run(runner, keep_cpu_memory=False)
    assert [m[:len(p)] for m, p in zip(messages, logged)] == logged
    assert len(messages) == len(logged)
    assert torch.backends.cudnn.benchmark is (device == 'cuda')
