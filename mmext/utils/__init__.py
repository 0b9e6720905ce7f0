from .dist_utils import setup_cpu_distributed
from .run_utils import (add_run_args, build_runner, enable_amp,
                        load_run_config)

__all__ = [
    'setup_cpu_distributed', 'add_run_args', 'build_runner', 'enable_amp',
    'load_run_config'
]
