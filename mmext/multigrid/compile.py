"""``torch.compile`` at every grid shape of a multigrid run.

dynamo compiles a frame once per input shape and runs it eagerly after its
recompile limit; with automatic dynamic shapes it recompiles a frame with
symbolic sizes, which inductor on CPU fails to lower for the ResNet3d stem
(torch 2.13). :class:`CompiledRun` sizes the limit to the plan and compiles
every shape statically; :func:`run_outside_dynamo` keeps the frames that
would recompile at every iteration (the data preprocessor, the message hub,
the optimizer step with multigrid's changing LR) outside dynamo."""
from typing import Callable, List, Optional

import torch

from mmext.compat import (DynamoRecompileLimitWatch, dynamo_config,
                          dynamo_graph_count, set_dynamo_config)
from mmext.lr_scaling import optim_wrappers

__all__ = [
    'compile_enabled', 'train_shape_count', 'run_outside_dynamo',
    'CompiledRun'
]


def compile_enabled(compile_cfg) -> bool:
    """Whether a config's ``compile`` value makes mmengine compile.

    Args:
        compile_cfg (bool | dict | None): The config's ``compile``.

    Returns:
        bool: True for ``True`` or a dict without ``disable=True``.
    """
    if isinstance(compile_cfg, dict):
        return not compile_cfg.get('disable', False)
    return bool(compile_cfg)


def train_shape_count(plan) -> int:
    """The distinct train shapes of a plan, each one static graph.

    Args:
        plan (MultigridPlan): A plan with ``samples_per_rank``.

    Returns:
        int: Distinct ``(batch, T, S, sub-BN splits)`` with iterations.
    """
    return len({(x.batch_size, x.shape.clip_len, x.shape.crop_size,
                 x.sub_bn_splits) for x in plan.shape_iterations() if x.iters})


def run_outside_dynamo(model: torch.nn.Module, message_hub=None,
                       optim_wrapper=None) -> Callable[[], None]:
    """Keep the parts that change with every shape or step out of dynamo.

    The data preprocessor, ``message_hub.update_scalar`` and each optimizer's
    ``step`` run outside dynamo (``torch.compiler.disable`` on the
    instances).

    Args:
        model (torch.nn.Module): The unwrapped model.
        message_hub (MessageHub, optional): The runner's. Defaults to None.
        optim_wrapper (OptimWrapper | OptimWrapperDict, optional): The
            runner's. Defaults to None.

    Returns:
        Callable[[], None]: Undoes it.
    """
    wrappers = ([] if optim_wrapper is None else
                optim_wrappers(optim_wrapper).values())
    done = []
    for owner, name in ((getattr(model, 'data_preprocessor', None),
                         'forward'), (message_hub, 'update_scalar'),
                        *[(w.optimizer, 'step') for w in wrappers]):
        if owner is not None and name not in vars(owner):
            setattr(owner, name, torch.compiler.disable(getattr(owner, name)))
            done.append((owner, name))

    def undo():
        for owner, name in done:
            delattr(owner, name)

    return undo


class CompiledRun:
    """dynamo sized to a plan.

    Attributes:
        shapes (int): The plan's :func:`train_shape_count`.
        limit (int): The recompile limit, at least ``shapes``.
        graphs (int): Graphs compiled between :meth:`start` and :meth:`stop`.
        fallbacks (list[str]): The frames that hit a limit meanwhile,
            ``"<limit>: <function> (<file>:<line>)"``.

    Args:
        plan (MultigridPlan): A plan with ``samples_per_rank``.
    """

    def __init__(self, plan):
        self.shapes = train_shape_count(plan)
        self.limit = self.shapes
        self.graphs = 0
        self.fallbacks: List[str] = []
        self._previous: Optional[int] = None
        self._automatic_dynamic = True
        self._start_graphs = 0
        self._watch: Optional[DynamoRecompileLimitWatch] = None

    def start(self) -> str:
        """Raise the recompile limit, compile every shape statically, start
        counting.

        Returns:
            str: What was set, for the log.
        """
        self._previous = dynamo_config('recompile_limit')
        self.limit = max(self.shapes, self._previous)
        set_dynamo_config('recompile_limit', self.limit)
        self._automatic_dynamic = dynamo_config('automatic_dynamic_shapes')
        set_dynamo_config('automatic_dynamic_shapes', False)
        self._watch = DynamoRecompileLimitWatch().__enter__()
        self._start_graphs = dynamo_graph_count()
        return (f'torch.compile: dynamo recompile limit {self.limit} (was '
                f'{self._previous}) for the plan\'s {self.shapes} train '
                f'shapes, one static graph each')

    def stop(self) -> str:
        """Restore the limit and automatic dynamic shapes; count graphs and
        fallbacks.

        Returns:
            str: The count, and the frames that fell back to eager with the
            fix, for the log.
        """
        self.graphs = dynamo_graph_count() - self._start_graphs
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self.fallbacks = list(self._watch.fallbacks)
            self._watch = None
        if self._previous is not None:
            set_dynamo_config('recompile_limit', self._previous)
            set_dynamo_config('automatic_dynamic_shapes',
                              self._automatic_dynamic)
            self._previous = None
        if not self.fallbacks:
            return (f'torch.compile: {self.graphs} graphs compiled; no frame '
                    f'fell back to eager')
        return (f'torch.compile: {self.graphs} graphs compiled; frames that '
                f'hit the recompile limit {self.limit} and ran eagerly: '
                f'{"; ".join(self.fallbacks)}. Raise '
                f'torch._dynamo.config.recompile_limit.')
