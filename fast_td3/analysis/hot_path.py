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

from fast_td3.training.hooks import Hook

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


class _CountSteps(Hook):
    """Counts global steps `first` + 1 to `last` of a runner's loop: the collect step around the
    env (the env itself paused), sampling and the updates in their regions, the rest as 'step';
    logs, evaluations, gates and checkpoints that fall in them are not counted."""

    REGIONS = {"act": "collect", "store": "collect", "sample": "sample", "update": "update"}
    NOT_COUNTED = ("env step", "log", "eval", "gate", "checkpoint")
    """The env's own work, and the loop's host work between steps (the NaN guard is read at logs)."""

    def __init__(self, counter: OpCounter, first: int, last: int) -> None:
        self.counter, self.first, self.last = counter, first, last
        self.counting = False

    def on_step(self, runner) -> None:
        if runner.global_step == self.first:
            self.counter.__enter__()
            self.counting = True
        elif runner.global_step == self.last and self.counting:
            self.counter.__exit__(None, None, None)
            self.counting = False

    def on_end(self, runner, final) -> None:
        if self.counting:  # a stopped run
            self.counter.__exit__(None, None, None)
            self.counting = False

    def phase(self, name: str):
        if not self.counting:
            return None
        if name in self.NOT_COUNTED:
            return self.counter.paused()
        region = self.REGIONS.get(name)
        return None if region is None else self.counter.region(region)


def count_global_steps(runner, steps: int = 3, warmup: int = 0) -> OpCounter:
    """Train `runner` `warmup` then `steps` more global steps and count the last `steps`: regions
    'collect' (around the env), 'sample', 'update', and 'step' (the rest of the loop). The call
    ends, as every `train` call does, with an evaluation and a checkpoint, which are not counted."""
    counter = OpCounter()
    first = runner.global_step + warmup
    runner.train(until_step=first + steps, hooks=[_CountSteps(counter, first, first + steps)])
    return counter
