"""The steps of ``tools/train.py`` and ``tools/test.py``.

Parsers with the union of the options of mmdet 3.3, mmaction2 1.2 and mmseg
1.2 tools, the config edits of each option (with its toolbox's meaning) and
the runner build. Names avoid pytest's ``test*`` pattern.
"""
import argparse
import copy
import os
import os.path as osp
from typing import List, Optional

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS as ALL_RUNNERS
from mmengine.registry import DefaultScope
from mmengine.runner import Runner as MMEngineRunner

from .compat import config_base_files, trust_runner_checkpoints
from .dist import LAUNCHERS, setup_cpu_distributed
from .log import warn
from .lr_scaling import RUNNER_TYPE
from .registry import (HOOKS, OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS,
                       PARAM_SCHEDULERS, RUNNERS)
from .runner import Runner
from .scheduler_checks import scheduler_configs

__all__ = [
    'AMP_WRAPPERS', 'parser_for_train', 'parser_for_test', 'config_for_train',
    'config_for_test', 'load_run_config', 'check_mmext_names',
    'dropped_base_hooks', 'build_runner', 'enable_amp'
]

# Optimizer wrappers and their mixed-precision counterparts (``--amp``).
AMP_WRAPPERS = {
    'OptimWrapper': 'AmpOptimWrapper',
    'mmext.AGVMOptimWrapper': 'mmext.AGVMAmpOptimWrapper',
}


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
    parser.add_argument(
        '--local_rank', '--local-rank', type=int, default=0,
        action=_ExportLocalRank,
        help='set by torch.distributed.launch (exported as LOCAL_RANK)')
    return parser


def parser_for_train() -> argparse.ArgumentParser:
    """``tools/train.py``'s options (see :func:`config_for_train`)."""
    parser = _run_parser('Train a model', test=False)
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from the given checkpoint; without a value, from the '
        'latest checkpoint in the work dir')
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision (needs CUDA)')
    parser.add_argument(
        '--auto-scale-lr', action='store_true',
        help='scale the LR by effective batch / auto_scale_lr.'
        'base_batch_size (effective batch = loader batch x world size x '
        'accumulative_counts)')
    parser.add_argument('--no-validate', action='store_true',
                        help='do not evaluate during training')
    parser.add_argument('--seed', type=int, help='random seed')
    parser.add_argument('--diff-rank-seed', action='store_true',
                        help='a different seed on every rank')
    parser.add_argument('--deterministic', action='store_true',
                        help='deterministic options for the CUDNN backend')
    return parser


def parser_for_test() -> argparse.ArgumentParser:
    """``tools/test.py``'s options (see :func:`config_for_test`)."""
    parser = _run_parser('Test (and eval) a model', test=True)
    parser.add_argument(
        '--out', help='save the predictions: a .pkl file (mmdet, '
        'mmaction2), or the directory of prediction images (mmseg)')
    parser.add_argument(
        '--dump', help='dump the predictions to a .pkl file (mmaction2)')
    parser.add_argument('--show', action='store_true',
                        help='show the predictions')
    parser.add_argument(
        '--show-dir', help='save the painted predictions in this directory')
    parser.add_argument('--wait-time', type=float, default=2.,
                        help='seconds each --show window stays')
    parser.add_argument(
        '--interval', type=int,
        help='visualize every interval-th sample (mmaction2 default 1)')
    parser.add_argument('--tta', action='store_true',
                        help='test-time augmentation')
    return parser


def config_for_train(args: argparse.Namespace) -> Config:
    """The training config of ``tools/train.py``'s ``args``.

    Meanings as in the toolboxes' tools; ``--seed``, ``--diff-rank-seed``
    and ``--deterministic`` always update ``randomness`` (mmaction2 applies
    them only to configs without it).

    Args:
        args (Namespace): From :func:`parser_for_train`.

    Returns:
        Config: The edited config.

    Raises:
        RuntimeError: ``--amp`` without CUDA.
        ValueError: ``--auto-scale-lr`` without
            ``auto_scale_lr.base_batch_size`` in the config; ``--amp`` with
            an optimizer wrapper that has no AMP variant.
    """
    cfg = load_run_config(args.config, args.cfg_options, args.work_dir,
                          args.launcher)
    if args.amp:
        enable_amp(cfg)
    if args.auto_scale_lr:
        if 'base_batch_size' not in (cfg.get('auto_scale_lr') or {}):
            raise ValueError(
                '--auto-scale-lr needs auto_scale_lr = dict('
                'base_batch_size=N) in the config: the effective batch its '
                'LR is meant for.')
        cfg.auto_scale_lr.enable = True
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    randomness = dict(seed=args.seed,
                      diff_rank_seed=args.diff_rank_seed or None,
                      deterministic=args.deterministic or None)
    randomness = {k: v for k, v in randomness.items() if v is not None}
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


def _dump_predictions(cfg: Config, path: str, option: str) -> None:
    """Append the scope's pickle dumper to the test metrics."""
    if not path.endswith(('.pkl', '.pickle')):
        raise ValueError(f'{option} {path}: the dump file must be a .pkl '
                         f'file')
    metric = dict(type='DumpDetResults' if _scope(cfg, option) == 'mmdet'
                  else 'DumpResults', out_file_path=path)
    evaluator = cfg.test_evaluator
    if isinstance(evaluator, (list, tuple)):
        cfg.test_evaluator = list(evaluator) + [metric]
    elif 'metrics' in evaluator:  # an Evaluator config
        evaluator.metrics = list(evaluator.metrics) + [metric]
    else:
        cfg.test_evaluator = [evaluator, metric]


