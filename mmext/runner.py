"""``mmext.Runner``: mmengine's runner plus what only a runner subclass can
do (docs/en/design.md, "mmext.Runner"); it knows neither method ("Layers")."""
import inspect
import os
import os.path as osp
import re
from contextlib import ExitStack
from typing import Callable, List, Optional
from unittest.mock import patch

from mmengine.config import Config
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.runner import Runner as MMEngineRunner
from torch.distributed.optim import ZeroRedundancyOptimizer

from .compat import (accumulative_counts, config_base_files,
                     train_loader_batch_size, trusted_checkpoint_loading)
from .log import refuse, warn
from .lr_scaling import (ADAM_LINEAR_LIMIT, EFFECTIVE_BATCH_INFO, LR_RULES,
                         auto_scale_lr_options, is_adam_family,
                         optim_wrappers)
from .registry import HOOKS, OPTIM_WRAPPERS, RUNNERS, init_options

__all__ = [
    'Runner', 'ResumeGuard', 'register_resume_guard', 'restart_hint',
    'DATA_ROOT_VARIABLES', 'data_root_variable', 'check_ann_file',
    'dropped_base_hooks', 'check_hook_options'
]

# The variables mmext's configs read their data folders from
# (``{{$NAME:default}}``), with their defaults.
DATA_ROOT_VARIABLES = {
    'MMEXT_DATA_ROOT': osp.join('..', 'shared', 'data'),
    'MMEXT_DEMO_DATA': osp.join('data', 'demo'),
}

# guard(runner, checkpoint, filename, resume_optimizer); raises ValueError.
ResumeGuard = Callable[['Runner', dict, str, bool], None]
_RESUME_GUARDS: List[ResumeGuard] = []


def register_resume_guard(guard: ResumeGuard) -> ResumeGuard:
    """Add a check that :class:`Runner` runs on every checkpoint it resumes,
    before any state is restored.

    Args:
        guard (ResumeGuard): ``guard(runner, checkpoint, filename,
            resume_optimizer)``, raising ``ValueError`` to refuse the
            checkpoint.

    Returns:
        ResumeGuard: ``guard`` (a decorator).
    """
    if guard not in _RESUME_GUARDS:
        _RESUME_GUARDS.append(guard)
    return guard


def restart_hint(filename: str) -> str:
    """The alternative every refused resume offers: start from the weights.

    Args:
        filename (str): The checkpoint.

    Returns:
        str: ``'or start from its weights with load_from=... (no --resume).'``
    """
    return (f'or start from its weights with load_from={filename} (no '
            f'--resume).')


def data_root_variable(path: str) -> Optional[str]:
    """The set data-root variable a path lies under.

    Args:
        path (str): A data path.

    Returns:
        str | None: ``NAME=value`` of the variable of
        :data:`DATA_ROOT_VARIABLES`, or None.
    """
    path = osp.normpath(path)
    for name in DATA_ROOT_VARIABLES:
        value = os.environ.get(name)
        if value and (path + os.sep).startswith(
                osp.normpath(value) + os.sep):
            return f'{name}={value}'
    return None


def check_ann_file(dataset_cfg: dict) -> None:
    """Refuse a loader's dataset config whose ``ann_file`` is missing or empty.

    mmengine fails on both deep inside the dataset, without the folder a
    relative path is relative to, or the variable (of
    :data:`DATA_ROOT_VARIABLES`) a config read it from. A wrapper's inner
    ``dataset`` is checked; remote files are not.

    Args:
        dataset_cfg (dict): The loader's ``dataset`` config.

    Raises:
        FileNotFoundError: For a missing ``ann_file``, naming the fix (the
            variable to check, the project root, ``make demo-data``).
        ValueError: For an empty one.
    """
    while isinstance(dataset_cfg.get('dataset'), dict):
        dataset_cfg = dataset_cfg['dataset']
    ann_file = dataset_cfg.get('ann_file')
    if not isinstance(ann_file, str) or not ann_file or '://' in ann_file:
        return  # no file, or a remote one (backend_args)
    path = osp.join(dataset_cfg.get('data_root') or '', ann_file)
    if not osp.exists(path):
        variable = data_root_variable(path)
        if variable:
            raise refuse(FileNotFoundError(
                f'ann_file {path} does not exist: check {variable}'))
        if osp.isabs(path):
            raise refuse(FileNotFoundError(f'ann_file {path} does not exist'))
        default = next((name for name, value in DATA_ROOT_VARIABLES.items()
                        if osp.normpath(path).startswith(value + os.sep)),
                       None)
        root = osp.dirname(osp.dirname(osp.abspath(__file__)))
        if osp.exists(osp.join(root, path)) and not osp.samefile(root, '.'):
            fix = f'run from the project root {root}'
        elif default == 'MMEXT_DEMO_DATA':
            fix = 'run make demo-data in the project root'
        elif default:
            fix = f'set {default} to its folder'
        else:
            fix = 'get the dataset or set data_root'
        raise refuse(FileNotFoundError(
            f'ann_file {path} does not exist in {os.getcwd()}: {fix}'))
    # A list of blank lines is empty too; a large file is not (COCO json).
    if osp.isfile(path) and osp.getsize(path) < 4096:
        with open(path, 'rb') as f:
            if not f.read().strip():
                raise refuse(ValueError(f'ann_file {path} lists no samples'))


