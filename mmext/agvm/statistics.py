"""AGVM statistics: gradient variance, modulation factors and their EMA.

Source: Xue et al., NeurIPS 2022 (arXiv 2210.11078), Sec. 3, and Sense-X/AGVM
``agvm/optim/agvm_optimizer_hook.py`` (``_agvm_update``):
d_i = 1 - cos(G_A^(i), G_B^(i)), mu_i = sqrt(clamp(d_0 / d_i, lo, hi)),
s_i <- alpha * s_i + (1 - alpha) * mu_i with s_i = 1 at the start; and
:data:`STATISTICS`, what the cosine is taken of.
Arguments are trusted: the wrapper validates its options when it is built."""
import inspect
import math
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = [
    'DEFAULT_RATIO_RANGE', 'HalfStatistics', 'half_dot_from_norms',
    'gradient_variance', 'modulation_factors', 'ModulationEMA', 'split_ranks',
    'Statistic', 'STATISTICS', 'raw_gradient', 'adam_precondition',
    'keeps_adam_moments'
]

# Clamp of d_anchor / d_i (reference ``_agvm_update``: ``clamp(0.5, 10)``).
DEFAULT_RATIO_RANGE = (0.5, 10.0)

# Below this d_i counts as zero (float64 cos of equal vectors: 1 +- 1e-16).
_ZERO_VARIANCE = 1e-12


class HalfStatistics(NamedTuple):
    """Per-module statistics of the halves A and B.

    Attributes:
        dot (Tensor): ``G_A^(i) . G_B^(i)``, float64, shape (M,).
        sq_norm_a (Tensor): ``|G_A^(i)|^2``, float64, shape (M,).
        sq_norm_b (Tensor): ``|G_B^(i)|^2``, float64, shape (M,).
    """
    dot: Tensor
    sq_norm_a: Tensor
    sq_norm_b: Tensor


def half_dot_from_norms(sq_norm_sum: Tensor, sq_norm_a: Tensor,
                        sq_norm_b: Tensor) -> Tensor:
    """Dot products of the halves from squared norms.

    ``a . b = (|a + b|^2 - |a|^2 - |b|^2) / 2``.

    Args:
        sq_norm_sum (Tensor): ``|a + b|^2`` per module, shape (M,).
        sq_norm_a (Tensor): ``|a|^2``, shape (M,).
        sq_norm_b (Tensor): ``|b|^2``, shape (M,).

    Returns:
        Tensor: ``a . b``, shape (M,).
    """
    return (sq_norm_sum - sq_norm_a - sq_norm_b) / 2


def gradient_variance(stats: HalfStatistics) -> Tuple[Tensor, Tensor]:
    """Gradient variance ``d_i = 1 - cos(G_A^(i), G_B^(i))`` (paper Sec. 3).

    Args:
        stats (HalfStatistics): The halves' statistics.

    Returns:
        tuple[Tensor, Tensor]: ``d`` (float64, shape (M,), in [0, 2]) and
        ``valid`` (bool, shape (M,)): False where a half's gradient is zero or
        any input is non-finite; ``d`` is 0 there and must not be used.
    """
    dot, sq_a, sq_b = (t.double() for t in stats)
    denom = (sq_a * sq_b).sqrt()
    valid = (torch.isfinite(dot) & torch.isfinite(denom) & (sq_a > 0)
             & (sq_b > 0))
    cos = torch.where(valid, dot / torch.where(valid, denom, 1.0), 1.0)
    # Rounding (and the norm identity) can push |cos| slightly above 1.
    d = 1 - cos.clamp(-1.0, 1.0)
    return d, valid


