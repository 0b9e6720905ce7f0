"""mmext.log.warn: a warning on stderr and in the run's log file, once on
the console."""
import logging

import pytest
from mmengine.logging import MMLogger

from mmext.log import warn


def test_warning_reaches_the_log_file_not_the_console_twice(tmp_path,
                                                             capsys):
    log_file = tmp_path / 'run.log'
    logger = MMLogger.get_instance('test_log_warn', log_file=str(log_file))
    with pytest.warns(UserWarning, match='lower start_iter'):
        warn('AGVM never modulates the LR: lower start_iter.')
    for handler in logger.handlers:
        handler.flush()
    text = log_file.read_text()
    assert 'WARNING - AGVM never modulates the LR: lower start_iter.' in text
    # The logger's console handler is skipped (the Python warning is the
    # console copy).
    assert 'AGVM never modulates' not in capsys.readouterr().out


def test_without_a_log_file_it_is_a_python_warning():
    logger = MMLogger.get_instance('test_log_warn_no_file')
    assert not any(isinstance(h, logging.FileHandler)
                   for h in logger.handlers)
    with pytest.warns(UserWarning, match='^only stderr$'):
        warn('only stderr')
