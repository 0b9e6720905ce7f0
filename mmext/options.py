"""The rules of option values both methods share, in pure Python: the
predicates of option checks, a config's type name, the LR rules."""
import math
import numbers

__all__ = ['is_number', 'is_int', 'check_option', 'type_name', 'LR_RULES']

# The LR factor as a function of the batch ratio (a batch over the batch the
# LR was tuned for): linear for SGD (Goyal et al., "Accurate, Large Minibatch
# SGD", 2017; mmengine's only rule, the multigrid paper's), square root for
# Adam-family optimizers and LAMB (timm's train.py, ``--lr-base-scale``).
LR_RULES = {'linear': float, 'sqrt': math.sqrt}


def is_number(value) -> bool:
    """A real number, not a bool (``True`` is an int in Python)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value, minimum=None) -> bool:
    """An integer, not a bool, and ``>= minimum`` if given."""
    return (isinstance(value, numbers.Integral)
            and not isinstance(value, bool)
            and (minimum is None or value >= minimum))


def check_option(ok: bool, name: str, value, expected: str) -> None:
    """Raise ``ValueError`` unless ``ok``: option ``name`` must be
    ``expected``."""
    if not ok:
        raise ValueError(f'{name} must be {expected}, got {value!r}')


def type_name(kind) -> str:
    """The class name of a config's ``type`` (a class, or its registered
    name with or without a scope, ``'mmaction.SampleFrames'``)."""
    return getattr(kind, '__name__', str(kind)).split('.')[-1]
