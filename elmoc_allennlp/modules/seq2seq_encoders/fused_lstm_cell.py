"""
Per-time-step elementwise operations of the ELMo-C LSTM cell, forward and backward, in two
interchangeable implementations:

* [`TorchLstmCellKernels`](#torchlstmcellkernels): plain PyTorch operations writing into
  preallocated buffers. Works on any device and dtype and needs no compiler.
* [`NativeLstmCellKernels`](#nativelstmcellkernels): each operation fused into one C loop (gate
  nonlinearities, cell update and clipping in one pass; clipping, LayerNorm and dropout in another;
  and the same for the backward pass). CPU only, float32 and float64. The C source below is compiled
  with the system C compiler the first time it is needed and the shared library is cached on disk,
  so a machine compiles it once (about 2 s on 2 cores); if there is no compiler, or compiling,
  loading or the self-test fails, [`native_lstm_cell_kernels`](#native_lstm_cell_kernels) logs a
  warning and returns `None`, and callers use the PyTorch implementation.

The recurrence that calls these (`seq2seq_encoders.lstm_recurrence`) does the matrix
products with PyTorch; these kernels only replace the ~30 elementwise operations per step that
would otherwise each make a pass over memory and cost a dispatch.

Environment variables: `ELMOC_DISABLE_NATIVE_KERNELS=1` disables the C kernels;
`ELMOC_KERNEL_CACHE` sets the folder for the compiled library (default
`$XDG_CACHE_HOME/elmoc_allennlp` or `~/.cache/elmoc_allennlp`); `CC` names the compiler (default
`gcc`, then `cc`). A new build deletes the libraries of other builds that have not been loaded
for 30 days.

All tensors passed to the kernels are row-major contiguous 2-D `(rows, features)` blocks (the
recurrence passes slices of larger buffers along the first dimension). Gates are in the order
(input, forget, memory, output), as in allennlp's `LstmCellWithProjection`. A clip value of `None`
disables clipping. Clipping's gradient passes where the clipped value is strictly inside the clip
range (`torch.clamp` also passes it where the unclipped value equals a bound exactly).
"""
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import List, Optional

import torch

logger = logging.getLogger(__name__)


class LstmCellKernels:
    """
    The four elementwise operations of one time step. `n` is the number of sequences still
    running at this step, `C` the cell dimension and `P` the projection dimension.
    """

    name = "abstract"

    def cell_forward(
        self,
        gates: torch.Tensor,
        c_prev: torch.Tensor,
        cell: torch.Tensor,
        m: torch.Tensor,
        cell_clip: Optional[float],
    ) -> None:
        """
        `gates` `(n, 4C)`: pre-activations in, activations `(i, f, g, o)` out (in place).
        `c_prev` `(n_prev, C)` with `n_prev <= n`: previous memory of the first `n_prev` rows
        (the others start from zero). Writes `cell = clip(i * g + f * c_prev)` and
        `m = o * tanh(cell)`, both `(n, C)`.
        """
        raise NotImplementedError

    def norm_forward(
        self,
        h: torch.Tensor,
        weight: Optional[torch.Tensor],
        bias: Optional[torch.Tensor],
        eps: float,
        dropout_mask: Optional[torch.Tensor],
        out: torch.Tensor,
        next_prev: Optional[torch.Tensor],
        mean: torch.Tensor,
        rstd: torch.Tensor,
        projection_clip: Optional[float],
    ) -> None:
        """
        `h` `(n, P)`: projected state in, clipped projected state out (in place). Writes
        `out = layer_norm(h) * dropout_mask` `(n, P)` (no LayerNorm when `weight` is `None`),
        its first rows into `next_prev` `(n_next, P)` when given, and the LayerNorm statistics
        `mean`, `rstd` `(n,)`.
        """
        raise NotImplementedError

    def norm_backward(
        self,
        grad_out: torch.Tensor,
        grad_carry: torch.Tensor,
        dropout_mask: Optional[torch.Tensor],
        h: torch.Tensor,
        mean: torch.Tensor,
        rstd: torch.Tensor,
        weight: Optional[torch.Tensor],
        grad_weight: Optional[torch.Tensor],
        grad_bias: Optional[torch.Tensor],
        grad_h: torch.Tensor,
        projection_clip: Optional[float],
    ) -> None:
        """
        Backward of `norm_forward` for the gradient `grad_out + grad_carry` `(n, P)` of its
        output: writes the gradient of the unclipped projected state into `grad_h` `(n, P)` and
        adds the LayerNorm parameter gradients to the float64 accumulators `grad_weight`,
        `grad_bias` `(P,)`.
        """
        raise NotImplementedError

    def cell_backward(
        self,
        grad_m: torch.Tensor,
        grad_carry: torch.Tensor,
        act: torch.Tensor,
        cell: torch.Tensor,
        c_prev: torch.Tensor,
        grad_gates: torch.Tensor,
        cell_clip: Optional[float],
    ) -> None:
        """
        Backward of `cell_forward`. `grad_m` `(n, C)`: gradient of `m`; `grad_carry` `(n, C)`:
        gradient of `cell` from the next step in, gradient of `c_prev` out (in place; rows
        `>= n_prev` are meaningless). Writes the pre-activation gradients into `grad_gates`
        `(n, 4C)`.
        """
        raise NotImplementedError


