"""mmext's warnings and refusals: on stderr and in the run's log file.

Importing it makes Python show mmext's warnings on the console as the run's
log lines (mmengine's console format), without the file and source line
Python adds (:func:`_as_log_line`); other warnings keep Python's format."""
import functools
import inspect
import logging
import os
import os.path as osp
import traceback
import warnings
from typing import Callable, Tuple

from mmengine.logging import MMLogger

__all__ = ['warn', 'refuse', 'logs_refusals', 'error_line', 'log_traceback',
           'is_refusal']

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


# The package's folder: the warnings issued from its modules.
_PACKAGE = osp.dirname(osp.abspath(__file__)) + os.sep
_python_format = warnings.formatwarning


def _as_log_line(message, category, filename, lineno, line=None) -> str:
    """``warnings.formatwarning`` for a warning of mmext's modules: the
    line mmengine's current logger prints on the console for a WARNING
    record (Python's format otherwise)."""
    if not str(filename).startswith(_PACKAGE):
        return _python_format(message, category, filename, lineno, line)
    logger = MMLogger.get_current_instance()
    record = logger.makeRecord(logger.name, logging.WARNING, filename,
                               lineno, str(message), None, None)
    console = [h for h in logger.handlers
               if type(h) is logging.StreamHandler]
    return (console[0].format(record) if console else
            f'{category.__name__}: {message}') + '\n'


warnings.formatwarning = _as_log_line


def warn(message: str) -> None:
    """Warn on stderr and in the run's log file.

    A ``UserWarning`` (filterable), and a WARNING record for the file
    handlers of mmengine's current logger only (the console shows it once).

    Args:
        message (str): What is wrong and the fix.
    """
    warnings.warn(message, UserWarning, stacklevel=2)
    _to_log_file(logging.WARNING, message)


def error_line(exc: BaseException) -> str:
    """``<type>: <message>`` of ``exc``; for the exception of a DataLoader
    worker, which torch re-raises as ``Caught <type> in DataLoader worker
    process N.`` with the worker's traceback below, the worker's own
    last line (a broken clip's path).

    Args:
        exc (BaseException): The exception.

    Returns:
        str: One line, ``<type>: <message>``.
    """
    text = str(exc)
    if text.startswith('Caught ') and '\nOriginal Traceback' in text:
        kind, _, message = text.rstrip().splitlines()[-1].partition(': ')
        return f'{kind.rsplit(".", 1)[-1]}: {message}'
    return f'{type(exc).__name__}: {text}'


def is_refusal(exc: BaseException) -> bool:
    """Whether an exception went through :func:`refuse`.

    Args:
        exc (BaseException): The exception.

    Returns:
        bool: True where mmext refused the run (or ``tools/train.py``
        wrote it to the log).
    """
    return getattr(exc, LOGGED, False)


def log_traceback(exc: BaseException) -> None:
    """Write an exception's traceback to the run's log file only (an INFO
    record after its ERROR line: the console shows the one line).

    Args:
        exc (BaseException): The exception.
    """
    _to_log_file(logging.INFO, 'Traceback of the error above:\n' + ''.join(
        traceback.format_exception(type(exc), exc, exc.__traceback__)))


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
        _to_log_file(logging.ERROR, error_line(exc), where)
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
