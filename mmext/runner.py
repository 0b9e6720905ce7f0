"""Runner plumbing shared by the tools, the multigrid hook and AGVM's wrapper.

``mmext.Runner`` (mmengine's runner with the effective batch and mmext's
resume checks), the steps of ``tools/train.py``/``tools/test.py`` (config,
distributed set-up on CPU-only machines, runner, ``--amp``) and the per-step
LR scaling that both methods apply on top of the param schedulers.
"""
import argparse
import copy
import os
import os.path as osp
import subprocess
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
from mmengine.config import Config, DictAction
from mmengine.optim import BaseOptimWrapper, OptimWrapper, OptimWrapperDict
from mmengine.registry import RUNNERS as ALL_RUNNERS
from mmengine.runner import EpochBasedTrainLoop
from mmengine.runner import Runner as MMEngineRunner

from .compat import (optim_wrapper_counts, train_loader_batch_size,
                     trust_runner_checkpoints)
from .registry import RUNNERS

__all__ = [
    'Runner', 'RUNNER_TYPE', 'EFFECTIVE_BATCH_INFO', 'effective_batch',
    'check_auto_scale_lr', 'check_runner_lr_scaling', 'running_config',
    'unused_scheduler_values',
    'train_parser', 'test_parser', 'train_config', 'test_config',
    'load_run_config', 'build_runner', 'enable_amp',
    'setup_cpu_distributed', 'scale_lrs', 'scaled_lrs'
]

# ``runner_type`` of :class:`Runner` in configs.
RUNNER_TYPE = 'mmext.Runner'
# Message hub runtime info: ``{optim wrapper name ('' for one): effective
# batch}``, set by :class:`Runner` when it has scaled the LRs for it.
EFFECTIVE_BATCH_INFO = 'effective_batch_size'


def effective_batch(loader_batch: int, world_size: int,
                    accumulative_counts: int) -> str:
    """The batch of one optimizer step, spelt out for logs and tools.

    Args:
        loader_batch (int): ``train_dataloader.batch_size`` (per process).
        world_size (int): Number of processes.
        accumulative_counts (int): Micro-batches per optimizer step.

    Returns:
        str: e.g. ``'8 (loader batch 2 x world size 2 x accumulative_counts
        2)'``.
    """
    return (f'{loader_batch * world_size * accumulative_counts} (loader '
            f'batch {loader_batch} x world size {world_size} x '
            f'accumulative_counts {accumulative_counts})')


def check_auto_scale_lr(runner_info, auto_scale_lr: Optional[dict],
                        accumulative_counts: int) -> None:
    """Raise if mmengine's own ``auto_scale_lr`` missed the accumulation.

    mmengine's ``Runner.scale_lr`` scales by loader batch x world size only,
    so with ``accumulative_counts = K > 1`` it sets an LR K times too small
    for the batch of an optimizer step. :class:`Runner` counts K and records
    it in the message hub (``EFFECTIVE_BATCH_INFO``); that record clears the
    run.

    Args:
        runner_info (MessageHub): The runner's message hub.
        auto_scale_lr (dict, optional): The config's ``auto_scale_lr``.
        accumulative_counts (int): K of the optimizer wrapper.

    Raises:
        ValueError: If ``auto_scale_lr`` is enabled and K > 1 under a runner
            that is not :class:`Runner`.
    """
    if (not auto_scale_lr or not auto_scale_lr.get('enable', False)
            or accumulative_counts <= 1
            or runner_info.get_info(EFFECTIVE_BATCH_INFO) is not None):
        return
    raise ValueError(
        f'auto_scale_lr is enabled and optim_wrapper.accumulative_counts='
        f"{accumulative_counts}, but mmengine's Runner.scale_lr scales the "
        f'LR by loader batch x world size only, {accumulative_counts}x too '
        f"small for the batch of an optimizer step. Set runner_type='"
        f"{RUNNER_TYPE}' in the config (mmext's tools/train.py does), or "
        f'disable auto_scale_lr and set the LR for the effective batch '
        f'yourself.')