def modulation_factors(d: Tensor, valid: Tensor, anchor: int,
                       ratio_range: Tuple[float, float] = DEFAULT_RATIO_RANGE
                       ) -> Tensor:
    """Modulation factors ``mu_i = sqrt(clamp(d_anchor / d_i, lo, hi))``.

    Paper Sec. 3. A zero ``d_i`` gives ``hi`` (the ratio is 1 if
    ``d_anchor`` is zero too; the reference adds 1e-6 to both d's instead).

    Args:
        d (Tensor): Gradient variances, shape (M,)
            (:func:`gradient_variance`).
        valid (Tensor): Bool, shape (M,), from :func:`gradient_variance`.
        anchor (int): Index of the anchor module (the backbone in the paper).
        ratio_range (tuple[float, float]): ``(lo, hi)``, the clamp of
            ``d_anchor / d_i``. Defaults to :data:`DEFAULT_RATIO_RANGE`.

    Returns:
        Tensor: mu, float64, shape (M,); NaN where not ``valid``, and all NaN
        if the anchor is not valid.
    """
    lo, hi = ratio_range
    d = d.double()
    d_anchor = d[anchor]
    safe_d = d.clamp(min=_ZERO_VARIANCE)
    ratio = torch.where(d > _ZERO_VARIANCE, d_anchor / safe_d,
                        torch.full_like(d, hi))
    if float(d_anchor) <= _ZERO_VARIANCE:
        ratio = torch.where(d > _ZERO_VARIANCE, ratio.new_tensor(lo),
                            ratio.new_tensor(1.0))
    mu = ratio.clamp(lo, hi).sqrt()
    if not bool(valid[anchor]):
        return torch.full_like(mu, math.nan)
    return torch.where(valid, mu, torch.full_like(mu, math.nan))


class ModulationEMA:
    """EMA s_i of the modulation factors; s_i = 1 initially (paper Sec. 3).

    Attributes:
        factors (Tensor): s, a float64 host tensor of shape (M,), read as LR
            multipliers every step.
        num_updates (int): Updates that changed some factor.

    Args:
        num_modules (int): M >= 1.
        momentum (float): alpha in [0, 1). Defaults to 0.97.
    """

    def __init__(self, num_modules: int, momentum: float = 0.97):
        self.momentum = momentum
        self.factors = torch.ones(num_modules, dtype=torch.float64)
        self.num_updates = 0

    def update(self, mu: Tensor) -> Tensor:
        """Blend factors into the average: ``s = alpha s + (1 - alpha) mu``.

        Args:
            mu (Tensor): Shape (M,), on the host; NaN entries keep their s_i.

        Returns:
            Tensor: The factors s, float64, shape (M,).
        """
        mu = mu.double()
        finite = torch.isfinite(mu)
        blended = self.momentum * self.factors + (1 - self.momentum) * mu
        self.factors = torch.where(finite, blended, self.factors)
        self.num_updates += int(finite.any())
        return self.factors

    def state_dict(self) -> Dict:
        """The EMA's state.

        Returns:
            dict: ``factors`` (float64 tensor, shape (M,)) and ``num_updates``.
        """
        return dict(factors=self.factors.clone(),
                    num_updates=self.num_updates)

    def load_state_dict(self, state: Dict) -> None:
        """Restore :meth:`state_dict` output.

        Of as many modules: the wrapper compares the module names first.

        Args:
            state (dict): A :meth:`state_dict`, possibly mapped to another
                device.
        """
        # mmengine's resume may map the checkpoint to the GPU.
        self.factors = torch.as_tensor(state['factors'], dtype=torch.float64,
                                       device='cpu').clone()
        self.num_updates = int(state['num_updates'])


def split_ranks(world_size: int) -> Tuple[Sequence[int], Sequence[int]]:
    """The ranks of the two equal halves A and B.

    Args:
        world_size (int): Processes, >= 2.

    Returns:
        tuple[list[int], list[int]]: The ranks of A and of B; with an odd
        world size the last rank is in neither.
    """
    half = world_size // 2
    return list(range(half)), list(range(half, 2 * half))


