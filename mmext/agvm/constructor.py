"""Optimizer wrapper constructor that groups parameters by AGVM module."""
from typing import Dict, List

from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from mmengine.registry import OPTIMIZERS
from torch import nn

from mmext.registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS
from .modules import assign_parameters, resolve_module_names
from .optim_wrapper import AGVMOptimWrapper

__all__ = ['AGVMOptimWrapperConstructor', 'split_groups_by_module']


def split_groups_by_module(groups: List[Dict],
                           owners: Dict[int, str]) -> List[Dict]:
    """Split param groups so each holds parameters of one module only.

    Each resulting group keeps its options (lr, weight decay, ...) and gets
    ``'agvm_module'``: the module name from ``owners`` or ``'others'``.
    Parameters not in ``owners`` (frozen) are dropped, as mmengine does with
    ``paramwise_cfg``.

    Args:
        groups (list[dict]): Param groups (``'params'`` plus options).
        owners (dict[int, str]): ``id(param)`` to module name.

    Returns:
        list[dict]: The tagged groups, in input order, empty ones left out.
    """
    tagged = []
    for group in groups:
        by_module: Dict[str, list] = {}
        for param in group['params']:
            if id(param) in owners:
                by_module.setdefault(owners[id(param)], []).append(param)
        for module, params in by_module.items():
            tagged.append(dict(group, params=params, agvm_module=module))
    return tagged


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class AGVMOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """Build the optimizer with param groups tagged by AGVM module.

    Reads ``module_names`` from the optim wrapper config (default: the
    model's top-level children with trainable parameters), validates it
    before training, assigns every trainable parameter to a listed module or
    to ``'others'`` (factor 1, never dropped), applies ``paramwise_cfg`` as
    :class:`DefaultOptimWrapperConstructor` does, and splits the groups so
    that each belongs to exactly one module. The wrapper type defaults to
    ``mmext.AGVMOptimWrapper``.

    Args:
        optim_wrapper_cfg (dict): The ``optim_wrapper`` config.
        paramwise_cfg (dict, optional): As in mmengine.

    Raises:
        ValueError: From :func:`mmext.agvm.resolve_module_names` when called
            on a model with a wrong ``module_names``, or if
            ``optim_wrapper.type`` is not an AGVM wrapper.
    """

    def __call__(self, model: nn.Module) -> OptimWrapper:
        model = getattr(model, 'module', model)
        names = resolve_module_names(
            model, self.optim_wrapper_cfg.get('module_names'))
        owners = assign_parameters(model, names)
        if self.paramwise_cfg:
            groups: List[Dict] = []
            self.add_params(groups, model)
        else:
            groups = [dict(params=list(model.parameters()))]
        optimizer_cfg = self.optimizer_cfg.copy()
        optimizer_cfg['params'] = split_groups_by_module(groups, owners)
        optimizer = OPTIMIZERS.build(optimizer_cfg)
        wrapper_cfg = self.optim_wrapper_cfg.copy()
        wrapper_cfg.setdefault('type', 'mmext.AGVMOptimWrapper')
        wrapper_type = wrapper_cfg['type']
        if isinstance(wrapper_type, str):
            wrapper_type = OPTIM_WRAPPERS.get(wrapper_type)
        if not (isinstance(wrapper_type, type)
                and issubclass(wrapper_type, AGVMOptimWrapper)):
            raise ValueError(
                f"AGVMOptimWrapperConstructor builds AGVM wrappers only, got "
                f"optim_wrapper.type={wrapper_cfg['type']!r}; set "
                f"type='mmext.AGVMOptimWrapper' (or drop the constructor for "
                f'a plain optimizer wrapper)')
        wrapper_cfg['module_names'] = names
        return OPTIM_WRAPPERS.build(
            wrapper_cfg, default_args=dict(optimizer=optimizer))