def check_runner_lr_scaling(runner) -> None:
    """:func:`check_auto_scale_lr` for every optimizer wrapper of ``runner``
    (after ``Runner.train`` scaled the LRs).

    Raises:
        ValueError: As :func:`check_auto_scale_lr`.
    """
    for wrapper in _optim_wrappers(runner.optim_wrapper).values():
        if isinstance(wrapper, OptimWrapper):
            check_auto_scale_lr(runner.message_hub, runner.auto_scale_lr,
                                optim_wrapper_counts(wrapper)[1])


def running_config(message_hub) -> Optional[Config]:
    """The config of the running runner, for components without the runner.

    mmengine's ``RuntimeInfoHook`` puts ``runner.cfg.pretty_text`` into the
    message hub (``'cfg'``) in ``before_run``, so the optimizer wrapper can
    read it when the train loop initialises it.

    Args:
        message_hub (MessageHub): The runner's message hub.

    Returns:
        Config | None: None outside a runner, or if the text does not parse
        back (configs holding Python objects rather than literals).
    """
    text = message_hub.get_info('cfg')
    if not text:
        return None
    try:
        return Config.fromstring(text, file_format='.py')
    except Exception:  # noqa: BLE001  (any failure means: unknown)
        return None


def _scheduler_configs(schedulers) -> List[dict]:
    """The config dicts in a ``param_scheduler`` value (dict, list, or a
    dict of lists per optimizer); built schedulers are left out."""
    if isinstance(schedulers, dict):
        if 'type' in schedulers:
            return [schedulers]
        return [c for v in schedulers.values() for c in _scheduler_configs(v)]
    if isinstance(schedulers, (list, tuple)):
        return [c for v in schedulers for c in _scheduler_configs(v)]
    return []


def unused_scheduler_values(schedulers, max_epochs: Optional[int],
                            max_iters: int) -> List[str]:
    """What of the ``param_scheduler`` configs a run cannot honour.

    One message per value: a scheduler that begins at or after the end of
    training (never applies), one that ends after it (cut short: a warm-up
    longer than the run never reaches its LR), and ``milestones`` at or
    after the end (those LR steps never happen).

    Args:
        schedulers (dict | list): The ``param_scheduler`` config value.
        max_epochs (int, optional): Epochs of the run; None for an
            iteration-based loop (epoch-based values are then not checked).
        max_iters (int): Iterations of the run.

    Returns:
        list[str]: The messages.
    """
    from mmengine.optim.scheduler.param_scheduler import INF
    messages = []
    for cfg in _scheduler_configs(schedulers):
        by_epoch = cfg.get('by_epoch', True)
        length = max_epochs if by_epoch else max_iters
        if length is None:
            continue
        unit = 'epoch' if by_epoch else 'iteration'
        name = f"param_scheduler {cfg['type']}"
        begin, end = cfg.get('begin', 0), cfg.get('end', INF)
        if begin >= length:
            messages.append(
                f'{name} begins at {unit} {begin}, not before the end of '
                f'training ({length} {unit}s): it never applies.')
            continue
        if end != INF and end > length:
            messages.append(
                f'{name} ends at {unit} {end}, after the end of training '
                f'({length} {unit}s): it is cut short (a warm-up never '
                f'reaches its target LR).')
        late = [m for m in cfg.get('milestones', []) if m >= length]
        if late:
            messages.append(
                f'{name} milestones {late} lie at or after the end of '
                f'training ({length} {unit}s): those LR steps never happen.')
    return messages


def _optim_wrappers(optim_wrapper) -> dict:
    if isinstance(optim_wrapper, OptimWrapperDict):
        return dict(optim_wrapper.items())
    return {'': optim_wrapper}


