import pytest
from helpers import shared_data  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def tool_modules(monkeypatch):
    """The harnesses run as their commands say: with the user tools'
    modules (``bench_utils``, ``multigrid_speedup``, ``agvm_diagnostic``) on
    ``PYTHONPATH``."""
    monkeypatch.setenv('PYTHONPATH', 'tools/benchmark:tools/analysis')
