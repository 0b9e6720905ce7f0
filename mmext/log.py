"""mmext's warnings and refusals: on stderr and in the run's log file."""
import functools
import inspect
import logging
import traceback
import warnings
from typing import Callable, Tuple

from mmengine.logging import MMLogger

__all__ = ['warn', 'refuse', 'logs_refusals']

# Set on an exception once :func:`refuse` has written it to the log file.
LOGGED = 'mmext_logged'


def _to_log_file(level: int, message: str,
                 where: Tuple[str, int, str] = (__file__, 0, None)) -> None:
    """A record for the file handlers of mmengine's current logger only:
    the console already shows the warning or the traceback.

    ``where``: the file, line and function an ERROR record names
    (mmengine's format shows them)."""
    logger = MMLogger.get_current_instance()
    record = logger.makeRecord(logger.name, level, where[0], where[1],
                               message, None, None, func=where[2])
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) and (
                record.levelno >= handler.level):
            handler.handle(record)


def warn(message: str) -> None:
    """Warn on stderr and in the run's log file.

    A ``UserWarning`` (filterable), and a WARNING record for the file
    handlers of mmengine's current logger only (the console shows it once).

    Args:
        message (str): What is wrong and the fix.
    """
    warnings.warn(message, UserWarning, stacklevel=2)
    _to_log_file(logging.WARNING, message)


def refuse(exc: BaseException) -> BaseException:
    """Write an exception to the run's log file and return it.

    Used as ``raise refuse(ValueError(...))``. Without it the reason a run
    stopped is only in the traceback on stderr, which a cluster's job log may
    not keep. An ERROR record ``<type>: <message>`` goes to the file handlers
    of mmengine's current logger (the runner's, once it is built; none
    before), once per exception: ``tools/train.py`` calls it again on
    whatever ends a run.

    Args:
        exc (BaseException): The exception, raised or about to be.

    Returns:
        BaseException: ``exc``, marked as logged.
    """
    if not getattr(exc, LOGGED, False):
        if exc.__traceback__ is not None:  # raised: where, innermost
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = (frame.filename, frame.lineno, frame.name)
        else:  # about to be raised by the caller
            caller = inspect.stack(0)[1]
            where = (caller.filename, caller.lineno, caller.function)
        _to_log_file(logging.ERROR, f'{type(exc).__name__}: {exc}', where)
        setattr(exc, LOGGED, True)
    return exc


def logs_refusals(method: Callable) -> Callable:
    """Decorate a lifecycle method of a hook or wrapper so that an exception
    leaving it is also written to the run's log file (:func:`refuse`).

    One decorator on the entry points (``__init__``, ``before_run``, ...)
    covers every check they call, pure ones included.

    Args:
        method (Callable): The method.

    Returns:
        Callable: The decorated method; it re-raises what ``method`` raises.
    """

    @functools.wraps(method)
    def logged(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            raise refuse(exc)

    return logged
