"""A multigrid plan reported: as plain data (the schedule tool's ``--json``)
and as the stage table the hook logs and the schedule tool prints; the
data-wait watch that reports each shape change of a run."""
import logging
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .schedule import stage_flops_ratios

__all__ = ['summary', 'describe', 'DataWaitWatch']


def summary(plan, warnings: Sequence[str] = ()) -> dict:
    """A ``MultigridPlan`` as plain data (the schedule tool's ``--json``).

    Args:
        plan (MultigridPlan): The plan.
        warnings (Sequence[str]): The checks' warnings
            (:func:`~mmext.multigrid.checks.check_run`). Defaults to ``()``.

    Returns:
        dict: The base shape; totals (``iters`` and ``recipe_iters`` None
        without exact counts, ``estimated_iters`` in recipe iterations per
        epoch; ``flops_ratio``, ``flop_saving``, ``flops_counted`` and
        ``clip_gflops``, the GFLOPs per clip of each ``(T, S)`` if counted);
        ``lr_rule``, ``batch_policy``, ``warnings`` and ``stages``: per stage
        :meth:`MultigridStage.to_dict` with its per-process and effective
        batch sizes, iterations, optimizer ``steps`` (None without exact
        counts) and ``flops_ratio`` (its FLOPs over the recipe's run).
    """
    exact = plan.exact
    flops = stage_flops_ratios(plan.stages, plan.recipe_epochs,
                               plan.base_clip_len, plan.base_crop_size,
                               plan.clip_flops)
    stages = []
    for s, ratio in zip(plan.stages, flops):
        batch = plan.base_batch * s.shape.batch_factor
        per_epoch = plan.iters_per_epoch(s) if exact else None
        stages.append(dict(
            s.to_dict(), batch_size=batch,
            effective_batch_size=batch * plan.batch_multiplier,
            short_cycle_batch_sizes=plan.batch_sizes(s),
            iters=per_epoch * s.num_epochs if exact else None,
            steps=(per_epoch // plan.accumulative_counts * s.num_epochs
                   if exact else None),
            estimated_iters=s.estimated_iters, flops_ratio=ratio))
    return dict(
        base=dict(batch_size=plan.base_batch,
                  effective_batch_size=plan.base_batch * plan.batch_multiplier,
                  clip_len=plan.base_clip_len, crop_size=plan.base_crop_size),
        recipe_epochs=plan.recipe_epochs, epochs=plan.max_epochs, exact=exact,
        clips_per_process=plan.samples_per_rank,
        clips_per_sample=plan.clips_per_sample,
        iters=plan.max_iters if exact else None,
        recipe_iters=(plan.recipe_epochs * plan.recipe_iters_per_epoch
                      if exact else None),
        estimated_iters=sum(s.estimated_iters for s in plan.stages),
        iteration_saving=plan.iteration_saving(),
        flops_ratio=sum(flops), flop_saving=1 / sum(flops),
        flops_counted=plan.flops_counted,
        clip_gflops=[dict(clip_len=t, crop_size=s, gflops=f / 1e9)
                     for (t, s), f in sorted(plan.clip_flops.items())]
        if plan.flops_counted else None,
        world_size=plan.world_size,
        accumulative_counts=plan.accumulative_counts,
        lr_rule=plan.options.lr_rule, batch_policy=plan.options.batch_policy,
        warnings=list(warnings), stages=stages)


