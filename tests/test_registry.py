"""mmext.registry: child registries of mmengine's, found from any scope."""
import re

import pytest
from mmengine.registry import DefaultScope

import mmext.registry as registry


def test_child_registries_of_mmengine():
    for name in registry.__all__:
        reg = getattr(registry, name)
        assert reg.scope == 'mmext'
        assert reg.parent is not None and reg.parent.scope == 'mmengine'
        assert reg.parent.children['mmext'] is reg


@pytest.mark.parametrize('scope, registry_name, cfg', [
    ('mmaction', 'HOOKS', "dict(type='mmext.MultigridHook')"),
    ('mmdet', 'OPTIM_WRAPPER_CONSTRUCTORS',
     "dict(type='mmext.AGVMOptimWrapperConstructor', optim_wrapper_cfg="
     "dict(optimizer=dict(type='SGD', lr=0.1)))"),
    ('mmseg', 'PARAM_SCHEDULERS',
     "dict(type='mmext.ExpWarmupLR', end=5, optimizer=__import__('torch')"
     ".optim.SGD([__import__('torch').zeros(1, requires_grad=True)], lr=1))"),
])
def test_fresh_process_builds_from_locations(scope, registry_name, cfg):
    """Nothing of mmext imported: the ``mmext.`` prefix and the registries'
    locations are enough to build from a toolbox scope."""
    import subprocess
    import sys
    code = (f'from mmengine.registry import DefaultScope\n'
            f'from {scope}.registry import {registry_name} as R\n'
            f'with DefaultScope.overwrite_default_scope({scope!r}):\n'
            f'    print(type(R.build({cfg})).__module__)\n')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip().startswith('mmext.')


def test_fresh_process_finds_runner_type():
    """``runner_type='mmext.Runner'`` works with the toolboxes' own
    tools/train.py, which build ``RUNNERS.build(cfg)`` in their scope."""
    import subprocess
    import sys
    code = ('from mmengine.registry import DefaultScope, RUNNERS\n'
            "for scope in ('mmdet', 'mmaction', 'mmseg'):\n"
            '    with DefaultScope.overwrite_default_scope(scope):\n'
            "        cls = RUNNERS.get('mmext.Runner')\n"
            '    print(scope, cls.__module__, cls.__name__)\n')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, check=True).stdout
    assert out.split('\n')[:3] == [
        f'{scope} mmext.runner Runner'
        for scope in ('mmdet', 'mmaction', 'mmseg')
    ]


@pytest.mark.parametrize('default_scope', ['mmdet', 'mmaction', 'mmseg'])
def test_mmext_prefix_resolves_from_any_scope(default_scope):
    """A config in another scope builds `type='mmext.X'` without imports."""
    import importlib
    toolbox_hooks = importlib.import_module(f'{default_scope}.registry').HOOKS

    @registry.HOOKS.register_module(name='_ProbeHook')
    class _ProbeHook:
        priority = 'NORMAL'

    try:
        with DefaultScope.overwrite_default_scope(default_scope):
            hook = toolbox_hooks.build(dict(type='mmext._ProbeHook'))
        assert isinstance(hook, _ProbeHook)
    finally:
        registry.HOOKS.module_dict.pop('_ProbeHook')


@pytest.mark.parametrize('cfg, error, meant', [
    (dict(type='MultigridHook'), KeyError, "mean 'mmext.MultigridHook'?"),
    (dict(type='mmext.MultigridHok'), KeyError, "'mmext.MultigridHook'?"),
    (dict(type='ExpWarmupLR'), KeyError, "mean 'mmext.ExpWarmupLR'?"),
    (dict(type='mmext.MultigridHook', epoch_factr=1.5), TypeError,
     "MultigridHook got an unexpected option 'epoch_factr': did you mean "),
])
def test_mmengines_builds_name_the_mmext_type_or_option_meant(
        cfg, error, meant):
    """As the toolboxes' own tools build, ``mmext`` imported (e.g. by
    ``custom_imports``): mmengine's root registries, a toolbox scope."""
    from mmengine.registry import HOOKS, PARAM_SCHEDULERS
    root = PARAM_SCHEDULERS if 'LR' in cfg['type'] else HOOKS
    with DefaultScope.overwrite_default_scope('mmaction'):
        with pytest.raises(error, match=re.escape(meant)):
            root.build(cfg)


def test_a_toolbox_type_misspelt_keeps_mmengines_error():
    from mmengine.registry import HOOKS
    with DefaultScope.overwrite_default_scope('mmdet'):
        with pytest.raises(KeyError, match='CheckpointHok is not') as err:
            HOOKS.build(dict(type='CheckpointHok'))
    assert 'mmext' not in str(err.value)
