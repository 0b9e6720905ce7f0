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
    """Whether a value is a real number, not a bool (``True`` is an int in
    Python).

    Args:
        value (object): An option's value.

    Returns:
        bool: True for an int or float that is no bool.
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value, minimum=None) -> bool:
    """Whether a value is an integer, not a bool, and ``>= minimum`` if given.

    Args:
        value (object): An option's value.
        minimum (int, optional): The least value allowed. Defaults to None.

    Returns:
        bool: True for such an integer.
    """
    return (isinstance(value, numbers.Integral)
            and not isinstance(value, bool)
            and (minimum is None or value >= minimum))


def check_option(ok: bool, name: str, value, expected: str) -> None:
    """Refuse an option's value unless a check passed.

    Args:
        ok (bool): The check's result.
        name (str): The option.
        value (object): Its value.
        expected (str): What it must be, e.g. ``'a number > 0'``.

    Raises:
        ValueError: ``'<name> must be <expected>, got <value>'`` unless ``ok``.
    """
    if not ok:
        raise ValueError(f'{name} must be {expected}, got {value!r}')


def type_name(kind) -> str:
    """The class name of a config's ``type``.

    Args:
        kind (str | type): A class, or its registered name with or without a
            scope (``'mmaction.SampleFrames'``).

    Returns:
        str: The name without the scope, e.g. ``'SampleFrames'``.
    """
    return getattr(kind, '__name__', str(kind)).split('.')[-1]