@RUNNERS.register_module(name='Runner')
class Runner(MMEngineRunner):
    """mmengine's ``Runner`` with the effective batch and mmext's checks.

    ``runner_type='mmext.Runner'`` in a config (mmext's ``tools/train.py``
    and ``tools/test.py`` use it unless the config names another runner)
    changes three things for any recipe:

    * The batch is the effective batch: loader batch x world size x
      ``accumulative_counts``. It is logged when training starts, and
      ``auto_scale_lr`` scales each optimizer's LR by effective batch /
      ``base_batch_size`` (mmengine leaves out the accumulation).
    * Param scheduler values the run cannot honour (a warm-up longer than
      the run, milestones after its end, ...) warn, naming the value
      (:func:`unused_scheduler_values`; with ``MultigridHook`` the hook's
      own checks on the multigrid schedule replace these).
    * ``resume`` refuses a checkpoint written with mmext components (AGVM
      optimizer state, a multigrid schedule) that the config does not have,
      naming what to do instead; the opposite direction is checked by the
      components themselves (``AGVMOptimWrapper.load_state_dict``,
      ``MultigridHook``), so it holds with any runner.
    """

    def scale_lr(self, optim_wrapper: OptimWrapper,
                 auto_scale_lr: Optional[dict] = None) -> None:
        """Log the effective batch; scale LRs by it if ``auto_scale_lr``.

        Args:
            optim_wrapper (OptimWrapper | OptimWrapperDict): Built wrapper(s).
            auto_scale_lr (dict, optional): ``enable`` and
                ``base_batch_size`` (the effective batch the config's LR is
                meant for), as in mmengine.

        Raises:
            ValueError: If enabled without ``base_batch_size``.
        """
        loader_batch = train_loader_batch_size(self)
        enabled = bool(auto_scale_lr and auto_scale_lr.get('enable', False))
        if enabled and 'base_batch_size' not in auto_scale_lr:
            raise ValueError('auto_scale_lr.enable=True needs '
                             'auto_scale_lr.base_batch_size')
        batches = {}
        for name, wrapper in _optim_wrappers(optim_wrapper).items():
            counts = optim_wrapper_counts(wrapper)[1]
            batch = loader_batch * self.world_size * counts
            batches[name] = batch
            prefix = f'{name}: ' if name else ''
            message = (f'{prefix}effective batch '
                       f'{effective_batch(loader_batch, self.world_size, counts)}')
            if enabled:
                ratio = batch / auto_scale_lr['base_batch_size']
                for group in wrapper.optimizer.param_groups:
                    group['lr'] = group['lr'] * ratio
                message += (f'; auto_scale_lr: LR x {ratio:g} (effective '
                            f'batch / base_batch_size '
                            f"{auto_scale_lr['base_batch_size']})")
            self.logger.info(message)
        # Not resumed: a later run with mmengine's runner must not inherit it.
        self.message_hub.update_info(EFFECTIVE_BATCH_INFO, batches,
                                     resumed=False)

    def build_param_scheduler(self, scheduler):
        """mmengine's, warning first about scheduler values the run cannot
        honour (:func:`unused_scheduler_values`); arguments as there."""
        from mmext.multigrid import MultigridHook
        loop = self.train_loop
        # MultigridHook checks the recipe's schedulers on its own schedule.
        if (loop is not None and _scheduler_configs(scheduler) and not any(
                isinstance(h, MultigridHook) for h in self.hooks)):
            max_epochs = (loop.max_epochs
                          if isinstance(loop, EpochBasedTrainLoop) else None)
            for message in unused_scheduler_values(scheduler, max_epochs,
                                                   loop.max_iters):
                warnings.warn(message)
        return super().build_param_scheduler(scheduler)

    # Set while ``resume`` runs: None, or whether it restores the optimizer.
    _resuming: Optional[bool] = None

    def resume(self, filename: str, resume_optimizer: bool = True,
               *args, **kwargs) -> None:
        """mmengine's ``resume``, refusing checkpoints of mmext components
        the config lacks (see :meth:`check_resume`); arguments as there."""
        self._resuming = resume_optimizer
        try:
            super().resume(filename, resume_optimizer, *args, **kwargs)
        finally:
            self._resuming = None

    def load_checkpoint(self, filename: str, *args, **kwargs) -> dict:
        """mmengine's ``load_checkpoint``; when resuming, also
        :meth:`check_resume` before any state is restored."""
        checkpoint = super().load_checkpoint(filename, *args, **kwargs)
        if self._resuming is not None:
            self.check_resume(checkpoint, filename, self._resuming)
        return checkpoint

    def check_resume(self, checkpoint: dict, filename: str,
                     resume_optimizer: bool = True) -> None:
        """Raise if ``checkpoint`` holds mmext state the config cannot take.

        Args:
            checkpoint (dict): The loaded checkpoint.
            filename (str): Its path, for the message.
            resume_optimizer (bool): Whether the optimizer state is restored
                (AGVM's state matters only then).

        Raises:
            ValueError: If it has AGVM optimizer state and the config's
                optimizer wrapper is not AGVM's, or a multigrid schedule and
                the config has no ``MultigridHook``.
        """
        from mmext.agvm import AGVMOptimWrapper
        from mmext.multigrid import MultigridHook
        from mmext.multigrid.plan import CHECKPOINT_KEY
        restart = (f'or start from its weights with load_from={filename} '
                   f'(no --resume).')
        saved = (checkpoint.get('optimizer') or {}) if resume_optimizer else {}
        if 'param_groups' in saved:
            saved = {'': saved}
        for name, wrapper in _optim_wrappers(self.optim_wrapper).items():
            agvm = (saved.get(name) or {}).get('agvm')
            if (agvm is not None and isinstance(wrapper, BaseOptimWrapper)
                    and not isinstance(wrapper, AGVMOptimWrapper)):
                raise ValueError(
                    f'{filename} comes from an AGVM run (module_names '
                    f"{list(agvm['module_names'])}): its optimizer param "
                    f'groups are split by module, which the config\'s '
                    f'{type(wrapper).__name__} cannot map. Resume with that '
                    f"run's AGVM optim_wrapper (type='mmext.AGVMOptimWrapper',"
                    f" constructor='mmext.AGVMOptimWrapperConstructor'), "
                    + restart)
        schedule = checkpoint.get('meta', {}).get(CHECKPOINT_KEY)
        if schedule is not None and not any(
                isinstance(hook, MultigridHook) for hook in self.hooks):
            raise ValueError(
                f'{filename} comes from a multigrid run: its epochs (of '
                f"{schedule['max_epochs']}) and param scheduler states are "
                f"on the multigrid schedule, not on the recipe's. Resume with "
                f"that run's mmext.MultigridHook in custom_hooks, " + restart)

