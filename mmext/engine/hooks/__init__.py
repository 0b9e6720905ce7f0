from .multigrid_hook import MultigridHook  # noqa: F401