def describe(plan) -> str:
    """A ``MultigridPlan`` as the stage table the hook logs and the schedule
    tool prints.

    Args:
        plan (MultigridPlan): The plan.

    Returns:
        str: The table, one row per stage, and a last ``total:`` line.
    """
    info = summary(plan)
    exact, base = info['exact'], info['base']
    rule = {'linear': 'batch factor', 'sqrt': 'sqrt(batch factor)'}[
        info['lr_rule']]
    lines = [
        f'base (B, T, S) = ({base["batch_size"]}, {base["clip_len"]}, '
        f'{base["crop_size"]}), {info["recipe_epochs"]} recipe epochs; '
        f'batch = per process, eff. batch = batch x world size '
        f'{info["world_size"]} x accumulative_counts '
        f'{info["accumulative_counts"]}; rel. LR = {rule} x LR decay '
        f"(lr_rule='{info['lr_rule']}'); batch_policy="
        f"'{info['batch_policy']}'; FLOPs = share of the recipe's",
        f'{"lr stage":>8} {"batch":>6} {"eff. batch":>10} {"T":>4} '
        f'{"S":>4} {"start":>6} {"end":>5} '
        + (f'{"iters":>7} {"steps":>6} ' if exact else
           f'{"iters (x recipe iters/epoch)":>28} ')
        + f'{"FLOPs":>6} {"rel. LR":>8}  short-cycle (batch, S)'
    ]
    for d in info['stages']:
        cycle = [(b, x['crop_size'])
                 for b, x in zip(d['short_cycle_batch_sizes'],
                                 d['short_cycle'])]
        iters = (f'{d["iters"]:>7} {d["steps"]:>6} ' if exact else
                 f'{d["estimated_iters"]:>28.2f} ')
        lines.append(
            f'{d["lr_stage"]:>8} {d["batch_size"]:>6} '
            f'{d["effective_batch_size"]:>10} {d["clip_len"]:>4} '
            f'{d["crop_size"]:>4} {d["start_epoch"]:>6} '
            f'{d["end_epoch"]:>5} {iters}{d["flops_ratio"]:>6.1%} '
            f'{d["lr_factor"]:>8.4g}  {cycle}')
    ratio = info['iteration_saving']
    saving = (f'{ratio:.2f}x fewer iterations' if ratio >= 1 else
              f'{1 / ratio:.2f}x more iterations')
    # A FLOP saving, not a wall-time one: a data-bound run saves less.
    flops = (f'FLOPs x{info["flops_ratio"]:.3f} of the recipe '
             f'({info["flop_saving"]:.2f}x fewer FLOPs, ' + (
                 'counted on the model' if info['flops_counted'] else
                 'B*T*S^2 estimate') + '; wall time: docs/en/benchmarks.md)')
    if exact:
        per = info['clips_per_sample']
        count = (f'{info["clips_per_process"]} clips' if per == 1 else
                 f'{info["clips_per_process"]} videos x {per} clips')
        lines.append(
            f'total: {info["epochs"]} epochs, {info["iters"]} '
            f'iterations (exact, {count} per process) vs '
            f'{info["recipe_iters"]} of the recipe -> {saving}; {flops}')
    else:
        lines.append(
            f'total: {info["epochs"]} epochs, '
            f'{info["estimated_iters"]:.1f} x recipe iters/epoch vs '
            f'{info["recipe_epochs"]} -> {saving} (estimate: incomplete '
            f'batches ignored; give the dataset for exact counts); '
            f'{flops}')
    return '\n'.join(lines)


# The transforms that open or decode a video file (mmaction2's).
_VIDEO_DECODERS = ('DecordInit', 'DecordDecode', 'PyAVInit', 'PyAVDecode',
                   'OpenCVInit', 'OpenCVDecode')