def dropped_base_hooks(cfg: Config) -> List[str]:
    """The mmext hooks of a config's ``_base_`` files that it leaves out.

    Its own ``custom_hooks`` (a list) replaces the bases'.

    Args:
        cfg (Config): A config read from its file (others give none).

    Returns:
        list[str]: A warning per mmext hook type dropped.
    """
    if not cfg.filename:
        return []
    kept = {str(h.get('type')) for h in cfg.get('custom_hooks') or []
            if isinstance(h, dict)}
    messages = []
    for base in config_base_files(cfg.filename):
        for hook in Config.fromfile(base).get('custom_hooks') or []:
            kind = str(hook.get('type')) if isinstance(hook, dict) else ''
            if kind.startswith('mmext.') and kind not in kept:
                kept.add(kind)
                messages.append(
                    f'custom_hooks of {osp.basename(cfg.filename)} drop '
                    f'{kind} of {osp.basename(base)}: repeat it there')
    return messages


def _hook_options(hook, scope: Optional[str]) -> set:
    """The keywords a ``custom_hooks`` entry's class names (none if its
    type is unknown or takes any)."""
    kind = hook.get('type') if isinstance(hook, dict) else None
    if not isinstance(kind, str):
        return set()
    with MMENGINE_HOOKS.switch_scope_and_registry(
            hook.get('_scope_', scope)) as scoped:
        cls = scoped.get(kind)
    return (init_options(cls) or set()) if inspect.isclass(cls) else set()


def check_hook_options(cfg, options: Optional[dict]) -> None:
    """Raise ``ValueError`` for a ``--cfg-options`` key
    ``custom_hooks.N.name`` whose index reaches a hook that does not name
    ``name`` while another entry's class does (the docs' form with the
    index of another config).

    Args:
        cfg (Config): The config, ``options`` merged.
        options (dict, optional): The ``--cfg-options`` given.

    Raises:
        ValueError: Naming the hook the index reaches and the index of the
            hook that takes the option.
    """
    hooks = cfg.get('custom_hooks') or []
    scope = cfg.get('default_scope')
    for key in options or {}:
        found = re.fullmatch(r'custom_hooks\.(\d+)\.(\w+)', key)
        if not found or int(found[1]) >= len(hooks):
            continue
        index, name = int(found[1]), found[2]
        if name in _hook_options(hooks[index], scope):
            continue
        other = next((i for i, h in enumerate(hooks)
                      if name in _hook_options(h, scope)), None)
        if other is not None:
            raise ValueError(
                f'{key} reaches {hooks[index]["type"]}, which takes no '
                f'{name!r}: {hooks[other]["type"]} is custom_hooks.{other}.')