def _limit(clip: Optional[float]) -> float:
    return float("inf") if clip is None else float(clip)


class TorchLstmCellKernels(LstmCellKernels):
    """`LstmCellKernels` written with PyTorch operations: any device, any floating dtype."""

    name = "torch"

    def cell_forward(self, gates, c_prev, cell, m, cell_clip):
        C = cell.size(1)
        input_gate, forget_gate = gates[:, :C].sigmoid_(), gates[:, C : 2 * C].sigmoid_()
        memory_init, output_gate = gates[:, 2 * C : 3 * C].tanh_(), gates[:, 3 * C :].sigmoid_()
        torch.mul(input_gate, memory_init, out=cell)
        n_prev = c_prev.size(0)
        if n_prev:
            cell[:n_prev].addcmul_(forget_gate[:n_prev], c_prev)
        if cell_clip is not None:
            cell.clamp_(-cell_clip, cell_clip)
        torch.tanh(cell, out=m)
        m.mul_(output_gate)

    def norm_forward(
        self, h, weight, bias, eps, dropout_mask, out, next_prev, mean, rstd, projection_clip
    ):
        if projection_clip is not None:
            h.clamp_(-projection_clip, projection_clip)
        if weight is not None:
            normalized, row_mean, row_rstd = torch.native_layer_norm(
                h, [h.size(1)], weight, bias, eps
            )
            mean.copy_(row_mean.view(-1))
            rstd.copy_(row_rstd.view(-1))
        else:
            normalized = h
        if dropout_mask is not None:
            torch.mul(normalized, dropout_mask, out=out)
        else:
            out.copy_(normalized)
        if next_prev is not None:
            next_prev.copy_(out[: next_prev.size(0)])

    def norm_backward(
        self,
        grad_out,
        grad_carry,
        dropout_mask,
        h,
        mean,
        rstd,
        weight,
        grad_weight,
        grad_bias,
        grad_h,
        projection_clip,
    ):
        grad = grad_out + grad_carry
        if dropout_mask is not None:
            grad.mul_(dropout_mask)
        if weight is not None:
            grad_bias.add_(grad.sum(0))
            grad, weight_part, _ = torch.ops.aten.native_layer_norm_backward(
                grad,
                h,
                [h.size(1)],
                mean.unsqueeze(1),
                rstd.unsqueeze(1),
                weight,
                None,
                [True, True, False],
            )
            grad_weight.add_(weight_part)
        if projection_clip is not None:
            torch.mul(grad, h.abs() < projection_clip, out=grad_h)
        else:
            grad_h.copy_(grad)

    def cell_backward(self, grad_m, grad_carry, act, cell, c_prev, grad_gates, cell_clip):
        C = cell.size(1)
        input_gate, forget_gate = act[:, :C], act[:, C : 2 * C]
        memory_init, output_gate = act[:, 2 * C : 3 * C], act[:, 3 * C :]
        tanh_cell = torch.tanh(cell)
        # d/d cell: from the next step, plus through m = o * tanh(cell).
        grad_cell = grad_m * output_gate
        grad_cell.mul_(1 - tanh_cell * tanh_cell).add_(grad_carry)
        if cell_clip is not None:
            grad_cell.mul_(cell.abs() < cell_clip)
        torch.mul(grad_m * tanh_cell, output_gate * (1 - output_gate), out=grad_gates[:, 3 * C :])
        torch.mul(grad_cell * memory_init, input_gate * (1 - input_gate), out=grad_gates[:, :C])
        torch.mul(
            grad_cell * input_gate, 1 - memory_init * memory_init, out=grad_gates[:, 2 * C : 3 * C]
        )
        n_prev = c_prev.size(0)
        grad_forget = grad_gates[:, C : 2 * C]
        grad_forget[n_prev:].zero_()
        if n_prev:
            torch.mul(
                grad_cell[:n_prev] * c_prev,
                forget_gate[:n_prev] * (1 - forget_gate[:n_prev]),
                out=grad_forget[:n_prev],
            )
        torch.mul(grad_cell, forget_gate, out=grad_carry)


