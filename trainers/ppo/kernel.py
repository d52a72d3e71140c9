"""PPO's loss and its gradients in one pass over each sample: a hand-written Triton kernel for
``train.compile: kernel`` (docs/training.md, the update's bytes).

The update is memory-bound: the per-stock scorer's layers are ``[k + 2 → 8 → 1]``, so what a
gradient step costs is the bytes it moves. Autograd, even fused by Inductor, writes each
stock's hidden layer, saves it for the backward, gathers the minibatch into a copy and passes
over ``[samples, stocks]`` once per elementwise op of the loss: about 12 times the bytes any
update must read (the sample's state, actions, old log-probabilities, advantages and value
target). This kernel reads each sample where the rollout left it (through the minibatch's
indices, no gathered copy), builds the per-stock inputs, runs the scorer and the critic
forward, the clipped surrogate and the value loss, and their backward, in registers: the
hidden layers are never written out, and each layer's gradient is a small matmul over the
block's rows. What it writes is one
partial gradient per program, summed by torch afterwards.

It covers the shipped shape: a per-stock scorer (``policy: shared``) and a critic of one
hidden layer each, advantages per stock (``credit: per_stock``). :func:`fits` says whether a model has it;
:func:`kernel_loss` falls back to autograd on :func:`trainers.ppo.loss.ppo_loss` otherwise.
The result agrees with autograd's within float rounding
(tests/trainers/ppo/test_kernel.py runs the kernel in Triton's interpreter on the CPU).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from trainers.ppo.batched import BatchedNets
from trainers.ppo.loss import ppo_loss

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read once, when Triton is first imported
try:
    import triton
    import triton.language as tl
except ImportError:  # an install without Triton: no kernel, the fallback only
    triton = None

LossFn = Callable[..., torch.Tensor]
"""A loss with :func:`trainers.ppo.loss.ppo_loss`'s arguments."""
BLOCKS = 16
"""Blocks a program walks at least: each program writes one partial gradient (the critic's
alone is ``state × hidden`` floats), so fewer programs move fewer bytes."""
PROGRAMS = 128
"""Programs per agent at most (the headline's 32,768 samples: 16 agents × 128 programs fill an H100's 132
multiprocessors many times over)."""


class Launch(NamedTuple):
    """How the kernel is built: warps per program, the precision of its matmuls (``ieee``: full
    FP32 on the CUDA cores; ``tf32x3``: three TF32 products on the tensor cores, about FP32's
    precision), and the stages of its loops' software pipeline (1: none; Triton's default on
    sm_90 is 3: loads issued iterations ahead, at the cost of instructions, registers and shared
    memory), which Triton's interpreter ignores; then the shape of its work, which sets the order
    of its sums: the samples a program takes at once (``block``: at least 16, for the critic's
    backward is a ``tl.dot`` over them, and a ``tl.dot`` of FP32 sums at least 16 terms), the
    stocks the scorer takes at once (``block × stocks`` rows of its inputs), and the state
    entries the critic's first layer reads at once (``chunk``)."""

    warps: int = 4
    dot: str = "ieee"
    stages: int = 3
    block: int = 16
    stocks: int = 8
    chunk: int = 64

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Launch:
        """A build as its ``_asdict()`` recorded it (a record without the shape's fields predates
        them: the shipped shape)."""
        return cls(**{name: fields[name] for name in cls._fields if name in fields})

    def text(self) -> str:
        """The build in words, for reports."""
        return (f"{self.warps} warps, `{self.dot}` matmuls, {self.stages} stage{'s' if self.stages > 1 else ''}, "
                f"{self.block} samples × {self.stocks} stocks at a time, the state {self.chunk} entries at a time")


SHAPES = ((16, 8, 64), (32, 4, 32))
"""The work's shapes built (``block``, ``stocks``, ``chunk``): the first as shipped; the second
has 7% fewer instructions a sample, and no spills, compiled by the device's Triton 3.6.0
(docs/training.md, the update in one kernel)."""
LAUNCHES = tuple(Launch(4, dot, stages, *shape) for shape in SHAPES for dot in ("ieee", "tf32x3") for stages in (3, 1))
"""The builds the device script times side by side (benchmarks/perf/gpu_update.py::launch_rows);
what ptxas reports for each: docs/training.md, the update in one kernel. All of 4 warps: with
255 registers a thread, two programs of 4 warps fill a multiprocessor's registers as one of 8
does, and 8 warps cost 1.4 to 1.9 times the instructions a sample (benchmarks/perf/gpu_kernel.py)."""
LAUNCH = LAUNCHES[0]
"""The build :func:`kernel_loss` launches, read at each launch (the device script trains its
headline with the fastest of :data:`LAUNCHES` it measured)."""


