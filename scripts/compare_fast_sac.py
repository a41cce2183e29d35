"""Our FastSAC update against holosoma's (amazon-far/holosoma), on this machine, in one run.

    git clone https://github.com/amazon-far/holosoma /tmp/holosoma      # a checkout; never vendored here
    python scripts/compare_fast_sac.py --reference /tmp/holosoma
    python scripts/compare_fast_sac.py --reference /tmp/holosoma --sizes cpu full --json sac.json

holosoma's FastSAC networks (`agents/fast_sac/fast_sac.py`) are loaded from the checkout by
file path, and its update methods (`FastSACAgent._update_main`: critic and temperature;
`_update_pol`: actor) from `fast_sac_agent.py`, whose imports of the rest of holosoma
(simulators, loggers, exporters, which its update never calls) are satisfied with empty
stand-ins. Its methods run on an object holding just what they read: the networks, the three
AdamW optimisers built as its agent builds them, log alpha, the target entropy and the config
values. One whole update is: critic + temperature, actor, Polyak of the target critic.

The maths check: our `FastSAC` and holosoma's start from the same weights (ours copied into
its layout), take the same batch (T1-shaped: observations 85, critic observations 180,
actions 23; a mix of terminations and time-outs) and the same Gaussian draws (the same seed
before each side's update; both draw the next-state sample first, then the actor's), and their
critic, temperature and actor losses and every parameter afterwards are compared. Settings are
holosoma's defaults (SiLU, LayerNorm, alpha 0.001, target entropy 0, weight decay 0.001, torch's
default 0.01 on log alpha, betas (0.9, 0.95), tau 0.125, no clipped double Q, no gradient
clipping), fp32, eager, no observation normalisation (holosoma normalises before its update).
Expected differences are float rounding and holosoma's 1e-6 inside log(1 - tanh^2 + 1e-6).

Then both updates are timed alternately in one process (eager fp32: holosoma's autocast is
CUDA-only, so on a CPU it runs fp32), and the ratio printed. holosoma sizes its hidden layers
as width, width/2, width/4; `cpu` uses actor 128 and critic 256 with batch 2048, `full`
holosoma's actor 512, critic 768, batch 8192.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import statistics
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import torch
from tensordict import TensorDict

from fast_td3.learner import transition_keys as keys
from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_sac import FastSAC
from fast_td3.learner.config import AlgoConfig, FastSACConfig
from fast_td3.learner.precision import cpu_model
from fast_td3.command_line import ArgumentParser, file_out, path_in, whole

NUM_OBS, NUM_CRITIC_OBS, NUM_ACTIONS = 85, 180, 23
SAC_DIR = Path("src/holosoma/holosoma/agents/fast_sac")


@dataclass(frozen=True)
class Size:
    name: str
    batch_size: int
    actor_width: int
    critic_width: int


SIZES = {"cpu": Size("cpu", 2048, 128, 256), "full": Size("full", 8192, 512, 768)}
GAMMA, TAU, ALPHA_INIT, WEIGHT_DECAY, LR, NUM_ATOMS, V_MIN, V_MAX = 0.97, 0.125, 0.001, 0.001, 3e-4, 101, -20.0, 20.0


# --------------------------------------------------------------------------- loading holosoma
class _StandIn(types.ModuleType):
    """A module whose every attribute is an empty class: for imports the update never uses."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def load_reference(checkout: Path):
    """(holosoma's fast_sac module, its FastSACAgent class), loaded by file path."""
    directory = checkout / SAC_DIR
    if not (directory / "fast_sac.py").is_file():
        raise SystemExit(f"{directory / 'fast_sac.py'} not found: pass --reference <a checkout of amazon-far/holosoma>")
    safe_torch = types.ModuleType("holosoma.utils.safe_torch_import")
    safe_torch.__dict__.update(F=torch.nn.functional, GradScaler=torch.amp.GradScaler, TensorDict=TensorDict,
                               TensorboardSummaryWriter=object, autocast=torch.autocast, nn=torch.nn,
                               optim=torch.optim, torch=torch)
    stand_ins = {name: _StandIn(name) for name in (
        "loguru", "holosoma", "holosoma.agents", "holosoma.agents.base_algo", "holosoma.agents.base_algo.base_algo",
        "holosoma.agents.fast_sac.fast_sac_utils", "holosoma.agents.modules",
        "holosoma.agents.modules.augmentation_utils", "holosoma.agents.modules.logging_utils",
        "holosoma.config_types", "holosoma.config_types.algo", "holosoma.envs", "holosoma.envs.base_task",
        "holosoma.envs.base_task.base_task", "holosoma.utils", "holosoma.utils.average_meters",
        "holosoma.utils.inference_helpers")}
    stand_ins["loguru"].logger = types.SimpleNamespace(info=print, warning=print)
    stand_ins["holosoma.agents.base_algo.base_algo"].BaseAlgo = object
    saved = {name: sys.modules.get(name) for name in [*stand_ins, "holosoma.utils.safe_torch_import"]}
    sys.modules.update(stand_ins)
    sys.modules["holosoma.utils.safe_torch_import"] = safe_torch
    try:
        networks = _load_file("holosoma.agents.fast_sac.fast_sac", directory / "fast_sac.py")
        agent_module = _load_file("holosoma_fast_sac_agent", directory / "fast_sac_agent.py")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return networks, agent_module.FastSACAgent