# ------------------------------------------------------------------------------------ C kernels

# One source for float (suffix f32) and double (f64). Float uses a branch-free expm1 that the
# compiler vectorises (range reduction by ln 2, degree-8 polynomial, exponent bits; a few ulp, and
# tanh keeps its relative accuracy near 0), so no -ffast-math or vector math library is needed;
# double (used by tests) uses libm. On x86-64 with GCC each float kernel is compiled for AVX-512,
# AVX2 and baseline x86-64 and the loader picks the best one for the CPU (`target_clones`), so a
# cached library stays valid on any x86-64 machine.
_C_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && !defined(ELMOC_NO_CLONES)
#define CLONED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONED
#endif
#define PLAIN

/* exp(x) - 1 = 2^k (exp(r) - 1) + (2^k - 1) with x = k ln 2 + r, |r| <= ln 2 / 2; computing
   exp(r) - 1 by its own polynomial keeps full relative accuracy near 0 (for tanh of small x). */
static inline float expm1_f32(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* round(x / ln 2) by the 1.5 * 2^23 trick (needs IEEE arithmetic: no -ffast-math). */
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693145751953125f;
    r = r - k * 1.42860682030941723212e-6f;
    float p = 1.0f / 40320.0f;
    p = p * r + 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r; /* exp(r) - 1 */
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return scale * p + (scale - 1.0f);
}
static inline float sigmoid_f32(float x) { return 1.0f / (2.0f + expm1_f32(-x)); }
static inline float tanh_f32(float x) {
    const float e = expm1_f32(2.0f * x);
    return e / (e + 2.0f);
}
static inline double sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double tanh_f64(double x) { return tanh(x); }

/* One row of the cell update; PREV is the previous memory (cp[j], or 0 for a new sequence). */
#define CELL_FORWARD_LOOP(T, SUFFIX, PREV)                                                      \
    for (int64_t j = 0; j < C; ++j) {                                                           \
        const T i = sigmoid_##SUFFIX(gi[j]), f = sigmoid_##SUFFIX(gf[j]);                       \
        const T g = tanh_##SUFFIX(gg[j]), o = sigmoid_##SUFFIX(go[j]);                          \
        T cv = i * g + f * (PREV);                                                              \
        cv = cv > lim ? lim : (cv < -lim ? -lim : cv);                                          \
        gi[j] = i; gf[j] = f; gg[j] = g; go[j] = o;                                             \
        c[j] = cv;                                                                              \
        mr[j] = o * tanh_##SUFFIX(cv);                                                          \
    }