# Optimizer wrappers and their mixed-precision counterparts (``--amp``).
AMP_WRAPPERS = {
    'OptimWrapper': 'AmpOptimWrapper',
    'mmext.AGVMOptimWrapper': 'mmext.AGVMAmpOptimWrapper',
}


def _slurm_env_to_torch_env(port: str) -> None:
    """Export torchrun's variables from Slurm's, as mmengine's slurm init does.

    Raises:
        KeyError: If the Slurm variables (``SLURM_PROCID`` ...) are missing.
    """
    node_list = os.environ['SLURM_NODELIST']
    os.environ.setdefault('MASTER_PORT', port)
    os.environ.setdefault(
        'MASTER_ADDR',
        subprocess.getoutput(f'scontrol show hostname {node_list} | head -n1'))
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['RANK'] = os.environ['SLURM_PROCID']
    os.environ['LOCAL_RANK'] = os.environ['SLURM_LOCALID']


def setup_cpu_distributed(cfg: Config, launcher: str) -> None:
    """Initialise gloo distributed training when there is no CUDA device.

    mmengine's ``init_dist`` and ``Runner.wrap_model`` call
    ``torch.cuda.set_device`` and pass ``device_ids=[LOCAL_RANK]``, which fail
    without CUDA. On a CPU-only machine this initialises the default process
    group with the gloo backend before the Runner (which then skips its own
    ``init_dist``) and makes ``MMDistributedDataParallel`` run without device
    ids. With CUDA available it does nothing, so NCCL/GPU runs are unchanged.

    Args:
        cfg (Config): The full config; ``model_wrapper_cfg`` is edited in place.
        launcher (str): ``'none'``, ``'pytorch'`` (torchrun), ``'slurm'``
            or ``'mpi'``.

    Raises:
        RuntimeError: For ``'mpi'`` without CUDA.
    """
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher == 'mpi':
        raise RuntimeError(
            "--launcher mpi: mmengine's MPI set-up selects a CUDA device and "
            'there is none; on CPU use --launcher pytorch '
            '(tools/dist_train.sh) or slurm')
    if launcher == 'slurm':
        _slurm_env_to_torch_env(str(cfg.get('env_cfg', {}).get(
            'dist_cfg', {}).get('port', 29500)))
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    # The same defaults as Runner.wrap_model when no wrapper is configured.
    wrapper_cfg = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper_cfg['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper_cfg


def finish_distributed() -> None:
    """Tear down the default process group after a completed run.

    mmengine leaves the process group to the interpreter's exit, where gloo's
    worker threads can outlive the interpreter (pytorch/pytorch#179291): a CPU
    CI run of ``tools/dist_train.sh`` aborted rank 0 with ``terminate called
    without an active exception`` (SIGABRT). PyTorch's distributed docs
    ("Shutdown") ask for this call near the end of ``main()``. A barrier first
    keeps one rank from tearing down while another still communicates. Does
    nothing outside distributed runs; call it only on success, since a rank
    that failed never reaches the barrier.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


class _ExportLocalRank(argparse.Action):
    """Export ``--local-rank`` as ``LOCAL_RANK`` unless torchrun set it."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        os.environ.setdefault('LOCAL_RANK', str(values))


def _run_parser(description: str, test: bool) -> argparse.ArgumentParser:
    """The options of ``tools/train.py`` and ``tools/test.py`` in common."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        'config', help=f'{"test" if test else "train"} config file path')
    if test:
        parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--work-dir', help='the dir to save logs, checkpoints and metrics '
        '(default: ./work_dirs/<config name>)')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override settings of the config, key=value pairs in xxx=yyy '
        'format, e.g. train_dataloader.batch_size=4; merged before the '
        'other options, as in mmdet and mmseg')
    parser.add_argument(
        '--launcher', choices=LAUNCHERS, default='none',
        help='job launcher (mpi needs CUDA)')
    # ``torch.distributed.launch`` passes it; torchrun sets LOCAL_RANK.
    parser.add_argument(
        '--local_rank', '--local-rank', type=int, default=0,
        action=_ExportLocalRank,
        help='set by torch.distributed.launch (exported as LOCAL_RANK)')
    return parser


def train_parser() -> argparse.ArgumentParser:
    """``tools/train.py``'s options: the union of mmdet 3.3, mmaction2 1.2
    and mmseg 1.2 ``tools/train.py`` (see :func:`train_config`)."""
    parser = _run_parser('Train a model', test=False)
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from the given checkpoint; without a value, from the '
        'latest checkpoint in the work dir')
    parser.add_argument(
        '--amp', action='store_true',
        help='automatic mixed precision (needs CUDA)')
    parser.add_argument(
        '--auto-scale-lr', action='store_true',
        help='scale the LR by effective batch / auto_scale_lr.'
        'base_batch_size (effective batch = loader batch x world size x '
        'accumulative_counts)')
    parser.add_argument(
        '--no-validate', action='store_true',
        help='do not evaluate during training')
    parser.add_argument('--seed', type=int, help='random seed')
    parser.add_argument(
        '--diff-rank-seed', action='store_true',
        help='a different seed on every rank')
    parser.add_argument(
        '--deterministic', action='store_true',
        help='deterministic options for the CUDNN backend')
    return parser


def test_parser() -> argparse.ArgumentParser:
    """``tools/test.py``'s options: the union of mmdet 3.3, mmaction2 1.2
    and mmseg 1.2 ``tools/test.py`` (see :func:`test_config`)."""
    parser = _run_parser('Test (and eval) a model', test=True)
    parser.add_argument(
        '--out',
        help='save the predictions: a .pkl file (mmdet, mmaction2), or the '
        'directory of prediction images (mmseg)')
    parser.add_argument(
        '--dump', help='dump the predictions to a .pkl file (mmaction2)')
    parser.add_argument(
        '--show', action='store_true', help='show the predictions')
    parser.add_argument(
        '--show-dir', help='save the painted predictions in this directory')
    parser.add_argument(
        '--wait-time', type=float, default=2.,
        help='seconds each --show window stays')
    parser.add_argument(
        '--interval', type=int,
        help='visualize every interval-th sample (mmaction2 default 1)')
    parser.add_argument(
        '--tta', action='store_true', help='test-time augmentation')
    return parser


def _base_config(args: argparse.Namespace) -> Config:
    return load_run_config(args.config, args.cfg_options, args.work_dir,
                           args.launcher)


def train_config(args: argparse.Namespace) -> Config:
    """The training config of ``tools/train.py``'s ``args``.

    Same meanings as in the toolboxes' ``tools/train.py``; where they
    differ, an explicit option is never ignored: ``--seed``,
    ``--diff-rank-seed`` and ``--deterministic`` update ``randomness`` (in
    mmaction2 they apply only to configs without ``randomness``).

    Args:
        args (Namespace): From :func:`train_parser`.

    Returns:
        Config: With ``resume``/``load_from`` (``--resume``), the AMP
        wrapper (``--amp``), ``auto_scale_lr.enable`` (``--auto-scale-lr``),
        no validation (``--no-validate``) and ``randomness`` set.

    Raises:
        RuntimeError: ``--amp`` without CUDA.
        ValueError: ``--auto-scale-lr`` without
            ``auto_scale_lr.base_batch_size`` in the config; ``--amp`` with
            an optimizer wrapper that has no AMP variant.
    """
    cfg = _base_config(args)
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        if 'base_batch_size' not in (cfg.get('auto_scale_lr') or {}):
            raise ValueError(
                '--auto-scale-lr needs auto_scale_lr = dict('
                'base_batch_size=N) in the config: the effective batch (loader '
                'batch x world size x accumulative_counts) its LR is meant '
                'for.')
        cfg.auto_scale_lr.enable = True
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    randomness = {
        key: value for key, value in (
            ('seed', args.seed),
            ('diff_rank_seed', args.diff_rank_seed or None),
            ('deterministic', args.deterministic or None))
        if value is not None
    }
    if randomness:
        cfg.randomness = dict(cfg.get('randomness') or {}, **randomness)
    return cfg


def _scope(cfg: Config, option: str) -> str:
    scope = cfg.get('default_scope')
    if scope not in ('mmdet', 'mmseg', 'mmaction'):
        raise ValueError(f'{option} is defined for mmdet, mmseg and '
                         f'mmaction configs; this one has default_scope='
                         f'{scope!r}')
    return scope


def _add_test_metric(cfg: Config, metric: dict) -> None:
    evaluator = cfg.test_evaluator
    if isinstance(evaluator, (list, tuple)):
        cfg.test_evaluator = list(evaluator) + [metric]
    elif 'metrics' in evaluator:  # an Evaluator config
        evaluator.metrics = list(evaluator.metrics) + [metric]
    else:
        cfg.test_evaluator = [evaluator, metric]


def _dump_predictions(cfg: Config, path: str, option: str) -> None:
    """Append the scope's pickle dumper to the test metrics."""
    if not path.endswith(('.pkl', '.pickle')):
        raise ValueError(f'{option} {path}: the dump file must be a .pkl '
                         f'file')
    metric = ('DumpDetResults'
              if _scope(cfg, option) == 'mmdet' else 'DumpResults')
    _add_test_metric(cfg, dict(type=metric, out_file_path=path))


def _visualize(cfg: Config, args: argparse.Namespace) -> None:
    """``--show``/``--show-dir``/``--wait-time``/``--interval``, each
    toolbox's way (their hooks name the options differently)."""
    scope = _scope(cfg, '--show/--show-dir')
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise ValueError(
            '--show/--show-dir need a VisualizationHook: add default_hooks.'
            "visualization=dict(type='VisualizationHook') (the toolbox's "
            'default_runtime has it)')
    hook.update({'enable' if scope == 'mmaction' else 'draw': True})
    if args.show:
        hook.update(show=True, wait_time=args.wait_time)
    if args.show_dir:
        if scope == 'mmdet':
            hook.test_out_dir = args.show_dir
        elif scope == 'mmseg':
            cfg.visualizer.save_dir = args.show_dir
        else:
            hook.out_dir = args.show_dir
    if args.interval is not None or scope == 'mmaction':
        hook.interval = 1 if args.interval is None else args.interval


def _mmdet_default_tta(cfg: Config) -> None:
    """mmdet ``tools/test.py``'s defaults: horizontal-flip TTA merged by
    NMS, for configs without ``tta_model``/``tta_pipeline``."""
    cfg.setdefault('tta_model', dict(
        type='DetTTAModel',
        tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5),
                     max_per_img=100)))
    if 'tta_pipeline' not in cfg:
        dataset = cfg.test_dataloader.dataset
        while 'dataset' in dataset:
            dataset = dataset['dataset']
        pipeline = copy.deepcopy(dataset.pipeline)
        pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[dict(type='RandomFlip', prob=1.),
                         dict(type='RandomFlip', prob=0.)],
                        [dict(type='PackDetInputs',
                              meta_keys=('img_id', 'img_path', 'ori_shape',
                                         'img_shape', 'scale_factor', 'flip',
                                         'flip_direction'))]])
        cfg.tta_pipeline = pipeline


