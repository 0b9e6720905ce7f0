"""mmext's warnings: on stderr and in the run's log file.

``warnings.warn`` reaches stderr only, which Slurm and torchrun redirects
often drop, and never the work dir's ``<time>.log``. :func:`warn` gives the
same message to both: as a Python ``UserWarning`` (shown on the console,
filterable, what tests catch) and as a WARNING record to the file handlers
of mmengine's current logger (``MMLogger.get_current_instance()``, which the
runner created with the work dir's log file). The logger's console handler
is skipped, so the console shows the message once.
"""
import logging
import warnings

from mmengine.logging import MMLogger

__all__ = ['warn']


def warn(message: str) -> None:
    """Warn with ``message`` on stderr and in the run's log file.

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