def raw_gradient(optimizer: Optimizer, params: Sequence[Tensor],
                 flat: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """The gradients as they are (the paper's SGD statistic).

    Args:
        optimizer (Optimizer): Unused (the :class:`Statistic` signature).
        params (Sequence[Tensor]): Unused.
        flat (Tensor): The gradients, shape (sum of numels,).
        out (Tensor, optional): Where to copy them (may be ``flat``). Defaults
            to None.

    Returns:
        Tensor: ``flat``, or ``out`` holding it.
    """
    return flat if out is None or out is flat else out.copy_(flat)


def adam_precondition(optimizer: Optimizer, params: Sequence[Tensor],
                      flat: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Adam-preconditioned gradients ``g / (sqrt(v) + eps)``, AGVM's AdamW
    mode.

    v is the stored ``exp_avg_sq``, or ``max_exp_avg_sq`` in a group with
    ``amsgrad`` (AMSGrad steps along the running maximum); the reference
    blends in the current g first, which would differ between ranks.
    Parameters without v yet are left as they are.

    Args:
        optimizer (Optimizer): The optimizer holding v and ``eps``.
        params (Sequence[Tensor]): The parameters, in the order of ``flat``.
        flat (Tensor): Their gradients, shape (sum of numels,).
        out (Tensor, optional): Where to write the result (may be ``flat``).
            Defaults to None (a new tensor).

    Returns:
        Tensor: The preconditioned gradients, shape of ``flat``.
    """
    eps_of, amsgrad = {}, set()
    for group in optimizer.param_groups:
        for p in group['params']:
            eps_of[id(p)] = group.get('eps', 1e-8)
            # torch's flag; pytorch_optimizer's (AdaBound, DiffGrad, ...).
            if group.get('amsgrad') or group.get('ams_bound'):
                amsgrad.add(id(p))
    out = raw_gradient(optimizer, params, flat,
                       torch.empty_like(flat) if out is None else out)
    offset = 0
    for param in params:
        chunk = out[offset:offset + param.numel()]
        offset += param.numel()
        state = optimizer.state.get(param, {})
        v = state.get('max_exp_avg_sq' if id(param) in amsgrad
                      else 'exp_avg_sq', state.get('exp_avg_sq'))
        if v is not None:
            chunk.div_(v.sqrt().add_(eps_of[id(param)]).reshape(-1).to(
                out.dtype))
    return out


def keeps_adam_moments(optimizer: Optimizer) -> bool:
    """Whether an optimizer keeps Adam's second moment ``exp_avg_sq``.

    The state is empty until the first step, so an optimizer of the same
    class and defaults steps once on a one-element tensor: Adam, AdamW,
    NAdam, RAdam and LAMB keep it; Adamax (``exp_inf``) and Lion do not. A
    class its defaults cannot rebuild counts if its groups have ``betas``.
    (Not for ZeRO, which shards the state.)

    Args:
        optimizer (Optimizer): The optimizer.

    Returns:
        bool: Whether ``statistic='adam'`` can read it.
    """
    kind = type(optimizer)
    signature = inspect.signature(kind.__init__).parameters.values()
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature)
    names = {p.name for p in signature}
    options = {key: value for key, value in optimizer.defaults.items()
               if takes_any or key in names}
    like = next(param for group in optimizer.param_groups
                for param in group['params'])
    probe = like.new_zeros(1).requires_grad_()
    probe.grad = torch.ones_like(probe)
    try:
        probed = kind([probe], **options)
        probed.step()
    except (TypeError, ValueError, RuntimeError, NotImplementedError):
        return any('betas' in group for group in optimizer.param_groups)
    return 'exp_avg_sq' in probed.state[probe]


class Statistic(NamedTuple):
    """One row of :data:`STATISTICS`: what AGVM takes the cosine of.

    Attributes:
        precondition (Callable[..., Tensor]): ``precondition(optimizer,
            params, flat, out=None)``, the vector whose cosine is measured,
            from the gradients ``flat`` of ``params``, written to ``out`` if
            given (which may be ``flat``): linear and the same on every rank,
            so the halves' norms give its dot product
            (:func:`half_dot_from_norms`).
        accepts (Callable[[Optimizer], bool], optional): Whether an
            optimizer can give the statistic, checked by the wrapper (None:
            any; a statistic with one reads the optimizer's state, so ZeRO,
            which shards it, is refused). Defaults to None.
        optimizer_kind (str): The optimizers it accepts, for the error
            message. Defaults to ``'any optimizer'``.
    """
    precondition: Callable[..., Tensor]
    accepts: Optional[Callable[[Optimizer], bool]] = None
    optimizer_kind: str = 'any optimizer'


# The wrapper's ``statistic`` option: name -> what AGVM takes the cosine of.
STATISTICS = {
    'grad': Statistic(raw_gradient),
    'adam': Statistic(adam_precondition, keeps_adam_moments,
                      'exp_avg_sq (Adam, AdamW, LAMB)'),
}
