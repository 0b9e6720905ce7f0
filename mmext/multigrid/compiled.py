"""``torch.compile`` (mmengine's ``compile=...``) under multigrid.

mmengine compiles ``model.train_step`` (``Runner._maybe_compile``); dynamo
then compiles every Python frame it enters once per set of guards (input
shapes, Python values), up to its recompile limit per frame (torch 2.13:
8), after which that frame runs eagerly for the rest of the process, with
one warning. Validation and precise BN call the model outside
``train_step``, so they run eagerly by mmengine's design and add no graphs;
they change module modes and BN momentum only for their duration, so the
training graphs' guards hold again afterwards.

Measured with the tiny test recipe (5 train shapes, ``backend='eager'``,
default limit): every frame of the recognizer held exactly one entry per
distinct ``(batch, T, S, sub-BN splits)`` of the plan, so multigrid needs
the limit at the plan's shape count; two frames grew with the iterations
instead, and hit the limit in any run: the data preprocessor's ``forward``
(27 entries in 27 iterations with a limit of 64: one per batch) and mmengine's
``HistoryBuffer.update``, called for every logged value (26: a Python float
is a guard, so each new ``grad_norm`` recompiled it). Neither computes
anything worth compiling (stacking and normalising the clips, log
bookkeeping), so :meth:`CompiledRun.start` runs both outside dynamo
(``torch.compiler.disable`` on the instances); the recognizer's frames then
compile once per shape and nothing falls back.

Static graphs. By default dynamo recompiles a frame that sees a second input
shape with symbolic sizes (automatic dynamic shapes). With inductor on CPU
(torch 2.13) that graph fails to lower the ResNet3d's first convolution
(``LoweringException: ValueRangeError: Invalid ranges [0:-1]``, measured on
the fight benchmark's model at its second grid shape), so the run turns
automatic dynamic shapes off: each grid shape gets its own static graph,
which is also what inductor generates the best kernels for. Without
automatic dynamic shapes every new value of a Python scalar that a frame
reads is a recompile too; the optimizer's ``step`` reads the LR, which
multigrid changes every iteration, so the step also runs outside dynamo.
"""
from typing import Callable, List, Optional

import torch
from torch._dynamo import config as dynamo_config

from mmext.compat import (DynamoRecompileLimitWatch, dynamo_graph_count,
                          dynamo_recompile_limit, set_dynamo_recompile_limit)
from .plan import MultigridPlan

__all__ = [
    'compile_enabled', 'train_shape_count', 'run_outside_dynamo',
    'CompiledRun'
]


def compile_enabled(compile_cfg) -> bool:
    """Whether a config's ``compile`` value makes mmengine compile
    (``True`` or a dict without ``disable=True``)."""
    if isinstance(compile_cfg, dict):
        return not compile_cfg.get('disable', False)
    return bool(compile_cfg)


def train_shape_count(plan: MultigridPlan) -> int:
    """Distinct ``(batch, T, S, sub-BN splits)`` the train step sees (shapes
    with iterations; a short epoch can leave a short-cycle shape none).

    Raises:
        ValueError: Without the plan's ``samples_per_rank``.
    """
    return len({(x.batch_size, x.shape.clip_len, x.shape.crop_size,
                 x.sub_bn_splits) for x in plan.shape_iterations() if x.iters})


