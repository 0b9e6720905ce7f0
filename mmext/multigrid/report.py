"""What a multigrid plan trains, as data and as the logged table.

:func:`summary` is the one description of a plan: the hook logs it as
:func:`describe`'s table when training starts, and
``tools/analysis/multigrid_schedule.py`` prints the table or, with
``--json``, the summary itself.
"""
from typing import List, Sequence

__all__ = ['stage_rows', 'summary', 'describe']


def stage_rows(plan) -> List[dict]:
    """One dict per stage of ``plan``.

    Keys of :meth:`MultigridStage.to_dict` plus ``batch_size`` (per
    process), ``effective_batch_size`` (x world size x
    ``accumulative_counts``), ``short_cycle_batch_sizes``, ``iters`` (exact
    per stage, or None) and ``estimated_iters`` (in recipe iterations per
    epoch).

    Args:
        plan (MultigridPlan): The plan.
    """
    out = []
    for s in plan.stages:
        d = s.to_dict()
        d['batch_size'] = plan.base_batch * s.shape.batch_factor
        d['effective_batch_size'] = d['batch_size'] * plan.batch_multiplier
        d['short_cycle_batch_sizes'] = plan.batch_sizes(s)
        d['iters'] = (plan.iters_per_epoch(s) * s.num_epochs
                      if plan.exact else None)
        d['estimated_iters'] = plan.estimated_iters(s)
        out.append(d)
    return out


def summary(plan, warnings: Sequence[str] = ()) -> dict:
    """The plan as plain data (the schedule tool's ``--json``).

    Args:
        plan (MultigridPlan): The plan.
        warnings (Sequence[str]): Messages of the checks, included as is.

    Returns:
        dict: ``base`` (batch, effective batch, T, S), ``recipe_epochs``,
        ``epochs``, ``exact``, ``clips_per_process`` (dataset indices:
        videos of a ``RepeatAugDataset``), ``clips_per_sample``, ``iters`` and
        ``recipe_iters`` (exact counts, None without them),
        ``estimated_iters`` (in recipe iterations per epoch),
        ``iteration_saving``, ``flops_ratio``, ``world_size``,
        ``accumulative_counts``, ``warnings`` and ``stages``
        (:func:`stage_rows`).
    """
    exact = plan.exact
    return dict(
        base=dict(batch_size=plan.base_batch,
                  effective_batch_size=plan.base_batch *
                  plan.batch_multiplier,
                  clip_len=plan.base_clip_len,
                  crop_size=plan.base_crop_size),
        recipe_epochs=plan.recipe_epochs,
        epochs=plan.max_epochs,
        exact=exact,
        clips_per_process=plan.samples_per_rank,
        clips_per_sample=plan.clips_per_sample,
        iters=plan.max_iters if exact else None,
        recipe_iters=(plan.recipe_epochs * plan.recipe_iters_per_epoch
                      if exact else None),
        estimated_iters=sum(plan.estimated_iters(s) for s in plan.stages),
        iteration_saving=plan.iteration_saving(),
        flops_ratio=plan.flops_ratio(),
        world_size=plan.world_size,
        accumulative_counts=plan.accumulative_counts,
        warnings=list(warnings),
        stages=stage_rows(plan))


def describe(plan) -> str:
    """A table of the stages of ``plan``, as the hook logs and the tool
    prints it (rendered from :func:`summary`)."""
    info = summary(plan)
    exact, base = info['exact'], info['base']
    lines = [
        f'base (B, T, S) = ({base["batch_size"]}, {base["clip_len"]}, '
        f'{base["crop_size"]}), {info["recipe_epochs"]} recipe epochs; '
        f'batch = per process, eff. batch = batch x world size '
        f'{info["world_size"]} x accumulative_counts '
        f'{info["accumulative_counts"]}',
        f'{"lr stage":>8} {"batch":>6} {"eff. batch":>10} {"T":>4} '
        f'{"S":>4} {"start":>6} '
        f'{"end":>5} '
        + (f'{"iters":>7} ' if exact else
           f'{"iters (x recipe iters/epoch)":>28} ')
        + f'{"rel. LR":>8}  short-cycle (batch, S)'
    ]
    for d in info['stages']:
        cycle = [(b, x['crop_size'])
                 for b, x in zip(d['short_cycle_batch_sizes'],
                                 d['short_cycle'])]
        iters = (f'{d["iters"]:>7} ' if exact else
                 f'{d["estimated_iters"]:>28.2f} ')
        lines.append(
            f'{d["lr_stage"]:>8} {d["batch_size"]:>6} '
            f'{d["effective_batch_size"]:>10} {d["clip_len"]:>4} '
            f'{d["crop_size"]:>4} {d["start_epoch"]:>6} '
            f'{d["end_epoch"]:>5} {iters}{d["lr_factor"]:>8.4g}  {cycle}')
    saving = (f'{info["iteration_saving"]:.2f}x fewer iterations')
    flops = f'FLOPs x{info["flops_ratio"]:.3f} of the recipe'
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
            f'total: {info["epochs"]} epochs, {info["estimated_iters"]:.1f} '
            f'x recipe iters/epoch vs {info["recipe_epochs"]} -> {saving} '
            f'(estimate: incomplete batches ignored; give the dataset for '
            f'exact counts); {flops}')
    return '\n'.join(lines)
