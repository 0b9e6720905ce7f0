"""AGVM statistics: gradient variance, modulation factors and their EMA.

Pure tensor math, no runner and no torch.distributed: the optimizer wrapper
gathers per-module dot products and squared norms of the two halves'
gradients and hands them here. Arguments are trusted (the wrapper validates
its options once, when it is built).

Source: Xue et al., "Large-batch Optimization for Dense Visual Predictions",
NeurIPS 2022 (arXiv 2210.11078), Sec. 3 (the AGVM update rule), and the
reference implementation (github.com/Sense-X/AGVM,
``agvm/optim/agvm_optimizer_hook.py``, ``_agvm_update``):
d_i = 1 - cos(G_A^(i), G_B^(i)), mu_i = sqrt(clamp(d_0 / d_i, lo, hi)),
s_i <- alpha * s_i + (1 - alpha) * mu_i with s_i = 1 at the start.
"""
import math
from typing import Dict, NamedTuple, Sequence, Tuple

import torch
from torch import Tensor

__all__ = [
    'DEFAULT_RATIO_RANGE', 'HalfStatistics', 'half_dot_from_norms',
    'gradient_variance', 'modulation_factors', 'ModulationEMA', 'split_ranks'
]

# Clamp of d_anchor / d_i before the square root (reference ``_agvm_update``:
# ``clamp(0.5, 10)``).
DEFAULT_RATIO_RANGE = (0.5, 10.0)

# Below this a gradient variance counts as zero (identical halves): float64
# cosine of identical vectors is 1 up to ~1e-16.
_ZERO_VARIANCE = 1e-12


class HalfStatistics(NamedTuple):
    """Per-module statistics of the two halves' mean gradients.

    All fields are float64 tensors of shape (M,), M = number of modules.

    Attributes:
        dot (Tensor): G_A^(i) . G_B^(i).
        sq_norm_a (Tensor): |G_A^(i)|^2.
        sq_norm_b (Tensor): |G_B^(i)|^2.
    """
    dot: Tensor
    sq_norm_a: Tensor
    sq_norm_b: Tensor


def half_dot_from_norms(sq_norm_sum: Tensor, sq_norm_a: Tensor,
                        sq_norm_b: Tensor) -> Tensor:
    """Dot product of two vectors from the norms of them and of their sum.

    ``a . b = (|a + b|^2 - |a|^2 - |b|^2) / 2``. With half means g_A, g_B of
    equal-sized halves and global mean m = (g_A + g_B) / 2 this is
    ``(4|m|^2 - |g_A|^2 - |g_B|^2) / 2``, since |g_A + g_B|^2 = 4|m|^2:
    only per-module scalars have to cross the halves.

    Args:
        sq_norm_sum (Tensor): |a + b|^2, shape (M,).
        sq_norm_a (Tensor): |a|^2, shape (M,).
        sq_norm_b (Tensor): |b|^2, shape (M,).

    Returns:
        Tensor: a . b, shape (M,), same dtype as the inputs.
    """
    return (sq_norm_sum - sq_norm_a - sq_norm_b) / 2


def gradient_variance(stats: HalfStatistics) -> Tuple[Tensor, Tensor]:
    """Gradient variance proxy d_i = 1 - cos(G_A^(i), G_B^(i)).

    Source: paper Sec. 3; reference implementation ``_agvm_update``.

    Args:
        stats (HalfStatistics): Per-module dot products and squared norms.

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
    """Modulation factors mu_i = sqrt(clamp(d_anchor / d_i, lo, hi)).

    Source: paper Sec. 3; reference ``_agvm_update`` (lo=0.5, hi=10; it
    adds 1e-6 to both d's instead of handling zeros explicitly).

    A zero d_i (identical halves) gives the upper bound, unless d_anchor is
    zero too (then the ratio is 1). Modules that are not ``valid`` get NaN,
    which :meth:`ModulationEMA.update` skips.

    Args:
        d (Tensor): Gradient variances, shape (M,).
        valid (Tensor): Bool mask, shape (M,), from :func:`gradient_variance`.
        anchor (int): Index of the anchor module (the backbone in the paper).
        ratio_range (tuple[float, float]): ``(lo, hi)`` clamp of the ratio.

    Returns:
        Tensor: mu, float64, shape (M,); all NaN if the anchor is not valid.
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
    """Exponential moving average s_i of the modulation factors.

    Source: paper Sec. 3; reference ``after_train_iter`` (alpha=0.97).

    ``s_i <- alpha * s_i + (1 - alpha) * mu_i``, s_i = 1 initially. Updates
    are only given where mu_i is finite: a module without a valid measurement
    keeps its factor, so a factor is never non-finite. The factors are a
    float64 host tensor: the optimizer wrapper reads them as Python LR
    multipliers every step, which would be a device sync per step on a GPU.

    Args:
        num_modules (int): M >= 1, the number of modulated modules.
        momentum (float): alpha in [0, 1).
    """

    def __init__(self, num_modules: int, momentum: float = 0.97):
        self.momentum = momentum
        self.factors = torch.ones(num_modules, dtype=torch.float64)
        self.num_updates = 0

    def update(self, mu: Tensor) -> Tensor:
        """Blend one measurement into the average.

        Args:
            mu (Tensor): Shape (M,), on the host; NaN entries are skipped.

        Returns:
            Tensor: The new factors s, float64, shape (M,).
        """
        mu = mu.double()
        finite = torch.isfinite(mu)
        blended = self.momentum * self.factors + (1 - self.momentum) * mu
        self.factors = torch.where(finite, blended, self.factors)
        self.num_updates += int(finite.any())
        return self.factors

    def state_dict(self) -> Dict:
        """Return the factors (float64 tensor (M,)) and update count."""
        return dict(factors=self.factors.clone(),
                    num_updates=self.num_updates)

    def load_state_dict(self, state: Dict) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: If the saved number of modules differs.
        """
        # Checkpoints may be mapped to the GPU (mmengine's resume does);
        # the factors are host scalars, consumed as Python LRs.
        factors = torch.as_tensor(state['factors'], dtype=torch.float64,
                                  device='cpu')
        if factors.shape != self.factors.shape:
            raise ValueError(
                f'the AGVM state has {factors.numel()} factors, the wrapper '
                f'modulates {self.factors.numel()} modules')
        self.factors = factors.clone()
        self.num_updates = int(state['num_updates'])


def split_ranks(world_size: int) -> Tuple[Sequence[int], Sequence[int]]:
    """Split data-parallel ranks into two equal halves A and B.

    With an odd world size the last rank is in neither half: both halves
    keep the same number of ranks, so the cosine compares equally noisy means
    (unequal halves would bias d_i), while that rank's gradient still enters
    the update.

    Args:
        world_size (int): Number of processes, >= 2.

    Returns:
        tuple[list[int], list[int]]: Ranks of half A and of half B.

    Raises:
        ValueError: If ``world_size < 2``.
    """
    if world_size < 2:
        raise ValueError(f'two halves need world_size >= 2, got {world_size}')
    half = world_size // 2
    return list(range(half)), list(range(half, 2 * half))
