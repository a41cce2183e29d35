"""Counting what a global step asks of the device: aten launches and host syncs, on any device.

On a GPU every aten op outside a compiled region is a kernel launch, and a host sync (an
`.item()`, a `bool(tensor)`, an op whose output size depends on the data) drains the stream.
Neither shows on a CPU's clock, so both are counted instead: `OpCounter` is a dispatch mode
that tallies the aten ops run under it by region, and the ones that would wait for a GPU.
`scripts/gpu_check.py` prints the counts and `tests/test_hot_path.py` pins them.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

SYNCING_OPS = {
    aten._local_scalar_dense,  # .item(), bool(), int(), float() of a tensor
    aten.is_nonzero,
    aten.nonzero,  # boolean-mask indexing, torch.where(cond) with one argument
    aten.masked_select,
    aten._unique2,
    aten.unique_consecutive,
    aten.unique_dim,
    aten.repeat_interleave,
}
"""aten ops whose result the host must wait for on a GPU (data-dependent sizes or values)."""

METADATA_OPS = {aten.detach, aten._reshape_alias, aten.lift_fresh}
"""Ops that launch nothing (views are skipped too: `OpOverload.is_view`)."""

SYNCING_METHODS = {"tolist", "numpy", "item", "__bool__", "__int__", "__float__", "__index__"}
"""Tensor methods that hand a value to Python (caught before dispatch, where some never arrive)."""


def _boolean_mask_index(func, args) -> bool:
    """`x[mask]` and `x[mask] = v`: a nonzero inside the kernel (on CPU it is not dispatched)."""
    if func.overloadpacket not in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices if i is not None)


class OpCounter:
    """`with counter:` counts aten ops that launch work (views and metadata ops aside) by region (`counter.region(name)`), and host syncs.

    `paused()` stops counting (e.g. inside the env, whose own transfers are the env's). Every
    sync is recorded with the region and the op, so a test failure says where it came from.
    """

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self.syncs: list[tuple[str, str]] = []
        self._region = "step"
        self._paused = 0
        self._modes: list = []

    @contextmanager
    def region(self, name: str):
        outer, self._region = self._region, name
        try:
            yield
        finally:
            self._region = outer

    @contextmanager
    def paused(self):
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def __enter__(self) -> "OpCounter":
        counter = self

        class Dispatch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if not counter._paused and not func.is_view and func.overloadpacket not in METADATA_OPS:
                    counter.ops[counter._region] += 1
                    if func.overloadpacket in SYNCING_OPS or _boolean_mask_index(func, args):
                        counter.syncs.append((counter._region, str(func)))
                return func(*args, **(kwargs or {}))

        class Function(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if not counter._paused and name in SYNCING_METHODS:
                    counter.syncs.append((counter._region, f"Tensor.{name}"))
                return func(*args, **(kwargs or {}))

        self._modes = [Function(), Dispatch()]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = []


def count_global_steps(runner, steps: int = 3, warmup: int = 0) -> OpCounter:
    """Run `warmup` then `steps` steady-state global steps of `runner` (collect, then the
    updates once learning started; no log, evaluation or checkpoint falls in them) and
    count the last `steps`: regions 'collect' (around the env), 'sample', 'update'; the
    env itself is not counted."""
    env = runner.env
    counter = OpCounter()
    original_step, original_update, original_sample = env.step, runner.agent.update, runner.buffer.sample_many

    def step(actions):
        with counter.paused():
            return original_step(actions)

    def update(batch):
        with counter.region("update"):
            return original_update(batch)

    def sample_many(*args, **kwargs):
        with counter.region("sample"):
            return original_sample(*args, **kwargs)

    env.step, runner.agent.update, runner.buffer.sample_many = step, update, sample_many
    try:
        obs, critic_obs = runner._reset_envs()
        for i in range(warmup + steps):
            if i == warmup:
                counter.__enter__()
            with counter.region("collect"):
                obs, critic_obs = runner.collect(obs, critic_obs)
            runner.global_step += 1
            if runner.learning_started():
                runner.learn()
        counter.__exit__(None, None, None)
    finally:  # the wrappers were instance attributes in front of the methods
        env.__dict__.pop("step", None)
        runner.agent.__dict__.pop("update", None)
        runner.buffer.__dict__.pop("sample_many", None)
    return counter