def _test_time_augmentation(cfg: Config) -> None:
    scope = _scope(cfg, '--tta')
    if scope == 'mmaction':
        raise ValueError(
            '--tta: mmaction2 has no TTA model; a recognizer tests several '
            'views by its test_pipeline (SampleFrames num_clips, ThreeCrop '
            '/ TenCrop), set them there')
    if scope == 'mmdet':
        _mmdet_default_tta(cfg)
    missing = [k for k in ('tta_model', 'tta_pipeline') if k not in cfg]
    if missing:
        raise ValueError(f'--tta needs {missing} in the config (mmseg '
                         f'recipes define both in their default runtime or '
                         f'dataset configs)')
    cfg.model = dict(cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def test_config(args: argparse.Namespace) -> Config:
    """The test config of ``tools/test.py``'s ``args``.

    Each option has the meaning it has in the toolbox of the config's
    ``default_scope``: ``--out`` dumps a .pkl (mmdet ``DumpDetResults``;
    mmaction2: as ``--dump``) or, for mmseg, saves prediction images to a
    directory (``test_evaluator.output_dir``); ``--dump`` a .pkl (mmdet's
    dumper in mmdet, mmengine's ``DumpResults`` otherwise); ``--show``,
    ``--show-dir``, ``--wait-time`` and ``--interval`` switch on the
    config's ``VisualizationHook``; ``--tta`` wraps the model in
    ``tta_model`` and tests with ``tta_pipeline`` (mmdet's defaults when
    missing).

    Args:
        args (Namespace): From :func:`test_parser`.

    Returns:
        Config: With ``load_from`` = the checkpoint.

    Raises:
        ValueError: Naming the option: a dump file that is not .pkl, no
            ``VisualizationHook``, ``--tta`` on mmaction2 or without
            ``tta_model``/``tta_pipeline`` (mmseg), or a config outside
            mmdet/mmseg/mmaction2 for the toolbox-specific options.
    """
    cfg = _base_config(args)
    cfg.load_from = args.checkpoint
    if args.show or args.show_dir:
        _visualize(cfg, args)
    if args.tta:
        _test_time_augmentation(cfg)
    if args.out is not None:
        if _scope(cfg, '--out') == 'mmseg':
            cfg.test_evaluator.update(output_dir=args.out, keep_results=True)
        else:
            _dump_predictions(cfg, args.out, '--out')
    if args.dump is not None:
        _dump_predictions(cfg, args.dump, '--dump')
    return cfg


def load_run_config(config: str,
                    cfg_options: Optional[dict] = None,
                    work_dir: Optional[str] = None,
                    launcher: str = 'none') -> Config:
    """Read a config the way the toolboxes' ``tools/train.py`` does.

    Args:
        config (str): Path of the config file.
        cfg_options (dict, optional): ``--cfg-options`` overrides.
        work_dir (str, optional): ``--work-dir``; default
            ``./work_dirs/<config name>`` unless the config sets one.
        launcher (str): One of ``LAUNCHERS``.

    Returns:
        Config: The merged config, with ``launcher`` and ``work_dir`` set.
    """
    cfg = Config.fromfile(config)
    cfg.launcher = launcher
    if cfg_options is not None:
        cfg.merge_from_dict(cfg_options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(config))[0])
    return cfg


