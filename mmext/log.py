"""mmext's warnings: on stderr and in the run's log file."""
import logging
import warnings

from mmengine.logging import MMLogger

__all__ = ['warn']


def warn(message: str) -> None:
    """Warn with ``message`` on stderr and in the run's log file.

    A ``UserWarning`` (filterable), and a WARNING record for the file
    handlers of mmengine's current logger only (the console shows it once).

    Args:
        message (str): What is wrong and the fix.
    """
    warnings.warn(message, UserWarning, stacklevel=2)
    logger = MMLogger.get_current_instance()
    files = [h for h in logger.handlers if isinstance(h, logging.FileHandler)]
    if not files:
        return
    record = logger.makeRecord(logger.name, logging.WARNING, __file__, 0,
                               message, None, None)
    for handler in files:
        if record.levelno >= handler.level:
            handler.handle(record)