class DataWaitWatch:
    """The data-wait share after each shape change; one warning per run.

    The first ``skip`` iterations after :meth:`start_stage` count as
    stage-change cost, the next ``iters`` are measured; a stage shorter than
    ``skip + iters`` (its length given) is measured to its end, one of a
    single iteration with nothing skipped.

    Args:
        threshold (float, optional): The data-wait share in [0, 1] that warns
            (0 or None: never).
        iters (int): Iterations measured after each shape change.
        skip (int): Iterations counted as stage-change cost first. Defaults
            to 1.
    """

    def __init__(self, threshold: Optional[float], iters: int,
                 skip: int = 1):
        self.threshold, self.iters, self.skip = threshold, iters, skip
        self.warned = False
        self.start_stage('')

    def start_stage(self, where: str, rebuild_seconds: float = 0.0,
                    length: Optional[int] = None,
                    clips_per_iter: Optional[float] = None) -> None:
        """Begin measuring a stage.

        Args:
            where (str): The stage, as the log names it.
            rebuild_seconds (float): Seconds the loader rebuild took. Defaults
                to 0.0.
            length (int, optional): The stage's iterations; None: long enough.
                Defaults to None.
            clips_per_iter (float, optional): The stage's mean batch per
                process (clips), for the costs per clip. Defaults to None
                (no costs per clip).
        """
        self.where, self._seen = where, 0
        self.clips_per_iter = clips_per_iter
        self.change_seconds = self._rebuild = rebuild_seconds
        self._data = self._total = 0.0
        self._skip = self.skip if length is None else min(self.skip,
                                                          length - 1)
        self._iters = self.iters if length is None else max(
            min(self.iters, length - self._skip), 1)

    def record(self, data_seconds: float, total_seconds: float,
               loader_costs: Callable[[], Dict[str, float]] = dict
               ) -> List[Tuple[int, str]]:
        """Add one iteration's data wait and total time.

        Args:
            data_seconds (float): Seconds waiting for data (mmengine's
                ``train/data_time``).
            total_seconds (float): Seconds of the iteration (``train/time``).
            loader_costs (Callable[[], dict[str, float]]): The loader's ms
                per clip in each transform of the stage's pipeline, in a
                worker (:meth:`~mmext.multigrid.data.MultigridDataset
                .loader_costs`), read when the stage's measurement ends.
                Defaults to none.

        Returns:
            list[tuple[int, str]]: The ``(logging level, text)`` due now: the
            stage change's cost, data wait and costs per clip once measured,
            and the warning above ``threshold`` (once per run) with its fix.
        """
        self._seen += 1
        skip, iters = self._skip, self._iters
        if self._seen <= skip:
            self.change_seconds += data_seconds
        elif self._seen <= skip + iters:
            self._data += data_seconds
            self._total += total_seconds
        if self._seen != skip + iters:
            return []
        share = (min(max(self._data / self._total, 0.0), 1.0)
                 if self._total > 0 else 0.0)
        per_iter = self._total / iters
        costs = loader_costs()
        costliest = max(costs, key=costs.get) if costs else None
        per_clip = ''
        if costs and self.clips_per_iter:
            compute = 1e3 * (self._total - self._data) / (
                iters * self.clips_per_iter)
            per_clip = (f'; per clip: loader {sum(costs.values()):.1f} ms '
                        f'in a worker ({costliest} {costs[costliest]:.1f}),'
                        f' compute {compute:.1f} ms')
        out = [(logging.INFO, (
            f'Multigrid: stage change at {self.where}: '
            f'{self.change_seconds:.2f} s (loader rebuild {self._rebuild:.2f}'
            f' s, first {skip} batch(es) '
            f'{self.change_seconds - self._rebuild:.2f} s) = '
            f'{self.change_seconds / per_iter:.1f} iterations of '
            f'{per_iter:.3f} s; data wait {share:.0%} of the next '
            f'{iters} iterations{per_clip}'))]
        if self.threshold and not self.warned and share > self.threshold:
            self.warned = True
            out.append((logging.WARNING, (
                f'Multigrid: data-bound at {self.where}: data wait '
                f'{share:.0%} > data_wait_threshold {self.threshold:.0%}; ' +
                self._fix(costs, self._data / iters))))
        return out

    def _fix(self, costs: Dict[str, float], wait: float) -> str:
        """What to do about a data wait of ``wait`` s per iteration, from
        the loader's ms per clip by transform (docs/en/multigrid.md,
        "Data-bound runs")."""
        most = max(costs, key=costs.get) if costs else 'DecordDecode'
        # Decoding a video is what the frame cache removes.
        fix = 'add num_workers' + (' or decode once (mmext.CachedVideoDataset)'
                                   if most in _VIDEO_DECODERS else '') + '.'
        if not costs:
            return fix
        batch = sum(costs.values()) * (self.clips_per_iter or 1) / 1e3
        if batch < wait:  # one worker alone would have kept up
            return (f'the pipeline takes {batch:.3f} s per batch: give the '
                    f'workers cores.')
        return f'{most} costs {costs[most]:.1f} ms per clip; {fix}'