def _load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the two learners
def our_config(size: Size) -> AlgoConfig:
    a, c = size.actor_width, size.critic_width
    return AlgoConfig(
        name="fast_sac", actor_hidden_dims=[a, a // 2, a // 4], critic_hidden_dims=[c, c // 2, c // 4],
        activation="silu", layer_norm=True, num_atoms=NUM_ATOMS, v_min=V_MIN, v_max=V_MAX, gamma=GAMMA,
        use_cdq=False, tau=TAU, batch_size=size.batch_size, num_updates=1, policy_frequency=1,
        weight_decay=WEIGHT_DECAY, obs_normalization=False, precision="fp32", compile=False,
        fast_sac=FastSACConfig(alpha_init=ALPHA_INIT, alpha_weight_decay=0.01),  # holosoma: AdamW's default
    )


def reference_learner(networks, agent_cls, size: Size):
    """An object with what holosoma's `_update_main` and `_update_pol` read, built as its agent builds it."""
    indices = lambda n, key: {key: {"start": 0, "end": n, "size": n}}  # noqa: E731
    actor = networks.Actor(indices(NUM_OBS, "actor_obs"), ["actor_obs"], NUM_ACTIONS, 1, size.actor_width,
                           log_std_max=0.0, log_std_min=-5.0, use_tanh=True, use_layer_norm=True, device="cpu")
    make_critic = lambda: networks.Critic(  # noqa: E731
        indices(NUM_CRITIC_OBS, "critic_obs"), ["critic_obs"], NUM_ACTIONS, NUM_ATOMS, V_MIN, V_MAX,
        size.critic_width, use_layer_norm=True, num_q_networks=2, device="cpu")
    qnet, qnet_target = make_critic(), make_critic()
    learner = agent_cls.__new__(agent_cls)
    learner.__dict__.update(
        config=types.SimpleNamespace(gamma=GAMMA, max_grad_norm=0.0, use_autotune=True, amp=False, amp_dtype="bf16"),
        scaler=torch.amp.GradScaler("cpu", enabled=False), actor=actor, qnet=qnet, qnet_target=qnet_target,
        log_alpha=torch.tensor([math.log(ALPHA_INIT)], requires_grad=True), target_entropy=-NUM_ACTIONS * 0.0,
        device=torch.device("cpu"), is_multi_gpu=False,
    )
    learner._maybe_amp = contextlib.nullcontext  # fp32 on a CPU (its autocast is for CUDA)
    return learner


def add_reference_optimizers(learner) -> None:
    adamw = lambda params, **kw: torch.optim.AdamW(params, lr=LR, fused=True, betas=(0.9, 0.95), **kw)  # noqa: E731
    learner.q_optimizer = adamw(list(learner.qnet.parameters()), weight_decay=WEIGHT_DECAY)
    learner.actor_optimizer = adamw(list(learner.actor.parameters()), weight_decay=WEIGHT_DECAY)
    learner.alpha_optimizer = adamw([learner.log_alpha])


@torch.no_grad()
def copy_weights(ours: FastSAC, learner) -> None:
    """Our networks' weights into holosoma's layout (nn.Linear per head, weight [out, in])."""
    learner.actor.net.load_state_dict(ours.actor.net.state_dict())
    learner.actor.fc_mu[0].load_state_dict(ours.actor.mean.state_dict())
    learner.actor.fc_logstd.load_state_dict(ours.actor.log_std.state_dict())
    for critic, theirs in ((ours.critic, learner.qnet), (ours.target_critic, learner.qnet_target)):
        for head, qnet in enumerate(theirs.qnets):
            linears = [m for m in qnet.net if isinstance(m, torch.nn.Linear)]
            norms = [m for m in qnet.net if isinstance(m, torch.nn.LayerNorm)]
            for layer, linear in zip(critic.layers, linears):
                linear.weight.copy_(layer.weight[head].T)
                linear.bias.copy_(layer.bias[head, 0])
            for norm, theirs_norm in zip(critic.norms, norms):
                theirs_norm.weight.copy_(norm.weight[head, 0])
                theirs_norm.bias.copy_(norm.bias[head, 0])
    learner.log_alpha.copy_(ours.log_alpha)


def reference_update(learner, data: TensorDict) -> dict[str, torch.Tensor]:
    """One whole holosoma update: critic + temperature, actor, then its Polyak step."""
    _, _, qf_loss, _, _, alpha_loss = learner._update_main(data)
    _, actor_loss, entropy, _ = learner._update_pol(data)
    with torch.no_grad():
        online, target = list(learner.qnet.parameters()), list(learner.qnet_target.parameters())
        torch._foreach_lerp_(target, online, TAU)
    return {"critic_loss": qf_loss, "alpha_loss": alpha_loss, "actor_loss": actor_loss, "entropy": entropy}


def random_batch(batch_size: int, seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(batch_size, generator=g) < 0.05
    truncated = (torch.rand(batch_size, generator=g) < 0.05) & ~terminated
    return TensorDict({
        keys.OBS: torch.randn(batch_size, NUM_OBS, generator=g),
        keys.NEXT_OBS: torch.randn(batch_size, NUM_OBS, generator=g),
        keys.CRITIC_OBS: torch.randn(batch_size, NUM_CRITIC_OBS, generator=g),
        keys.NEXT_CRITIC_OBS: torch.randn(batch_size, NUM_CRITIC_OBS, generator=g),
        keys.ACTIONS: torch.rand(batch_size, NUM_ACTIONS, generator=g) * 2 - 1,
        keys.REWARDS: torch.randn(batch_size, generator=g) * 0.5,
        keys.TERMINATED: terminated, keys.TRUNCATED: truncated,
        keys.DISCOUNT: torch.full((batch_size,), GAMMA),
    }, batch_size=[batch_size])


def reference_batch(batch: TensorDict) -> TensorDict:
    """Our batch in holosoma's layout (dones = terminated | truncated; its bootstrap is truncated | ~dones)."""
    n = batch.batch_size[0]
    return TensorDict({
        "observations": batch[keys.OBS], "critic_observations": batch[keys.CRITIC_OBS], "actions": batch[keys.ACTIONS],
        "next": TensorDict({
            "observations": batch[keys.NEXT_OBS], "critic_observations": batch[keys.NEXT_CRITIC_OBS],
            "rewards": batch[keys.REWARDS], "dones": (batch[keys.TERMINATED] | batch[keys.TRUNCATED]).long(),
            "truncations": batch[keys.TRUNCATED].long(), "effective_n_steps": torch.ones(n),
        }, batch_size=[n]),
    }, batch_size=[n])


def build_pair(networks, agent_cls, size: Size, seed: int = 0):
    torch.manual_seed(seed)
    spec = EnvSpec(num_obs=NUM_OBS, num_critic_obs=NUM_CRITIC_OBS, num_actions=NUM_ACTIONS)
    ours = FastSAC(our_config(size), spec, device="cpu").compile_update()
    learner = reference_learner(networks, agent_cls, size)
    copy_weights(ours, learner)
    add_reference_optimizers(learner)
    return ours, learner


def compare_update(networks, agent_cls, size: Size, updates: int = 2) -> dict[str, float]:
    """Largest absolute differences of losses and parameters after `updates` whole updates."""
    ours, learner = build_pair(networks, agent_cls, size)
    worst = {"critic_loss": 0.0, "alpha_loss": 0.0, "actor_loss": 0.0}
    for i in range(updates):
        batch = random_batch(size.batch_size, seed=i)
        torch.manual_seed(1000 + i)
        mine = ours.update(batch)
        torch.manual_seed(1000 + i)
        theirs = reference_update(learner, reference_batch(batch))
        for key in worst:
            worst[key] = max(worst[key], abs(float(mine[key]) - float(theirs[key])))
    pairs = [(ours.actor.mean.weight, learner.actor.fc_mu[0].weight), (ours.log_alpha, learner.log_alpha),
             *zip(ours.actor.net.parameters(), learner.actor.net.parameters())]
    for critic, theirs in ((ours.critic, learner.qnet), (ours.target_critic, learner.qnet_target)):
        linears = [m for m in theirs.qnets[1].net if isinstance(m, torch.nn.Linear)]
        pairs += [(layer.weight[1].T, linear.weight) for layer, linear in zip(critic.layers, linears)]
    worst["parameters"] = max(float((a.detach() - b.detach()).abs().max()) for a, b in pairs)
    worst["parameters_moved"] = float((ours.actor.mean.weight.detach()).abs().max())  # zero-initialised head
    return worst


def time_both(networks, agent_cls, size: Size, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per whole update of each, timed alternately (same machine load)."""
    ours, learner = build_pair(networks, agent_cls, size)
    batch = random_batch(size.batch_size, seed=0)
    theirs_batch = reference_batch(batch)
    runs = {"ours": lambda: ours.update(batch), "holosoma": lambda: reference_update(learner, theirs_batch)}
    for _ in range(warmup):
        for run in runs.values():
            run()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    result = {f"{name}_ms": 1e3 * statistics.median(s) for name, s in seconds.items()}
    result["speedup"] = result["holosoma_ms"] / result["ours_ms"]
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=path_in, required=True, help="a checkout of amazon-far/holosoma")
    parser.add_argument("--sizes", nargs="+", default=["cpu"], choices=sorted(SIZES))
    parser.add_argument("--repeats", type=whole(1, 1000), default=10)
    parser.add_argument("--json", type=file_out(), default=None)
    args = parser.parse_args(argv)
    if not (args.reference / SAC_DIR / "fast_sac.py").is_file():
        parser.refuse(f"--reference {args.reference}: not a checkout of amazon-far/holosoma (no {SAC_DIR}/fast_sac.py)")
    networks, agent_cls = load_reference(args.reference)
    report = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "torch": torch.__version__, "sizes": {}}
    print(f"CPU: {report['cpu']}, {report['threads']} torch threads, torch {torch.__version__}; eager fp32")
    for name in args.sizes:
        size = SIZES[name]
        diff = compare_update(networks, agent_cls, size)
        timing = time_both(networks, agent_cls, size, args.repeats)
        report["sizes"][name] = {"max_abs_difference": diff, **timing}
        print(f"[{name}] batch {size.batch_size}: max |ours - holosoma| after 2 updates: "
              + ", ".join(f"{k} {v:.2e}" for k, v in diff.items() if k != "parameters_moved"))
        print(f"[{name}] ours {timing['ours_ms']:.1f} ms, holosoma {timing['holosoma_ms']:.1f} ms per whole update "
              f"(holosoma / ours = {timing['speedup']:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
