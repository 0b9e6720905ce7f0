from .dist_utils import (find_free_port, run_gloo_processes,
                         setup_cpu_distributed)
from .run_utils import (add_run_args, build_runner, enable_amp,
                        load_run_config)

__all__ = [
    'setup_cpu_distributed', 'find_free_port', 'run_gloo_processes',
    'add_run_args', 'build_runner', 'enable_amp',
    'load_run_config'
]
