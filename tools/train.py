"""Train with the ``tools/train.py`` of the config's toolbox, mmext loaded.

``tools/train.py CONFIG [options]`` runs ``<package>/.mim/tools/train.py``
of the config's ``default_scope`` (mmdet, mmaction, mmseg), so the options
are that toolbox's (``tools/train.py CONFIG -h``). mmext adds its
registries and the ``mmext::`` prefix, ``mmext.Runner`` for a config naming
no runner, AGVM's ``--amp``, gloo without CUDA, trusted checkpoint loads,
the process group's tear-down, the exception that ends a run in its log
file and, at the end, where the run wrote (docs/en/get_started.md, "Tool
options"). A refusal of mmext's ends with one line on stderr, its traceback
in the run's log file (on stderr too with ``MMEXT_TRACEBACK=1``).
``tools/test.py`` runs the toolbox's ``tools/test.py`` alike.
"""
import importlib
import importlib.util
import logging
import os
import os.path as osp
import sys
from typing import List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import MMLogger

import mmext.registry  # noqa: F401  (mmext's scope and mmext:: configs)
from mmext.compat import trusted_checkpoint_loading
from mmext.log import error_line, is_refusal, log_traceback, refuse
from mmext.runner import check_hook_options

CONFIG_SUFFIXES = ('.py', '.json', '.yaml', '.yml')
RUNNER_TYPE = 'mmext.Runner'
# Wrappers whose mixed-precision variant is not mmengine's AmpOptimWrapper.
AMP_WRAPPERS = {'mmext.AGVMOptimWrapper': 'mmext.AGVMAmpOptimWrapper'}
# Set (non-empty): a refusal shows its traceback on stderr too.
TRACEBACK_VARIABLE = 'MMEXT_TRACEBACK'
USAGE = ('usage: tools/{0}.py CONFIG [options]: the options of the '
         "tools/{0}.py of the config's toolbox (tools/{0}.py CONFIG -h)")


def config_argument(argv: Sequence[str]) -> Optional[str]:
    """The config among a tool's arguments: the first with a config
    suffix that is neither an option nor a ``key=value``."""
    return next((a for a in argv if a.endswith(CONFIG_SUFFIXES)
                 and not a.startswith('-') and '=' not in a), None)


def toolbox_tool(cfg: Config, name: str) -> str:
    """The path of ``tools/<name>.py`` of the config's ``default_scope``.

    Raises:
        SystemExit: If no installed package of that name ships the tool.
    """
    scope = cfg.get('default_scope')
    try:
        folder = osp.dirname(importlib.import_module(str(scope)).__file__)
    except (ImportError, TypeError):  # no such package, or no file
        folder = ''
    tools = osp.realpath(osp.join(folder, '.mim', 'tools'))
    path = osp.join(tools, f'{name}.py')
    # mmext's own .mim/tools are these tools.
    if not folder or not osp.isfile(path) or tools == osp.dirname(
            osp.realpath(__file__)):
        raise SystemExit(f'default_scope={scope!r} has no tools/{name}.py: '
                         f'set mmdet, mmaction or mmseg')
    return path


def mmext_options(args, cfg: Config) -> List[str]:
    """The ``--cfg-options`` pairs mmext adds to the toolbox's.

    Args:
        args (Namespace): The toolbox tool's parsed arguments.
        cfg (Config): The config, the user's ``--cfg-options`` merged.

    Returns:
        list[str]: ``key=value`` pairs.
    """
    options = [] if 'runner_type' in cfg else [f'runner_type={RUNNER_TYPE}']
    wrapper = cfg.get('optim_wrapper') or {}
    if getattr(args, 'amp', False) and wrapper.get('type') in AMP_WRAPPERS:
        options.append(f"optim_wrapper.type={AMP_WRAPPERS[wrapper['type']]}")
        if 'loss_scale' not in wrapper:
            options.append('optim_wrapper.loss_scale=dynamic')
    if args.launcher != 'none' and not torch.cuda.is_available():
        if not cfg.get('model_wrapper_cfg'):  # mmengine's default wrapper
            if 'model_wrapper_cfg' in cfg:  # None: replace, not merge
                options.append('model_wrapper_cfg._delete_=True')
            options += [
                'model_wrapper_cfg.type=MMDistributedDataParallel',
                'model_wrapper_cfg.broadcast_buffers=False',
                'model_wrapper_cfg.find_unused_parameters='
                f"{cfg.get('find_unused_parameters', False)}"
            ]
        options.append('model_wrapper_cfg.device_ids=None')
    return options


