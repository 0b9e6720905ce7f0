"""AGVM math: gradient variance, modulation factors, EMA and schedule.

No runner code here; :mod:`mmext.engine.optimizers` wires it into mmengine.
"""
from .modules import (OTHERS, assign_parameters, default_module_names,
                      resolve_module_names)
from .schedule import AGVMSchedule
from .statistics import (HalfStatistics, ModulationEMA, gradient_variance,
                         half_dot_from_norms, modulation_factors, split_ranks)

__all__ = [
    'OTHERS', 'assign_parameters', 'default_module_names',
    'resolve_module_names', 'AGVMSchedule', 'HalfStatistics',
    'ModulationEMA', 'gradient_variance', 'half_dot_from_norms',
    'modulation_factors', 'split_ranks'
]