def build_runner(cfg: Config) -> MMEngineRunner:
    """Set up distributed training for ``cfg.launcher`` and build the runner.

    Args:
        cfg (Config): A config from :func:`load_run_config`; its
            ``runner_type`` defaults to ``'mmext.Runner'``.

    Returns:
        Runner: The ``runner_type`` runner, whose own checkpoint loads
        (``--resume``, ``load_from``) are trusted
        (:func:`mmext.compat.trust_runner_checkpoints`).
    """
    setup_cpu_distributed(cfg, cfg.launcher)
    cfg.setdefault('runner_type', RUNNER_TYPE)
    runner = ALL_RUNNERS.build(cfg)
    trust_runner_checkpoints(runner)
    return runner


def enable_amp(cfg: Config) -> None:
    """Switch the config's optimizer wrapper to its mixed-precision variant.

    Args:
        cfg (Config): Edited in place (``optim_wrapper.type``, ``loss_scale``).

    Raises:
        RuntimeError: Without CUDA (mmengine's ``AmpOptimWrapper`` asserts it).
        ValueError: If the configured wrapper has no known AMP variant.
    """
    if not torch.cuda.is_available():
        raise RuntimeError('--amp needs a CUDA device; none is available. '
                           'Train without --amp on CPU.')
    wrapper_type = cfg.optim_wrapper.get('type', 'OptimWrapper')
    if wrapper_type in AMP_WRAPPERS.values():
        return
    if wrapper_type not in AMP_WRAPPERS:
        raise ValueError(f'--amp: no mixed-precision variant is known for '
                         f'optim_wrapper.type={wrapper_type!r}; expected one '
                         f'of {sorted(AMP_WRAPPERS)}.')
    cfg.optim_wrapper.type = AMP_WRAPPERS[wrapper_type]
    cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')