def _visualize(cfg: Config, args: argparse.Namespace) -> None:
    """``--show``/``--show-dir``/``--wait-time``/``--interval``, each
    toolbox's way."""
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
    """mmdet ``tools/test.py``'s default ``tta_model``/``tta_pipeline``."""
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


def config_for_test(args: argparse.Namespace) -> Config:
    """The test config of ``tools/test.py``'s ``args``.

    Each option means what it does in the toolbox of the config's
    ``default_scope`` (table in docs/en/get_started.md, "Tool options").

    Args:
        args (Namespace): From :func:`parser_for_test`.

    Returns:
        Config: With ``load_from`` = the checkpoint.

    Raises:
        ValueError: Naming the option: a dump file that is not .pkl, no
            ``VisualizationHook``, ``--tta`` on mmaction2 or without
            ``tta_model``/``tta_pipeline``, or a config outside
            mmdet/mmseg/mmaction2 for the toolbox-specific options.
    """
    cfg = load_run_config(args.config, args.cfg_options, args.work_dir,
                          args.launcher)
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
    """Read a config as the toolboxes' ``tools/train.py`` does, and check
    its mmext names (:func:`check_mmext_names`).

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
    check_mmext_names(cfg)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(config))[0])
    return cfg


def _component_names(cfg: Config):
    """``(key, name, mmext registry)`` where a config can name an mmext
    class."""
    hooks = [(f'custom_hooks[{i}]', h)
             for i, h in enumerate(cfg.get('custom_hooks') or [])]
    hooks += [(f'default_hooks.{k}', h)
              for k, h in (cfg.get('default_hooks') or {}).items()]
    for where, hook in hooks:
        if isinstance(hook, dict):
            yield f'{where}.type', hook.get('type'), HOOKS
    wrapper = cfg.get('optim_wrapper') or {}
    yield 'optim_wrapper.type', wrapper.get('type'), OPTIM_WRAPPERS
    for key in ('constructor', 'base_constructor'):
        yield (f'optim_wrapper.{key}', wrapper.get(key),
               OPTIM_WRAPPER_CONSTRUCTORS)
    for scheduler in scheduler_configs(cfg.get('param_scheduler')):
        yield 'param_scheduler', scheduler.get('type'), PARAM_SCHEDULERS
    yield 'runner_type', cfg.get('runner_type'), RUNNERS


def check_mmext_names(cfg: Config) -> None:
    """Refuse an mmext class named without its ``mmext.`` prefix (the
    build would fail with a bare ``KeyError``).

    Raises:
        ValueError: Naming the key and the prefixed name to write.
    """
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
        for where, name, registry in _component_names(cfg):
            if not isinstance(name, str) or '.' in name or (
                    registry.parent.get(name) is not None):
                continue
            registry.import_from_location()
            if name in registry.module_dict:
                raise ValueError(
                    f"{where}={name!r} is an mmext class: write "
                    f"'mmext.{name}' (mmext's classes are in the 'mmext' "
                    f'scope).')


def dropped_base_hooks(config: str, cfg: Config) -> List[str]:
    """Warnings for mmext hooks of a ``_base_`` config that ``cfg`` lost
    (a ``custom_hooks`` list replaces the base's).

    Args:
        config (str): The config file (its ``_base_`` files are read).
        cfg (Config): The merged config.

    Returns:
        list[str]: One message per dropped hook type.
    """
    kept = {str(h.get('type')) for h in cfg.get('custom_hooks') or []
            if isinstance(h, dict)}
    messages = []
    for base in config_base_files(config):
        for hook in Config.fromfile(base).get('custom_hooks') or []:
            kind = str(hook.get('type')) if isinstance(hook, dict) else ''
            if kind.startswith('mmext.') and kind not in kept:
                kept.add(kind)
                messages.append(
                    f'{osp.basename(config)} sets custom_hooks, which '
                    f'replaces the list of its _base_ {osp.basename(base)}: '
                    f'{kind} is dropped. Repeat it in custom_hooks to keep '
                    f'it.')
    return messages


def build_runner(cfg: Config) -> MMEngineRunner:
    """Set up distributed training for ``cfg.launcher``, build the runner,
    then warn about :func:`dropped_base_hooks` (once the run's log file
    exists, so that the warning is in it too).

    Args:
        cfg (Config): A config from :func:`load_run_config`; its
            ``runner_type`` defaults to ``'mmext.Runner'``.

    Returns:
        Runner: The ``runner_type`` runner; its own checkpoint loads are
        trusted (:func:`mmext.compat.trust_runner_checkpoints`).
    """
    setup_cpu_distributed(cfg, cfg.launcher)
    cfg.setdefault('runner_type', RUNNER_TYPE)
    runner = ALL_RUNNERS.build(cfg)
    if not isinstance(runner, Runner):
        trust_runner_checkpoints(runner)
    if cfg.filename:
        for message in dropped_base_hooks(cfg.filename, cfg):
            warn(message)
    return runner


def enable_amp(cfg: Config) -> None:
    """Switch the config's optimizer wrapper to its mixed-precision variant.

    Args:
        cfg (Config): Edited in place (``optim_wrapper.type``, ``loss_scale``).

    Raises:
        RuntimeError: Without CUDA.
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
