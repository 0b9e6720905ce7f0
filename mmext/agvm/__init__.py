"""AGVM (Xue et al., NeurIPS 2022): everything of the method in one package.

Pure math, no runner:

* :mod:`.statistics`: gradient variance, modulation factors, their EMA;
* :mod:`.schedule`: when factors apply, when they are re-estimated, when
  gradients are clipped;
* :mod:`.modules`: which module each parameter belongs to;
* :mod:`.layout`: the gradients module by module in one flat buffer.

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
from .exchange import AccumulationHalves, DistributedHalves
from .layout import GradientLayout, adam_precondition
from .modules import (OTHERS, assign_parameters, default_module_names,
                      resolve_module_names)
from .optim_wrapper import (SCALAR_ESTIMATE, SCALAR_FACTOR, SCALAR_VARIANCE,
                            AGVMAmpOptimWrapper, AGVMOptimWrapper)
from .schedule import AGVMSchedule
from .statistics import (DEFAULT_RATIO_RANGE, HalfStatistics, ModulationEMA,
                         check_ratio_range, gradient_variance,
                         half_dot_from_norms, modulation_factors, split_ranks)

__all__ = [
    'OTHERS', 'assign_parameters', 'default_module_names',
    'resolve_module_names', 'AGVMSchedule', 'DEFAULT_RATIO_RANGE',
    'check_ratio_range', 'HalfStatistics', 'ModulationEMA',
    'gradient_variance', 'half_dot_from_norms', 'modulation_factors',
    'split_ranks', 'GradientLayout', 'adam_precondition',
    'DistributedHalves', 'AccumulationHalves', 'AGVMOptimWrapper',
    'AGVMAmpOptimWrapper', 'SCALAR_FACTOR', 'SCALAR_VARIANCE',
    'SCALAR_ESTIMATE', 'AGVMOptimWrapperConstructor',
    'split_groups_by_module', 'VarianceMeasurement',
    'measure_gradient_variance', 'mmengine_loss', 'module_layout', 'summarize',
    'variance_by_batch_size'
]