def scale_lrs(param_groups: Sequence[dict],
              factors: Sequence[float]) -> Callable[[], None]:
    """Multiply each param group's ``lr`` by its factor, for one step.

    Multigrid (batch factor of the long-cycle shape) and AGVM (modulation
    factor of the group's module) change the LR of one optimizer step on top
    of the recipe's schedule. Restoring it right after the step keeps param
    schedulers and the logged ``lr`` on the recipe's values.

    Args:
        param_groups (Sequence[dict]): The optimizer's param groups
            (``optimizer.param_groups``, not the wrapper's, which may hold a
            fake extra group).
        factors (Sequence[float]): One factor per group.

    Returns:
        callable: Restores the LRs as they were before the call.

    Raises:
        ValueError: If the lengths differ.
    """
    if len(param_groups) != len(factors):
        raise ValueError(f'{len(factors)} LR factors for '
                         f'{len(param_groups)} param groups')
    saved: List[float] = [group['lr'] for group in param_groups]
    for group, factor in zip(param_groups, factors):
        group['lr'] = group['lr'] * factor

    def restore() -> None:
        for group, lr in zip(param_groups, saved):
            group['lr'] = lr

    return restore


@contextmanager
def scaled_lrs(param_groups: Sequence[dict],
               factors: Sequence[float]) -> Iterator[None]:
    """Context manager form of :func:`scale_lrs` (restores on exceptions)."""
    restore = scale_lrs(param_groups, factors)
    try:
        yield
    finally:
        restore()
