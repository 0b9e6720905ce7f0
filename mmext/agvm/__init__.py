"""AGVM (Xue et al., NeurIPS 2022): everything of the method in one package.

* :mod:`.statistics`: the math (d_i, mu_i, their EMA; paper Sec. 3);
* :mod:`.schedule`: when factors apply, are re-estimated, gradients clipped;
* :mod:`.constructor`: ``mmext.AGVMOptimWrapperConstructor``, param groups
  by module;
* :mod:`.exchange`: the gradients laid out by module and the two halves'
  statistics (DDP ranks or accumulated micro-batches);
* :mod:`.optim_wrapper`: ``mmext.AGVMOptimWrapper`` and
  ``mmext.AGVMAmpOptimWrapper``, their options, start checks and resume
  guard;
* :mod:`.diagnostic`: d_i of a model for two given halves, without training
  (``tools/analysis/agvm_variance.py``).

Importing it registers the three classes (mmext's registries list it).
"""
from .constructor import AGVMOptimWrapperConstructor
from .diagnostic import (VarianceMeasurement, measure_gradient_variance,
                         variance_by_batch_size)
from .optim_wrapper import (SCALAR_ESTIMATE, SCALAR_FACTOR, SCALAR_VARIANCE,
                            AGVMAmpOptimWrapper, AGVMOptimWrapper)

__all__ = [
    'AGVMOptimWrapper', 'AGVMAmpOptimWrapper', 'AGVMOptimWrapperConstructor',
    'SCALAR_FACTOR', 'SCALAR_VARIANCE', 'SCALAR_ESTIMATE',
    'measure_gradient_variance', 'variance_by_batch_size',
    'VarianceMeasurement'
]