def start_cpu_process_group(launcher: str) -> None:
    """Start gloo for a distributed run on a machine without CUDA
    (mmengine's ``init_dist`` selects a GPU; the runner then skips it).
    The CPU recipes run AGVM's halves as two processes.

    Raises:
        SystemExit: For a launcher other than ``pytorch`` (torchrun).
    """
    if launcher == 'none' or torch.cuda.is_available() or (
            dist.is_initialized()):
        return
    if launcher != 'pytorch':
        raise SystemExit(f'--launcher {launcher} needs CUDA: on CPU use '
                         f'--launcher pytorch (tools/dist_train.sh)')
    dist.init_process_group('gloo')


def _load(path: str):
    """The toolbox's tool as a module (its ``main`` not run)."""
    spec = importlib.util.spec_from_file_location(
        'toolbox_' + osp.splitext(osp.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def toolbox_arguments(name: str, argv: List[str]):
    """The toolbox's ``tools/<name>.py`` for ``argv`` and its arguments.

    Returns:
        tuple: The tool (a module), ``argv`` with mmext's additions, and
        the launcher.

    Raises:
        SystemExit: As the toolbox's parser (``-h``, a wrong option), or
            without a config.
    """
    config = config_argument(argv)
    if config is None:
        print(USAGE.format(name), file=sys.stderr)
        raise SystemExit(0 if {'-h', '--help'} & set(argv) else 2)
    cfg = Config.fromfile(config)
    tool = _load(toolbox_tool(cfg, name))
    sys.argv = [tool.__file__, *argv]
    args = tool.parse_args()  # the toolbox's -h and errors
    if args.config != config:
        raise SystemExit(USAGE.format(name) + ', the config first')
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
        try:
            check_hook_options(cfg, args.cfg_options)
        except ValueError as exc:
            raise refuse(exc)
    options = mmext_options(args, cfg)
    if any(o.startswith('optim_wrapper.type=') for o in options):
        argv = [a for a in argv if a != '--amp']  # not AmpOptimWrapper
    if options:
        argv = [*argv, '--cfg-options', *options]
    return tool, argv, args.launcher


def run_files(logger: MMLogger, name: str) -> List[Tuple[str, str]]:
    """Where a run's logger wrote: ``(what, path)`` for the work_dir, the
    log file, the metrics json and (training) the last checkpoint, those
    that exist.

    mmengine lays them out as ``<work_dir>/<timestamp>/<timestamp>.log``,
    ``.../vis_data/scalars.json`` (training; testing:
    ``.../<timestamp>.json``) and ``<work_dir>/last_checkpoint`` (the path
    of the last checkpoint saved).
    """
    logs = [h.baseFilename for h in logger.handlers
            if isinstance(h, logging.FileHandler)]
    if not logs:
        return []
    log_dir, log_name = osp.split(logs[0])
    work_dir = osp.dirname(log_dir)
    files = [('work_dir', work_dir), ('log', logs[0])]
    metrics = osp.join(log_dir, 'vis_data', 'scalars.json') if (
        name == 'train') else osp.join(log_dir,
                                       osp.splitext(log_name)[0] + '.json')
    if osp.isfile(metrics):
        files.append(('metrics', metrics))
    last = osp.join(work_dir, 'last_checkpoint')
    if name == 'train' and osp.isfile(last):
        with open(last) as f:
            files.append(('checkpoint', f.read().strip()))
    return files


def main(name: str = 'train', argv: Optional[Sequence[str]] = None,
         one_line_refusals: bool = False) -> None:
    """Run the toolbox's ``tools/<name>.py`` with ``argv`` (default: the
    command line's) and mmext's additions; print where the run wrote.

    An exception that ends the run is also written to the run's log file
    (:func:`mmext.log.refuse`), once its runner has made one. With
    ``one_line_refusals`` (the command line), one mmext refused
    (:func:`mmext.log.is_refusal`) exits with its line on stderr
    (``SystemExit``), its traceback in the log file, unless
    :data:`TRACEBACK_VARIABLE` is set.
    """
    before = MMLogger.get_current_instance()
    try:
        tool, argv, launcher = toolbox_arguments(
            name, list(sys.argv[1:] if argv is None else argv))
        sys.argv = [tool.__file__, *argv]
        start_cpu_process_group(launcher)
        with trusted_checkpoint_loading():  # torch>=2.6 refuses mmengine's
            tool.main()
    except Exception as exc:
        refused = is_refusal(exc)
        if MMLogger.get_current_instance() is not before:  # the run's
            refuse(exc)
            log_traceback(exc)
        if refused and one_line_refusals and not os.environ.get(
                TRACEBACK_VARIABLE):
            raise SystemExit(error_line(exc)) from None
        raise
    logger = MMLogger.get_current_instance()
    if logger is not before and (not dist.is_initialized()
                                 or dist.get_rank() == 0):
        for what, path in run_files(logger, name):
            print(f'{what:<10} {path}')
    if dist.is_initialized():  # gloo may abort at exit (pytorch#179291)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == '__main__':
    main(one_line_refusals=True)
