"""Left-right mirror augmentation (`algo.symmetry=true`): every sampled batch gains its mirror image.

A bilaterally symmetric robot that walks on a symmetric floor meets, for each transition
it collects, a mirror transition that is just as real: observations, critic observations
and actions reflected through the sagittal plane, the same reward and the same episode
ends. Adding those to each batch teaches the critic and the actor both sides of a skill
from one side's data (holosoma's `use_symmetry`). The env says how to reflect its vectors
(`env.mirror_maps()`: a `(index, sign)` pair per vector, `mirrored[..., i] = sign[i] *
value[..., index[i]]`); this module only applies them. A batch of B becomes 2B, so an
update costs about twice as much.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from tensordict import TensorDict

from fast_td3.learner import transition_keys as keys

MIRRORED_FIELDS = {keys.OBS: "obs", keys.NEXT_OBS: "obs", keys.ACTIONS: "actions",
                   keys.CRITIC_OBS: "critic_obs", keys.NEXT_CRITIC_OBS: "critic_obs"}
"""Batch field -> the env's mirror that reflects it; every other field is copied unchanged."""


def check_mirror(name: str, index: Sequence[int], sign: Sequence[float], size: int) -> None:
    """A mirror must be a signed permutation of `size` values that undoes itself."""
    if len(index) != size or len(sign) != size:
        raise ValueError(f"mirror of {name}: {len(index)} indices and {len(sign)} signs for {size} values")
    if sorted(index) != list(range(size)):
        raise ValueError(f"mirror of {name}: the indices are not a permutation of 0..{size - 1}")
    for i, (j, s) in enumerate(zip(index, sign)):
        if s not in (1.0, -1.0) or index[j] != i or sign[j] != s:
            raise ValueError(f"mirror of {name}: mirroring twice must give back value {i} (index {j}, sign {s})")


class MirrorAugmentation:
    """Appends the mirror image of each sampled batch to it (see the module's doc)."""

    def __init__(self, maps: Mapping[str, tuple[Sequence[int], Sequence[float]]], sizes: Mapping[str, int],
                 device: torch.device) -> None:
        self._maps = {}
        for name, size in sizes.items():
            if name not in maps:
                raise ValueError(f"the env gives no mirror for its {name} ({sorted(maps)} only)")
            index, sign = maps[name]
            check_mirror(name, index, sign, size)
            self._maps[name] = (torch.as_tensor(list(index), device=device),
                                torch.as_tensor(list(sign), dtype=torch.float32, device=device))

    def mirror(self, name: str, value: torch.Tensor) -> torch.Tensor:
        index, sign = self._maps[name]
        return value.index_select(-1, index) * sign.to(value.dtype)

    def __call__(self, batch: TensorDict) -> TensorDict:
        mirrored = batch.clone(recurse=False)
        for field, name in MIRRORED_FIELDS.items():
            if field in batch.keys() and name in self._maps:
                mirrored[field] = self.mirror(name, batch[field])
        return torch.cat([batch, mirrored], dim=0)


class SymmetryUnavailableError(ValueError):
    """algo.symmetry=true on an env that cannot mirror its vectors."""


def mirror_augmentation(env, device: torch.device) -> MirrorAugmentation:
    """The augmentation for `env` (any env of the contract with a `mirror_maps()` method)."""
    maps = getattr(env, "mirror_maps", None)
    if maps is None:
        raise SymmetryUnavailableError(
            f"algo.symmetry=true needs an env that mirrors its observations and actions (a mirror_maps() method); "
            f"{type(env).__name__} has none (the T1LowDimJoystick tasks have one). Drop algo.symmetry or add the maps.")
    sizes = {"obs": env.num_obs, "actions": env.num_actions}
    if getattr(env, "num_critic_obs", None) is not None:
        sizes["critic_obs"] = env.num_critic_obs
    return MirrorAugmentation(maps(), sizes, device)
