"""
The log-normalizer of the von Mises-Fisher distribution, differentiable in torch:
log C_m(κ) = (m/2 − 1) log κ − (m/2) log(2π) − log I_{m/2−1}(κ).

I_v over- and underflows float64 at word-vector dimensions (m = 300), so `log_bessel_iv` uses the
uniform asymptotic (Debye) expansion for large order with two correction terms (Abramowitz &
Stegun 9.7.7; DLMF 10.41.3): accurate to 1e-4 for v ≥ 5, hence m ≥ `MIN_VMF_DIMENSION`.
"""
import math

import torch

MIN_VMF_DIMENSION = 12  # the smallest m with m/2 - 1 >= 5


def log_bessel_iv(order: float, kappa: torch.Tensor) -> torch.Tensor:
    """
    log I_v(κ) for a fixed order `v > 0`, elementwise.

    # Parameters

    order : `float`
        The order v (m/2 − 1 for the vMF normalizer in dimension m).
    kappa : `torch.Tensor`
        Positive values, any shape.
    """
    if order <= 0:
        raise ValueError(f"log_bessel_iv needs a positive order, got {order}")
    z = kappa / order
    root = torch.sqrt(1.0 + z * z)
    eta = root + torch.log(z / (1.0 + root))
    t = 1.0 / root
    t2 = t * t
    u1 = t * (3.0 - 5.0 * t2) / 24.0
    u2 = t2 * (81.0 - 462.0 * t2 + 385.0 * t2 * t2) / 1152.0
    series = 1.0 + u1 / order + u2 / (order * order)
    return (
        order * eta
        - 0.5 * math.log(2.0 * math.pi * order)
        + 0.5 * torch.log(t)
        + torch.log(series)
    )


def von_mises_fisher_log_normalizer(kappa: torch.Tensor, dimension: int) -> torch.Tensor:
    """log C_m(κ) in `dimension` = m dimensions, elementwise over `kappa`."""
    order = dimension / 2.0 - 1.0
    return (
        order * torch.log(kappa)
        - (dimension / 2.0) * math.log(2.0 * math.pi)
        - log_bessel_iv(order, kappa)
    )
