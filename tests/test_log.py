"""mmext.log: a warning on stderr and in the run's log file, once on the
console; a refusal in the run's log file too, once."""
import logging

import pytest
from mmengine.logging import MMLogger

from mmext.log import refuse, warn


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


def _refuse_start_iter():
    raise refuse(ValueError('start_iter=-1: expected >= 0'))


def test_a_refusal_reaches_the_log_file_once(tmp_path, capsys):
    log_file = tmp_path / 'run.log'
    logger = MMLogger.get_instance('test_log_refuse', log_file=str(log_file))
    with pytest.raises(ValueError, match='start_iter=-1') as err:
        _refuse_start_iter()
    assert refuse(err.value) is err.value  # a second call writes nothing
    for handler in logger.handlers:
        handler.flush()
    [line] = log_file.read_text().splitlines()
    # mmengine's ERROR format names where it was raised.
    assert ' - ERROR - ' in line and 'test_log.py - _refuse_start_iter - ' in (
        line)
    assert line.endswith(' - ValueError: start_iter=-1: expected >= 0')
    assert 'start_iter' not in capsys.readouterr().out


def test_a_caught_exception_names_where_it_was_raised(tmp_path):
    log_file = tmp_path / 'run.log'
    logger = MMLogger.get_instance('test_log_caught', log_file=str(log_file))
    try:
        {}['model']
    except KeyError as exc:
        refuse(exc)
    for handler in logger.handlers:
        handler.flush()
    [line] = log_file.read_text().splitlines()
    assert "test_a_caught_exception_names_where_it_was_raised" in line
    assert line.endswith(" - KeyError: 'model'")


def test_without_a_log_file_a_refusal_is_only_returned():
    MMLogger.get_instance('test_log_refuse_no_file')
    exc = TypeError('x')
    assert refuse(exc) is exc