@RUNNERS.register_module(name='Runner')
class Runner(MMEngineRunner):
    """mmengine's ``Runner`` with what only a runner subclass can do.

    * ``auto_scale_lr`` scales by the effective batch, loader batch x world
      size x ``accumulative_counts`` (mmengine leaves out the last factor,
      and scales before any hook runs), linearly or by its square root
      (``rule``), which it logs.
    * ``resume`` runs the guards of :func:`register_resume_guard` (a
      method's checkpoint into a config without the method, which no
      component of that config can see).
    * Its checkpoint loads are trusted
      (:func:`mmext.compat.trusted_checkpoint_loading`).
    * A missing or empty ``ann_file`` is named before the dataset is built.
    * A ``ZeroRedundancyOptimizer``'s checkpoint is saved (mmengine 0.10.7
      hangs: see :meth:`save_checkpoint`).
    * A config that drops an mmext hook of its ``_base_`` warns, once the
      run's log file exists.

    Arguments as mmengine's ``Runner``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for message in dropped_base_hooks(self.cfg):
            warn(message)

    @staticmethod
    def build_dataloader(dataloader, seed: Optional[int] = None,
                         diff_rank_seed: bool = False):
        """mmengine's, checking the ``ann_file`` first
        (:func:`check_ann_file`).

        Args:
            dataloader (DataLoader | dict): A loader or its config.
            seed (int, optional): As in mmengine's. Defaults to None.
            diff_rank_seed (bool): As in mmengine's. Defaults to False.

        Returns:
            DataLoader: The loader.
        """
        if isinstance(dataloader, dict):
            check_ann_file(dataloader.get('dataset') or {})
        return MMEngineRunner.build_dataloader(dataloader, seed,
                                               diff_rank_seed)

    def scale_lr(self, optim_wrapper, auto_scale_lr: Optional[dict] = None
                 ) -> None:
        """Log the effective batch; scale LRs by it if ``auto_scale_lr``.

        The factor is ``LR_RULES[rule](effective batch / base_batch_size)``
        (:func:`mmext.lr_scaling.auto_scale_lr_options`), the effective batch
        the loader batch x world size x ``accumulative_counts``. An Adam-family
        or LAMB optimizer scaled linearly by more than ``ADAM_LINEAR_LIMIT``
        warns, unless ``rule`` is set.

        Args:
            optim_wrapper (OptimWrapper | OptimWrapperDict): The built
                wrapper(s).
            auto_scale_lr (dict, optional): The config's ``auto_scale_lr``.
                Defaults to None.

        Raises:
            TypeError: As :func:`mmext.lr_scaling.auto_scale_lr_options`.
            ValueError: As :func:`mmext.lr_scaling.auto_scale_lr_options`.
        """
        loader_batch = train_loader_batch_size(self)
        options = auto_scale_lr_options(auto_scale_lr)
        batches = {}
        for name, wrapper in optim_wrappers(optim_wrapper).items():
            counts = accumulative_counts(wrapper)
            batches[name] = batch = loader_batch * self.world_size * counts
            message = (f"{name + ': ' if name else ''}effective batch "
                       f'{batch} (loader batch {loader_batch} x world size '
                       f'{self.world_size} x accumulative_counts {counts})')
            if options is not None:
                base, rule = options
                factor = LR_RULES[rule](batch / base)
                for group in wrapper.optimizer.param_groups:
                    group['lr'] = group['lr'] * factor
                ratio = f'{batch} / base_batch_size {base}'
                message += (f'; auto_scale_lr rule={rule!r}: LR x '
                            f'{factor:g} = ' +
                            (ratio if rule == 'linear' else f'sqrt({ratio})'))
                if (rule == 'linear' and 'rule' not in auto_scale_lr
                        and factor > ADAM_LINEAR_LIMIT
                        and is_adam_family(wrapper.optimizer)):
                    warn(f'auto_scale_lr multiplies '
                         f"{type(wrapper.optimizer).__name__}'s LR by "
                         f"{factor:g} (linear rule): consider rule='sqrt'")
            self.logger.info(message)
        # Not resumed: a later run with mmengine's Runner must not inherit it.
        self.message_hub.update_info(EFFECTIVE_BATCH_INFO, batches,
                                     resumed=False)

    def save_checkpoint(self, *args, **kwargs) -> None:
        """mmengine's, after every rank has gathered the shards of each
        ``ZeroRedundancyOptimizer`` on rank 0.

        mmengine 0.10.7 saves on rank 0 only, where ZeRO's ``state_dict``
        gathers the shards by a collective call that the other ranks never
        join: the run hangs, without AGVM too. Not gathered when the optimizer
        is not saved (``save_best``).

        Args:
            *args: As mmengine's ``Runner.save_checkpoint``.
            **kwargs: As mmengine's ``Runner.save_checkpoint``.
        """
        saved = inspect.signature(MMEngineRunner.save_checkpoint).bind(
            self, *args, **kwargs).arguments.get('save_optimizer', True)
        wrappers = optim_wrappers(self.optim_wrapper).values() if saved else ()
        with ExitStack() as gathered:
            for wrapper in wrappers:
                optimizer = getattr(wrapper, 'optimizer', None)
                if isinstance(optimizer, ZeroRedundancyOptimizer):
                    optimizer.consolidate_state_dict(to=0)
                    gathered.enter_context(patch.object(
                        optimizer, 'consolidate_state_dict',
                        lambda *args, **kwargs: None))
            super().save_checkpoint(*args, **kwargs)

    # While ``resume`` runs: whether it restores the optimizer.
    _resuming: Optional[bool] = None

    def resume(self, filename: str, resume_optimizer: bool = True,
               *args, **kwargs) -> None:
        """mmengine's, with the resume guards (:func:`register_resume_guard`).

        Args:
            filename (str): The checkpoint.
            resume_optimizer (bool): Whether to restore the optimizer state.
                Defaults to True.
            *args: As mmengine's ``Runner.resume``.
            **kwargs: As mmengine's ``Runner.resume``.
        """
        self._resuming = resume_optimizer
        try:
            super().resume(filename, resume_optimizer, *args, **kwargs)
        finally:
            self._resuming = None

    def load_checkpoint(self, filename: str, *args, **kwargs) -> dict:
        """mmengine's, trusted; when resuming, every resume guard first.

        The guards of the modules the registries list run too.

        Args:
            filename (str): The checkpoint.
            *args: As mmengine's ``Runner.load_checkpoint``.
            **kwargs: As mmengine's ``Runner.load_checkpoint``.

        Returns:
            dict: The loaded checkpoint.

        Raises:
            ValueError: From a guard, naming what to do instead.
        """
        with trusted_checkpoint_loading():
            checkpoint = super().load_checkpoint(filename, *args, **kwargs)
        if self._resuming is not None:
            for registry in (HOOKS, OPTIM_WRAPPERS):
                registry.import_from_location()
            for guard in _RESUME_GUARDS:
                try:
                    guard(self, checkpoint, filename, self._resuming)
                except ValueError as exc:
                    refuse(exc)
                    raise
            # Set anew by this run; mmengine would warn about loading it.
            checkpoint.get('message_hub', {}).get('resumed_keys', {}).pop(
                EFFECTIVE_BATCH_INFO, None)
        return checkpoint