def runs_on(device: torch.device) -> bool:
    """Whether the kernel runs on ``device``: compiled on CUDA; on the CPU only in Triton's
    interpreter (``TRITON_INTERPRET=1`` when Triton was first imported; slow, for checking)."""
    return triton is not None and (device.type == "cuda" or (device.type == "cpu" and _interpreted()))


def _interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (``triton.knobs`` from Triton 3.4 on; the
    variable itself before)."""
    knobs = getattr(triton, "knobs", None)
    return bool(knobs.runtime.interpret) if knobs is not None else os.environ.get("TRITON_INTERPRET") == "1"


def fits(nets: BatchedNets, batch: tuple[torch.Tensor, ...]) -> bool:
    """Whether the kernel computes ``nets``' loss on ``batch``: a per-stock scorer and a critic,
    one hidden layer each, advantages per stock (``credit: per_stock``), every tensor float32 and
    laid out row by row, on a device it :func:`runs_on`."""
    per_action = batch[2].dim() == batch[1].dim()
    flat = all(x.dtype == torch.float32 and x.is_contiguous() for x in (*batch, *nets.params))
    return (per_action and flat and nets.layout is not None and len(nets.actor) == 2 and len(nets.critic) == 2
            and runs_on(nets.params[0].device))


def _body(obs, act, lp_old, adv, ret, idx, wgt, log_std, w1, b1, w2, b2, c1, cb1, c2, cb2, price_ref, clip, part,
          B, cash_scale, shares_scale, value_coef,
          S: tl.constexpr, NS: tl.constexpr, K: tl.constexpr, IP: tl.constexpr, HA: tl.constexpr, HAP: tl.constexpr,
          HC: tl.constexpr, HCP: tl.constexpr, BM: tl.constexpr, SC: tl.constexpr, CK: tl.constexpr, P: tl.constexpr,
          DOT: tl.constexpr):
    """Agent ``program_id(0)``'s samples, blocks ``program_id(1)``, ``+ P``, ... of ``BM``, into
    its row of ``part``: the gradients in parameter order, then the surrogate's and the value
    loss's sums. Stocks go ``SC`` at a time, as ``BM·SC`` rows of the scorer's inputs, and the
    state ``CK`` entries at a time, so that a thread holds a few numbers of each tensor; every
    ``tl.dot`` at the input precision ``DOT``."""
    a, p = tl.program_id(0), tl.program_id(1)
    NI: tl.constexpr = K + 2  # the scorer's inputs
    o_c1: tl.constexpr = NS + NI * HA + 2 * HA + 1
    o_cb1: tl.constexpr = o_c1 + S * HC
    o_c2: tl.constexpr = o_cb1 + HC
    o_cb2: tl.constexpr = o_c2 + HC
    out = part + (a * P + p) * (o_cb2 + 3)
    m_ar, jc, ii, ka, hc, two = (tl.arange(0, BM), tl.arange(0, SC), tl.arange(0, IP), tl.arange(0, HAP),
                                 tl.arange(0, HCP), tl.arange(0, 2))
    kam, hcm, w1m = ka < HA, hc < HC, (ii[:, None] < NI) & (ka[None, :] < HA)
    eps = tl.load(clip + a)
    s1 = tl.load(w1 + (a * NI + ii[:, None]) * HA + ka[None, :], mask=w1m, other=0.0)  # the scorer, padded
    s1b = tl.load(b1 + a * HA + ka, mask=kam, other=0.0)
    s2 = tl.load(w2 + a * HA + ka, mask=kam, other=0.0)
    s2b = tl.load(b2 + a)
    v2 = tl.load(c2 + a * HC + hc, mask=hcm, other=0.0)
    acc_w1 = tl.zeros([IP, HAP], dtype=tl.float32)
    # the scorer's bias and output-layer gradients, and the surrogate, summed row by row as the
    # chunks go and over the rows once at the end (a sum over rows crosses threads and warps)
    rows_b1 = tl.zeros([BM * SC, HAP], dtype=tl.float32)
    rows_w2 = tl.zeros([BM * SC, HAP], dtype=tl.float32)
    rows_b2 = tl.zeros([BM, SC], dtype=tl.float32)
    rows_sur = tl.zeros([BM, SC], dtype=tl.float32)
    acc_cb1 = tl.zeros([HCP], dtype=tl.float32)
    acc_c2 = tl.zeros([HCP], dtype=tl.float32)
    acc_cb2 = tl.zeros([1], dtype=tl.float32)
    acc_v = tl.zeros([2], dtype=tl.float32)  # −Σ w·surrogate, Σ w·(v − target)²
    for start in range(p * BM, B, P * BM):
        m = start + m_ar
        mm = m < B
        row = tl.load(idx + a * B + m, mask=mm, other=0).to(tl.int64)
        w = tl.load(wgt + a * B + m, mask=mm, other=0.0)
        base = obs + row[:, None] * S
        # the account's value, as trainers/common/state.py::StockLayout.per_stock builds it
        cash = tl.load(obs + row * S, mask=mm, other=0.0) / cash_scale
        total = cash
        for c0 in range(0, NS, SC):
            j = c0 + jc
            total += tl.sum(_held(base, j, mm[:, None] & (j < NS)[None, :], price_ref, shares_scale, NS), axis=1)
        value = tl.maximum(total, 1e-9)
        for c0 in range(0, NS, SC):  # the scorer, forward and backward, SC stocks at a time
            j = c0 + jc
            jm = j < NS
            both = mm[:, None] & jm[None, :]
            # the scorer's inputs, one row per sample and stock: its indicators, its weight, the cash weight
            x = tl.load(base[:, :, None] + 1 + 2 * NS + j[None, :, None] * K + ii[None, None, :],
                        mask=both[:, :, None] & (ii < K)[None, None, :], other=0.0)
            x = tl.where(ii[None, None, :] == K, (_held(base, j, both, price_ref, shares_scale, NS)
                                                  / value[:, None])[:, :, None], x)
            x = tl.reshape(tl.where(ii[None, None, :] == K + 1, (cash / value)[:, None, None], x), [BM * SC, IP])
            pre = tl.dot(x, s1, input_precision=DOT) + s1b[None, :]
            mu = tl.reshape(tl.sum(tl.maximum(pre, 0.0) * s2[None, :], 1), [BM, SC]) + s2b
            std = tl.exp(tl.load(log_std + a * NS + j, mask=jm, other=0.0))
            var = std * std
            at = row[:, None] * NS + j[None, :]
            d = tl.load(act + at, mask=both, other=0.0) - mu
            logp = -(d * d) / (2 * var[None, :]) - tl.log(std)[None, :] - 0.9189385332046727  # log √(2π)
            ratio = tl.exp(logp - tl.load(lp_old + at, mask=both, other=0.0))
            A = tl.load(adv + at, mask=both, other=0.0)
            g_logp = tl.where(both, _surrogate_grad(ratio, A, eps, w[:, None]) * ratio, 0.0)
            rows_sur += _surrogate(ratio, A, eps) * w[:, None]
            g_mu = g_logp * d / var[None, :]
            ls_at = out + j  # log_std's gradient, this program's own row of ``part``
            tl.store(ls_at, tl.load(ls_at, mask=jm, other=0.0) + tl.sum(g_logp * (d * d / var[None, :] - 1.0), 0),
                     mask=jm)
            # the scorer's backward: two small matmuls' worth, summed over the block's samples and stocks
            g_row = tl.reshape(g_mu, [BM * SC])
            g_pre = tl.where(pre > 0, g_row[:, None] * s2[None, :], 0.0)
            acc_w1 += tl.dot(tl.trans(x), g_pre, input_precision=DOT)
            rows_b1 += g_pre
            rows_w2 += tl.maximum(pre, 0.0) * g_row[:, None]
            rows_b2 += g_mu
        # the critic, its first layer over the whole state a chunk at a time
        h = tl.zeros([BM, HCP], dtype=tl.float32) + tl.load(cb1 + a * HC + hc, mask=hcm, other=0.0)[None, :]
        for c in range(0, S, CK):
            col = c + tl.arange(0, CK)
            s_c = tl.load(base + col[None, :], mask=mm[:, None] & (col < S)[None, :], other=0.0)
            w_c = tl.load(c1 + (a * S + col[:, None]) * HC + hc[None, :], mask=(col < S)[:, None] & hcm[None, :],
                          other=0.0)
            h = tl.dot(s_c, w_c, h, input_precision=DOT)
        v = tl.sum(tl.maximum(h, 0.0) * v2[None, :], axis=1) + tl.load(cb2 + a)
        err = v - tl.load(ret + row, mask=mm, other=0.0)
        acc_v += tl.where(two == 1, tl.sum(err * err * w, 0), 0.0)
        g_v = 2.0 * value_coef * w * err
        g_h = tl.where(h > 0, g_v[:, None] * v2[None, :], 0.0)
        acc_cb1 += tl.sum(g_h, 0)
        acc_c2 += tl.sum(tl.maximum(h, 0.0) * g_v[:, None], 0)
        acc_cb2 += tl.sum(g_v, 0)
        for c in range(0, S, CK):  # the first layer's gradient, kept in this program's row
            col = c + tl.arange(0, CK)
            s_c = tl.load(base + col[None, :], mask=mm[:, None] & (col < S)[None, :], other=0.0)
            at = out + o_c1 + col[:, None] * HC + hc[None, :]
            cm = (col < S)[:, None] & hcm[None, :]
            tl.store(at, tl.load(at, mask=cm, other=0.0) + tl.dot(tl.trans(s_c), g_h, input_precision=DOT),
                     mask=cm)
        tl.debug_barrier()  # the next block reads what this one stored
    tl.store(out + NS + ii[:, None] * HA + ka[None, :], acc_w1, mask=w1m)
    tl.store(out + NS + NI * HA + ka, tl.sum(rows_b1, 0), mask=kam)
    tl.store(out + NS + NI * HA + HA + ka, tl.sum(rows_w2, 0), mask=kam)
    tl.store(out + NS + NI * HA + 2 * HA + tl.arange(0, 1), tl.zeros([1], dtype=tl.float32) + tl.sum(rows_b2))
    acc_v += tl.where(two == 0, -tl.sum(rows_sur), 0.0)
    tl.store(out + o_cb1 + hc, acc_cb1, mask=hcm)
    tl.store(out + o_c2 + hc, acc_c2, mask=hcm)
    tl.store(out + o_cb2 + tl.arange(0, 1), acc_cb2)
    tl.store(out + o_cb2 + 1 + two, acc_v)


def _held(base, j, both, price_ref, shares_scale, NS: tl.constexpr):
    """Each stock's holding marked at the state's close, in cash."""
    return (tl.load(base + 1 + j[None, :], mask=both, other=0.0) / shares_scale
            * tl.load(base + 1 + NS + j[None, :], mask=both, other=0.0)
            * tl.load(price_ref + j, mask=j < NS, other=0.0)[None, :])


def _surrogate(ratio, A, eps):
    """``min(ρA, clip(ρ, 1 − ε, 1 + ε)A)`` (trainers/ppo/loss.py::clipped)."""
    return tl.minimum(ratio * A, tl.minimum(tl.maximum(ratio, 1 - eps), 1 + eps) * A)


def _surrogate_grad(ratio, A, eps, w):
    """The derivative of ``−w·min(ρA, clip(ρ)A)`` in ρ, as autograd takes it: through the
    unclipped term where it is the smaller, through both where they tie (inside the clip
    range, where clip's own derivative is 1), and not at all where the clipped term wins."""
    clipped = tl.minimum(tl.maximum(ratio, 1 - eps), 1 + eps)
    through = ((ratio >= 1 - eps) & (ratio <= 1 + eps)) | (ratio * A < clipped * A)
    return tl.where(through, -w * A, 0.0)


if triton is not None:
    _held, _surrogate, _surrogate_grad = (triton.jit(f) for f in (_held, _surrogate, _surrogate_grad))
    _kernel = triton.jit(_body)


def _programs(width: int, block: int) -> int:
    """Programs per agent for minibatches of ``width`` samples, taken ``block`` at a time."""
    return max(1, min(PROGRAMS, width // (block * BLOCKS)))


def _pow2(n: int, least: int = 1) -> int:
    return max(least, 1 << (n - 1).bit_length())


def constants(stocks: int, features: int, state: int, hidden: int, critic_hidden: int, programs: int,
              launch: Launch) -> dict[str, int | str]:
    """The kernel's compile-time constants for a model of these sizes, built as ``launch``."""
    return {"S": state, "NS": stocks, "K": features, "IP": _pow2(features + 2, 16), "HA": hidden,  # K >= 16
            "HAP": _pow2(hidden, 8), "HC": critic_hidden, "HCP": _pow2(critic_hidden, 8), "BM": launch.block,
            "SC": launch.stocks, "CK": launch.chunk, "P": programs, "DOT": launch.dot}


def _run(nets: BatchedNets, batch: tuple[torch.Tensor, ...], idx: torch.Tensor, weight: torch.Tensor,
         clip: torch.Tensor, value_coef: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Each agent's surrogate plus value loss ``[N]``, and their gradients shaped as ``nets.params``."""
    obs, actions, logprobs, advantages, returns = batch
    layout = nets.layout
    assert layout is not None
    n, width = idx.shape
    (w1, b1), (w2, b2) = nets.actor
    (c1, cb1), (c2, cb2) = nets.critic
    hidden, critic_hidden, state = w1.shape[2], c1.shape[2], obs.shape[1]
    launch = LAUNCH
    programs = _programs(width, launch.block)
    sizes = [p[0].numel() for p in nets.params]
    part = torch.zeros((n, programs, sum(sizes) + 2), device=obs.device)
    _kernel[(n, programs)](
        obs, actions, logprobs, advantages, returns, idx.contiguous(), weight.contiguous(), *nets.params,
        nets.price_ref, clip.to(torch.float32).contiguous(), part, width, layout.scales.cash_scale,
        layout.scales.shares_scale, float(value_coef), num_warps=launch.warps, num_stages=launch.stages,
        **constants(layout.n_stocks, layout.n_features, state, hidden, critic_hidden, programs, launch))
    total = part.sum(1)
    grads = [g.reshape(p.shape) for g, p in zip(total[:, :-2].split(sizes, dim=1), nets.params)]
    return total[:, -2] + value_coef * total[:, -1], grads


def bytes_accessed(nets: BatchedNets, batch: tuple[torch.Tensor, ...], idx: torch.Tensor) -> int:
    """Bytes the kernel reads and writes in one call, counted as Inductor counts its kernels (each
    buffer's elements once; a block re-reading its own rows, which stay in cache, is not counted):
    each sample's row of every batch tensor, its index and weight; the weights; the partial
    gradients, read and written. The zeroing and the sum of the partials are torch ops, counted
    where those are (benchmarks/perf/gpu_update.py)."""
    n, width = idx.shape
    per_sample = 8 + 4 + sum(4 * x[0].numel() for x in batch)
    weights = 4 * (sum(p.numel() for p in nets.params) + nets.log_std.shape[1] + n)  # + reference prices, clips
    programs = _programs(width, LAUNCH.block)
    partials = 4 * n * programs * (sum(p[0].numel() for p in nets.params) + 2)
    return n * width * per_sample + weights + 2 * partials


class _Loss(torch.autograd.Function):
    """Each agent's loss ``[N]``, its gradients computed with it and scaled in the backward."""

    @staticmethod
    def forward(ctx: Any, run: Any, *params: torch.Tensor) -> torch.Tensor:
        loss, grads = run()
        ctx.save_for_backward(*grads)
        return loss

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return (None, *(grad * g.reshape((-1,) + (1,) * (grad.dim() - 1)) for grad in ctx.saved_tensors))


def kernel_loss(device: torch.device, fallback: LossFn = ppo_loss) -> LossFn:
    """:func:`trainers.ppo.loss.ppo_loss` with its surrogate and value loss and their gradients
    computed by the kernel wherever the model :func:`fits` (``fallback`` elsewhere), and the entropy
    bonus (one number per agent) by autograd."""
    if not runs_on(device):
        raise ValueError(f"train.compile: kernel runs Triton kernels on CUDA, not on {device}"
                         + ("" if triton is not None else " (Triton is not installed)")
                         + "; on the CPU only in Triton's interpreter (TRITON_INTERPRET=1), for checking")

    def loss(nets: BatchedNets, batch: tuple[torch.Tensor, ...], idx: torch.Tensor, weight: torch.Tensor,
             clip: torch.Tensor, entropy_coef: torch.Tensor, value_coef: float) -> torch.Tensor:
        if not fits(nets, batch):
            return fallback(nets, batch, idx, weight, clip, entropy_coef, value_coef)
        terms = _Loss.apply(functools.partial(_run, nets, batch, idx, weight, clip, value_coef), *nets.params)
        return (terms - entropy_coef * nets.entropy()).sum()

    return loss