#define CELL_BACKWARD_LOOP(T, SUFFIX, PREV)                                                     \
    for (int64_t j = 0; j < C; ++j) {                                                           \
        const T i = ai[j], f = af[j], g = ag[j], o = ao[j], cv = c[j];                          \
        const T t = tanh_##SUFFIX(cv);                                                          \
        T gc = dc[j] + dm[j] * o * ((T)1 - t * t);                                              \
        gc = (cv < lim && cv > -lim) ? gc : (T)0;                                               \
        dout[j] = dm[j] * t * o * ((T)1 - o);                                                   \
        di[j] = gc * g * i * ((T)1 - i);                                                        \
        dg[j] = gc * i * ((T)1 - g * g);                                                        \
        df[j] = gc * (PREV) * f * ((T)1 - f);                                                   \
        dc[j] = gc * f;                                                                         \
    }

#define DEFINE_KERNELS(T, SUFFIX, KERNEL)                                                      \
                                                                                                \
KERNEL void cell_forward_##SUFFIX(T *restrict gates, const T *restrict c_prev, int64_t n_prev, \
                                  T *restrict cell, T *restrict m, int64_t n, int64_t C,        \
                                  double clip) {                                                \
    const T lim = (T)clip;                                                                      \
    for (int64_t r = 0; r < n; ++r) {                                                           \
        T *restrict gi = gates + r * 4 * C, *restrict gf = gi + C;                              \
        T *restrict gg = gi + 2 * C, *restrict go = gi + 3 * C;                                 \
        T *restrict c = cell + r * C, *restrict mr = m + r * C;                                 \
        const T *restrict cp = c_prev + r * C;                                                  \
        if (r < n_prev) {                                                                       \
            CELL_FORWARD_LOOP(T, SUFFIX, cp[j])                                                 \
        } else {                                                                                \
            CELL_FORWARD_LOOP(T, SUFFIX, (T)0)                                                  \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
KERNEL void norm_forward_##SUFFIX(T *restrict h, const T *restrict w, const T *restrict b,      \
                                  double eps, const T *restrict drop, T *restrict out,          \
                                  T *restrict next_prev, int64_t n_next, T *restrict mean,      \
                                  T *restrict rstd, int64_t n, int64_t P, double clip) {        \
    const T lim = (T)clip;                                                                      \
    for (int64_t r = 0; r < n; ++r) {                                                           \
        T *restrict x = h + r * P, *restrict y = out + r * P;                                   \
        for (int64_t j = 0; j < P; ++j) {                                                       \
            T v = x[j];                                                                         \
            x[j] = v > lim ? lim : (v < -lim ? -lim : v);                                       \
        }                                                                                       \
        if (w) {                                                                                \
            double sum = 0.0, sq = 0.0;                                                         \
            for (int64_t j = 0; j < P; ++j) sum += (double)x[j];                                \
            const double mu = sum / (double)P;                                                  \
            for (int64_t j = 0; j < P; ++j) {                                                   \
                double d = (double)x[j] - mu;                                                   \
                sq += d * d;                                                                    \
            }                                                                                   \
            const double inv = 1.0 / sqrt(sq / (double)P + eps);                                \
            const T tmu = (T)mu, tinv = (T)inv;                                                 \
            mean[r] = tmu;                                                                      \
            rstd[r] = tinv;                                                                     \
            for (int64_t j = 0; j < P; ++j) y[j] = (x[j] - tmu) * tinv * w[j] + b[j];           \
        } else {                                                                                \
            for (int64_t j = 0; j < P; ++j) y[j] = x[j];                                        \
        }                                                                                       \
        if (drop) {                                                                             \
            const T *restrict d = drop + r * P;                                                 \
            for (int64_t j = 0; j < P; ++j) y[j] *= d[j];                                       \
        }                                                                                       \
        if (r < n_next) memcpy(next_prev + r * P, y, (size_t)P * sizeof(T));                    \
    }                                                                                           \
}                                                                                               \
                                                                                                \
KERNEL void norm_backward_##SUFFIX(const T *restrict grad_out, const T *restrict carry,        \
                                   const T *restrict drop, const T *restrict h,                 \
                                   const T *restrict mean, const T *restrict rstd,              \
                                   const T *restrict w, double *restrict grad_w,                \
                                   double *restrict grad_b, T *restrict grad_h, int64_t n,      \
                                   int64_t P, double clip) {                                    \
    const T lim = (T)clip;                                                                      \
    for (int64_t r = 0; r < n; ++r) {                                                           \
        const T *restrict go = grad_out + r * P, *restrict gc = carry + r * P;                  \
        const T *restrict x = h + r * P;                                                        \
        T *restrict gh = grad_h + r * P;                                                        \
        for (int64_t j = 0; j < P; ++j) gh[j] = go[j] + gc[j];                                  \
        if (drop) {                                                                             \
            const T *restrict d = drop + r * P;                                                 \
            for (int64_t j = 0; j < P; ++j) gh[j] *= d[j];                                      \
        }                                                                                       \
        if (w) {                                                                                \
            const T mu = mean[r], inv = rstd[r];                                                \
            double sa = 0.0, sb = 0.0;                                                          \
            for (int64_t j = 0; j < P; ++j) {                                                   \
                const T xhat = (x[j] - mu) * inv;                                               \
                grad_w[j] += (double)(gh[j] * xhat);                                            \
                grad_b[j] += (double)gh[j];                                                     \
                const T gw = gh[j] * w[j];                                                      \
                sa += (double)gw;                                                               \
                sb += (double)(gw * xhat);                                                      \
            }                                                                                   \
            const T a = (T)(sa / (double)P), bq = (T)(sb / (double)P);                          \
            for (int64_t j = 0; j < P; ++j) {                                                   \
                const T xhat = (x[j] - mu) * inv;                                               \
                gh[j] = inv * (gh[j] * w[j] - a - xhat * bq);                                   \
            }                                                                                   \
        }                                                                                       \
        for (int64_t j = 0; j < P; ++j) {                                                       \
            const T v = x[j];                                                                   \
            gh[j] = (v < lim && v > -lim) ? gh[j] : (T)0;                                       \
        }                                                                                       \
    }                                                                                           \
}                                                                                               \
                                                                                                \
KERNEL void cell_backward_##SUFFIX(const T *restrict grad_m, T *restrict carry,                \
                                   const T *restrict act, const T *restrict cell,               \
                                   const T *restrict c_prev, int64_t n_prev,                    \
                                   T *restrict grad_gates, int64_t n, int64_t C, double clip) { \
    const T lim = (T)clip;                                                                      \
    for (int64_t r = 0; r < n; ++r) {                                                           \
        const T *restrict ai = act + r * 4 * C, *restrict af = ai + C;                          \
        const T *restrict ag = ai + 2 * C, *restrict ao = ai + 3 * C;                           \
        const T *restrict c = cell + r * C, *restrict dm = grad_m + r * C;                      \
        const T *restrict cp = c_prev + r * C;                                                  \
        T *restrict dc = carry + r * C;                                                         \
        T *restrict di = grad_gates + r * 4 * C, *restrict df = di + C;                         \
        T *restrict dg = di + 2 * C, *restrict dout = di + 3 * C;                               \
        if (r < n_prev) {                                                                       \
            CELL_BACKWARD_LOOP(T, SUFFIX, cp[j])                                                \
        } else {                                                                                \
            CELL_BACKWARD_LOOP(T, SUFFIX, (T)0)                                                 \
        }                                                                                       \
    }                                                                                           \
}

