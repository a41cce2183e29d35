"""Workarounds for torch.compile's CPU code generation (Inductor, torch 2.13): numerically
identical replacements for ops whose compiled form is slow. Kept apart from the networks so
the model reads as the maths; remove one when the compiler no longer needs it.
"""

from __future__ import annotations

import torch


class ReluSignGrad(torch.autograd.Function):
    """ReLU whose backward multiplies by `sign(output)`: same values and gradients as
    `torch.relu` (also at 0), but no boolean mask is saved for the backward pass.

    Used where the critic runs with detached weights (the actor loss): there the
    compiler would otherwise save a bool mask per hidden layer, and Inductor's
    CPU code for storing bool tensors is several times slower than the matmuls
    around it (torch 2.13). Measured with scripts/bench_update.py.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        out = x.clamp_min(0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return grad * out.sign()


def relu_without_saved_mask(x: torch.Tensor) -> torch.Tensor:
    """`torch.relu`, with the backward of ReluSignGrad."""
    return ReluSignGrad.apply(x)