def run_outside_dynamo(model: torch.nn.Module, message_hub=None,
                       optim_wrapper=None) -> Callable[[], None]:
    """Run ``model.data_preprocessor``, ``message_hub.update_scalar`` and
    the optimizers' ``step`` outside dynamo (``torch.compiler.disable`` on
    the instances; see the module docstring for why).

    Args:
        model (nn.Module): The unwrapped model.
        message_hub (MessageHub, optional): The runner's.
        optim_wrapper (OptimWrapper | OptimWrapperDict, optional): The
            runner's; the ``step`` of each of its optimizers.

    Returns:
        callable: Undoes it (removes the instance attributes).
    """
    wrappers = list(getattr(optim_wrapper, 'optim_wrappers', {}).values()
                    ) or ([optim_wrapper] if optim_wrapper is not None else [])
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
    """dynamo sized to a plan, and the graphs one run compiled.

    Args:
        plan (MultigridPlan): The run's plan (with ``samples_per_rank``).

    Attributes:
        shapes (int): :func:`train_shape_count` of the plan.
        limit (int): The recompile limit of the run: the plan's shape count,
            or the process's limit where that is higher.
        graphs (int): Graphs compiled since :meth:`start` (read by
            :meth:`stop`).
        fallbacks (list[str]): Frames that hit a recompile limit since
            :meth:`start` (``"<limit>: <function> (<file>:<line>)"``).
    """

    def __init__(self, plan: MultigridPlan):
        self.shapes = train_shape_count(plan)
        self.limit = self.shapes
        self.graphs = 0
        self.fallbacks: List[str] = []
        self._previous: Optional[int] = None
        self._automatic_dynamic = True
        self._start_graphs = 0
        self._watch: Optional[DynamoRecompileLimitWatch] = None
        self._undo: Optional[Callable[[], None]] = None

    def start(self, model: torch.nn.Module, message_hub=None,
              optim_wrapper=None) -> str:
        """Raise the recompile limit, compile every shape statically, keep
        the per-iteration frames out of dynamo, start counting.

        Args:
            model (nn.Module): The unwrapped model (its ``data_preprocessor``
                runs outside dynamo).
            message_hub (MessageHub, optional): The runner's; its
                ``update_scalar`` runs outside dynamo.
            optim_wrapper (OptimWrapper, optional): The runner's; its
                optimizers' ``step`` runs outside dynamo.

        Returns:
            str: What was set, for the log.
        """
        self._previous = dynamo_recompile_limit()
        self.limit = max(self.shapes, self._previous)
        set_dynamo_recompile_limit(self.limit)
        # A frame that sees a second shape is otherwise recompiled with
        # symbolic sizes, which inductor's convolution lowering rejects on
        # torch 2.13 (ValueRangeError, measured on ResNet3d at the second
        # grid shape); static graphs, one per shape, are what the limit is
        # sized for. The same setting would make every new LR value (a
        # guard of the optimizer's step) recompile the step, so the step
        # runs outside dynamo.
        self._automatic_dynamic = dynamo_config.automatic_dynamic_shapes
        dynamo_config.automatic_dynamic_shapes = False
        self._undo = run_outside_dynamo(model, message_hub, optim_wrapper)
        self._watch = DynamoRecompileLimitWatch().__enter__()
        self._start_graphs = dynamo_graph_count()
        return (f'torch.compile: dynamo recompile limit {self.limit} (was '
                f'{self._previous}; the plan has {self.shapes} train shapes, '
                f'one static graph each per compiled frame: automatic '
                f'dynamic shapes off for the run); the data preprocessor, '
                f'the message hub and the optimizer step run outside '
                f'dynamo')

    def stop(self) -> str:
        """Restore the limit and automatic dynamic shapes; count graphs and
        fallbacks.

        Returns:
            str: The count (and any fallback), for the log.
        """
        self.graphs = dynamo_graph_count() - self._start_graphs
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self.fallbacks = list(self._watch.fallbacks)
            self._watch = None
        if self._previous is not None:
            set_dynamo_recompile_limit(self._previous)
            dynamo_config.automatic_dynamic_shapes = self._automatic_dynamic
            self._previous = None
        if self._undo is not None:
            self._undo()
            self._undo = None
        if not self.fallbacks:
            return (f'torch.compile: {self.graphs} graphs compiled; no frame '
                    f'fell back to eager')
        return (f'torch.compile: {self.graphs} graphs compiled; '
                f'{len(self.fallbacks)} frames hit the recompile limit '
                f'{self.limit} and ran eagerly from then on: '
                f'{"; ".join(self.fallbacks)}. Raise it with '
                f'torch._dynamo.config.recompile_limit (TORCH_LOGS='
                f'"recompiles" names the changing guards).')