DEFINE_KERNELS(float, f32, CLONED)
DEFINE_KERNELS(double, f64, PLAIN) /* for tests (gradcheck) */
"""

_COMPILE_FLAGS = ["-O3", "-std=c99", "-fPIC", "-shared", "-fno-math-errno"]

_P = ctypes.c_void_p
_I = ctypes.c_int64
_D = ctypes.c_double
_SIGNATURES = {
    "cell_forward": [_P, _P, _I, _P, _P, _I, _I, _D],
    "norm_forward": [_P, _P, _P, _D, _P, _P, _P, _I, _P, _P, _I, _I, _D],
    "norm_backward": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _D],
    "cell_backward": [_P, _P, _P, _P, _P, _I, _P, _I, _I, _D],
}
_SUFFIXES = {torch.float32: "f32", torch.float64: "f64"}


def _ptr(tensor: Optional[torch.Tensor]) -> Optional[int]:
    if tensor is None:
        return None
    if not tensor.is_contiguous():
        raise ValueError("the native LSTM kernels need contiguous tensors")
    return tensor.data_ptr()


class NativeLstmCellKernels(LstmCellKernels):
    """
    `LstmCellKernels` as fused C loops (see the module docstring). CPU only, float32 and
    float64; build it with [`native_lstm_cell_kernels`](#native_lstm_cell_kernels).
    """

    name = "native"

    def __init__(self, library: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self._functions = {}
        for dtype, suffix in _SUFFIXES.items():
            for name, argtypes in _SIGNATURES.items():
                function = getattr(library, f"{name}_{suffix}")
                function.argtypes = argtypes
                function.restype = None
                self._functions[name, dtype] = function

    @staticmethod
    def supports(tensor: torch.Tensor) -> bool:
        return tensor.device.type == "cpu" and tensor.dtype in _SUFFIXES

    def cell_forward(self, gates, c_prev, cell, m, cell_clip):
        n, C = cell.shape
        self._functions["cell_forward", gates.dtype](
            _ptr(gates), _ptr(c_prev), c_prev.size(0), _ptr(cell), _ptr(m), n, C, _limit(cell_clip)
        )

    def norm_forward(
        self, h, weight, bias, eps, dropout_mask, out, next_prev, mean, rstd, projection_clip
    ):
        n, P = h.shape
        self._functions["norm_forward", h.dtype](
            _ptr(h),
            _ptr(weight),
            _ptr(bias),
            eps,
            _ptr(dropout_mask),
            _ptr(out),
            _ptr(next_prev),
            0 if next_prev is None else next_prev.size(0),
            _ptr(mean),
            _ptr(rstd),
            n,
            P,
            _limit(projection_clip),
        )

    def norm_backward(
        self,
        grad_out,
        grad_carry,
        dropout_mask,
        h,
        mean,
        rstd,
        weight,
        grad_weight,
        grad_bias,
        grad_h,
        projection_clip,
    ):
        n, P = h.shape
        self._functions["norm_backward", h.dtype](
            _ptr(grad_out),
            _ptr(grad_carry),
            _ptr(dropout_mask),
            _ptr(h),
            _ptr(mean),
            _ptr(rstd),
            _ptr(weight),
            _ptr(grad_weight),
            _ptr(grad_bias),
            _ptr(grad_h),
            n,
            P,
            _limit(projection_clip),
        )

    def cell_backward(self, grad_m, grad_carry, act, cell, c_prev, grad_gates, cell_clip):
        n, C = cell.shape
        self._functions["cell_backward", cell.dtype](
            _ptr(grad_m),
            _ptr(grad_carry),
            _ptr(act),
            _ptr(cell),
            _ptr(c_prev),
            c_prev.size(0),
            _ptr(grad_gates),
            n,
            C,
            _limit(cell_clip),
        )


def _cache_dir() -> Path:
    configured = os.environ.get("ELMOC_KERNEL_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = Path(base) / "elmoc_allennlp"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if os.access(cache, os.W_OK):
            return cache
    except OSError:
        pass
    # An unwritable home (some CI sandboxes): a private folder in the temporary directory.
    private = Path(tempfile.gettempdir()) / f"elmoc_allennlp_{os.getuid()}"
    private.mkdir(mode=0o700, exist_ok=True)
    if private.stat().st_uid != os.getuid():
        raise RuntimeError(f"{private} belongs to another user")
    return private


def _find_compiler() -> Optional[str]:
    for candidate in (os.environ.get("CC"), "gcc", "cc"):
        if candidate:
            found = shutil.which(candidate)
            if found:
                return found
    return None


def _compiler_identity(compiler: str) -> str:
    result = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout.splitlines()[0] if result.stdout else compiler


def build_native_lstm_cell_kernels(
    compiler: Optional[str] = None, cache_dir: Optional[Path] = None
) -> NativeLstmCellKernels:
    """
    Compiles (unless a library built from the same source, flags and compiler is cached) and
    loads the C kernels, then checks them against `TorchLstmCellKernels` on a small random step.
    Raises on any failure; [`native_lstm_cell_kernels`](#native_lstm_cell_kernels) is the
    cached, non-raising entry point.
    """
    compiler = compiler or _find_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc)")
    cache_dir = Path(cache_dir) if cache_dir is not None else _cache_dir()
    key = hashlib.sha256(
        "\n".join(
            [_C_SOURCE, " ".join(_COMPILE_FLAGS), _compiler_identity(compiler), platform.machine()]
        ).encode()
    ).hexdigest()[:20]
    library_path = cache_dir / f"elmoc_lstm_kernels_{key}.so"
    if not library_path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        # Build in a private folder, then rename into place: concurrent builds (pytest-xdist,
        # several trainings) never see a half-written library.
        with tempfile.TemporaryDirectory(dir=cache_dir) as build_dir:
            source = Path(build_dir) / "lstm_kernels.c"
            source.write_text(_C_SOURCE)
            built = Path(build_dir) / library_path.name
            errors = []
            # Without per-CPU versions if the toolchain cannot make them (e.g. no ifunc).
            for extra in ([], ["-DELMOC_NO_CLONES"]):
                result = subprocess.run(
                    [compiler, *_COMPILE_FLAGS, *extra, "-o", str(built), str(source), "-lm"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                if result.returncode == 0:
                    break
                errors.append(result.stderr.strip()[-1000:])
            else:
                raise RuntimeError(f"{compiler} failed: {' / '.join(errors)}")
            os.replace(built, library_path)
        _remove_stale_libraries(cache_dir, keep=library_path)
    else:
        # Marks the library as in use, so that other builds do not prune it.
        _touch(library_path)
    kernels = NativeLstmCellKernels(ctypes.CDLL(str(library_path)), library_path)
    _self_test(kernels)
    return kernels


STALE_LIBRARY_SECONDS = 30 * 24 * 3600


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:  # a read-only cache is still usable
        pass


def _remove_stale_libraries(cache_dir: Path, keep: Path) -> List[Path]:
    """
    Deletes the kernel libraries of other builds (an older source, another compiler) that no
    process has loaded for `STALE_LIBRARY_SECONDS`, so the cache does not grow with every change
    of the C source. Returns the deleted paths. Running processes keep their loaded copy.
    """
    removed = []
    now = time.time()
    for library in cache_dir.glob("elmoc_lstm_kernels_*.so"):
        if library == keep:
            continue
        try:
            if now - library.stat().st_mtime > STALE_LIBRARY_SECONDS:
                library.unlink()
                removed.append(library)
        except OSError:
            pass
    return removed


def _self_test(kernels: NativeLstmCellKernels) -> None:
    """Runs one forward and backward step of both implementations on random data."""
    generator = torch.Generator().manual_seed(0)
    reference = TorchLstmCellKernels()
    n, n_prev, C, P = 5, 3, 19, 7
    for dtype in _SUFFIXES:
        tolerance = 1e-5 if dtype == torch.float32 else 1e-10

        def rand(*size, scale=2.0):
            return scale * torch.randn(*size, generator=generator, dtype=torch.float64).to(dtype)

        gates, c_prev, h = rand(n, 4 * C), rand(n_prev, C), rand(n, P)
        weight, bias, drop = rand(P), rand(P), (rand(n, P) > 0).to(dtype) * 2
        grad_out, grad_carry_h = rand(n, P), rand(n, P)
        grad_m, grad_carry_c = rand(n, C), rand(n, C)
        results = []
        for implementation in (kernels, reference):
            buffers = {
                "gates": gates.clone(),
                "cell": torch.empty(n, C, dtype=dtype),
                "m": torch.empty(n, C, dtype=dtype),
                "h": h.clone(),
                "out": torch.empty(n, P, dtype=dtype),
                "next": torch.empty(2, P, dtype=dtype),
                "mean": torch.empty(n, dtype=dtype),
                "rstd": torch.empty(n, dtype=dtype),
                "grad_w": torch.zeros(P, dtype=torch.float64),
                "grad_b": torch.zeros(P, dtype=torch.float64),
                "grad_h": torch.empty(n, P, dtype=dtype),
                "carry": grad_carry_c.clone(),
                "grad_gates": torch.empty(n, 4 * C, dtype=dtype),
            }
            b = buffers
            implementation.cell_forward(b["gates"], c_prev, b["cell"], b["m"], 1.5)
            implementation.norm_forward(
                b["h"], weight, bias, 1e-5, drop, b["out"], b["next"], b["mean"], b["rstd"], 2.5
            )
            implementation.norm_backward(
                grad_out,
                grad_carry_h,
                drop,
                b["h"],
                b["mean"],
                b["rstd"],
                weight,
                b["grad_w"],
                b["grad_b"],
                b["grad_h"],
                2.5,
            )
            implementation.cell_backward(
                grad_m, b["carry"], b["gates"], b["cell"], c_prev, b["grad_gates"], 1.5
            )
            results.append(buffers)
        for name in results[0]:
            if not torch.allclose(
                results[0][name], results[1][name], atol=tolerance, rtol=tolerance
            ):
                difference = (results[0][name] - results[1][name]).abs().max().item()
                raise RuntimeError(
                    f"self-test failed for {dtype}: '{name}' differs by {difference:.3g}"
                )


_lock = threading.Lock()
_loaded: Optional[NativeLstmCellKernels] = None
_attempted = False


def native_lstm_cell_kernels() -> Optional[NativeLstmCellKernels]:
    """
    The C kernels, built on first use (see `build_native_lstm_cell_kernels`), or `None` when they
    are disabled (`ELMOC_DISABLE_NATIVE_KERNELS=1`) or cannot be built, in which case a warning is
    logged once and callers should use `TorchLstmCellKernels`.
    """
    global _loaded, _attempted
    if _attempted:
        return _loaded
    with _lock:
        if not _attempted:
            if os.environ.get("ELMOC_DISABLE_NATIVE_KERNELS", "").lower() in ("1", "true", "yes"):
                logger.info("Native LSTM kernels disabled by ELMOC_DISABLE_NATIVE_KERNELS.")
            else:
                try:
                    _loaded = build_native_lstm_cell_kernels()
                    logger.info("Loaded native LSTM kernels from %s", _loaded.path)
                except Exception as error:  # any failure means: use the PyTorch kernels
                    logger.warning(
                        "Could not build the native LSTM cell kernels (%s: %s); using the slower "
                        "PyTorch-operations implementation of the same computation instead.",
                        type(error).__name__,
                        error,
                    )
            _attempted = True
    return _loaded
