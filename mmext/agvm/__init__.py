"""AGVM (Xue et al., NeurIPS 2022): everything of the method in one package.

Pure math, no runner:

* :mod:`.statistics`: gradient variance, modulation factors, their EMA;
* :mod:`.schedule`: when factors apply and when they are re-estimated;
* :mod:`.modules`: which module each parameter belongs to.

Glue to mmengine and torch.distributed:

* :mod:`.exchange`: the two halves' statistics (DDP ranks or accumulated
  micro-batches);
* :mod:`.optim_wrapper`: ``mmext.AGVMOptimWrapper`` / ``AGVMAmpOptimWrapper``;
* :mod:`.constructor`: ``mmext.AGVMOptimWrapperConstructor``;
* :mod:`.diagnostic`: d_i of a model for two given halves, without training
  (``tools/analysis/agvm_variance.py``).
"""
from .constructor import AGVMOptimWrapperConstructor, split_groups_by_module
from .diagnostic import (VarianceMeasurement, measure_gradient_variance,
                         mmengine_loss, module_layout, summarize,
                         variance_by_batch_size)
from .exchange import AccumulationHalves, DistributedHalves, GradientLayout
from .modules import (OTHERS, assign_parameters, default_module_names,
                      resolve_module_names)
from .optim_wrapper import AGVMAmpOptimWrapper, AGVMOptimWrapper
from .schedule import AGVMSchedule
from .statistics import (HalfStatistics, ModulationEMA, gradient_variance,
                         half_dot_from_norms, modulation_factors, split_ranks)

__all__ = [
    'OTHERS', 'assign_parameters', 'default_module_names',
    'resolve_module_names', 'AGVMSchedule', 'HalfStatistics',
    'ModulationEMA', 'gradient_variance', 'half_dot_from_norms',
    'modulation_factors', 'split_ranks', 'GradientLayout',
    'DistributedHalves', 'AccumulationHalves', 'AGVMOptimWrapper',
    'AGVMAmpOptimWrapper', 'AGVMOptimWrapperConstructor',
    'split_groups_by_module', 'VarianceMeasurement',
    'measure_gradient_variance', 'mmengine_loss', 'module_layout', 'summarize',
    'variance_by_batch_size'
]
