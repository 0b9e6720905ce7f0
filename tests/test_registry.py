import pytest
from mmengine.registry import DefaultScope

import mmext.registry as registry


def test_child_registries_of_mmengine():
    for name in registry.__all__:
        reg = getattr(registry, name)
        assert reg.scope == 'mmext'
        assert reg.parent is not None and reg.parent.scope == 'mmengine'
        assert reg.parent.children['mmext'] is reg
        assert reg._locations, f'{name} has no locations'


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
        registry.HOOKS._module_dict.pop('_ProbeHook')
