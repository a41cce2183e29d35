"""Our learner against the reference FastTD3 (younggyoseo/FastTD3), on this machine, in one run.

    git clone https://github.com/younggyoseo/FastTD3 /tmp/FastTD3     # a checkout; never vendored here
    python scripts/bench_vs_reference.py --reference /tmp/FastTD3
    python scripts/bench_vs_reference.py --reference /tmp/FastTD3 --sizes cpu --json ref.json

The reference's network, replay and normaliser modules are loaded from that checkout by
file path (both projects call their package `fast_td3`) and driven the way its trainer
drives them per global step: for each of `num_updates` (2) critic updates, sample a batch
from its replay buffer, normalise it, compute the C51 target (its projection) with clipped
double Q and step the critic; the actor on every second; Polyak after each critic update.
Ours runs the same step through `FastTD3.update` on our replay buffer. Both use the same
shapes (MuJoCo Playground's T1: observations 85, critic observations 180, actions 23), batch,
networks, bf16 autocast and compile setting, and are timed alternately in one process, so
the printed ratios compare like with like under the same machine load.

Before timing, the maths is checked: with the same weights, the same batch and the same
smoothing noise, the reference's and our critic and actor losses agree (fp32).

Sizes: `cpu` is our `sizing=cpu` (16 envs, batch 2048, eager) with networks of
256-128-64 (the reference sizes its layers as width, width/2, width/4, so our preset's
exact widths cannot be built there); `full` is the suite default (1024 envs, batch 32768,
actor 512-256-128, critic 1024-512-256, compiled).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tensordict import TensorDict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_update import synchronize  # noqa: E402

from fast_td3.learner import transition_keys as keys  # noqa: E402
from envs.protocol import EnvSpec  # noqa: E402
from fast_td3.learner.algorithms.fast_td3 import FastTD3  # noqa: E402
from fast_td3.learner.config import AlgoConfig  # noqa: E402
from fast_td3.learner.replay import ReplayBuffer  # noqa: E402
from fast_td3.command_line import ArgumentParser, file_out, path_in, whole

NUM_OBS, NUM_CRITIC_OBS, NUM_ACTIONS = 85, 180, 23


@dataclass(frozen=True)
class Size:
    name: str
    num_envs: int
    batch_size: int
    actor_width: int
    critic_width: int
    compile: bool


SIZES = {
    "cpu": Size("cpu preset", 16, 2048, 256, 256, compile=False),
    "full": Size("full size", 1024, 32768, 512, 1024, compile=True),
}
CAPACITY = 64
"""Replay rows per env for the benchmark: small buffers stay in cache, so both sides'
sampling here is faster than from a multi-gigabyte buffer."""


def load_reference(checkout: Path):
    """The reference's `fast_td3.py` and `fast_td3_utils.py` as modules of their own names."""
    modules = []
    for name in ("fast_td3", "fast_td3_utils"):
        path = checkout / "fast_td3" / f"{name}.py"
        if not path.is_file():
            raise SystemExit(f"{path} not found: pass --reference <a checkout of younggyoseo/FastTD3>")
        spec = importlib.util.spec_from_file_location(f"reference_{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # torch.compile looks modules up by name
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def accepted(cls, **kwargs):
    """Construct `cls` with the keyword arguments its signature takes (the reference's
    constructors gained arguments over time)."""
    params = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in params})


def algo_config(size: Size, precision: str = "bf16", compile: bool | None = None) -> AlgoConfig:
    return AlgoConfig(
        actor_hidden_dims=[size.actor_width, size.actor_width // 2, size.actor_width // 4],
        critic_hidden_dims=[size.critic_width, size.critic_width // 2, size.critic_width // 4],
        num_atoms=101, v_min=-10.0, v_max=10.0, gamma=0.97, batch_size=size.batch_size, num_updates=2,
        policy_frequency=2, buffer_size=CAPACITY, precision=precision,
        compile=size.compile if compile is None else compile,
    )


# ------------------------------------------------------------------ the reference's step
class Reference:
    """The reference's modules and its per-global-step learning, as its trainer runs them."""

    def __init__(self, net, utils, size: Size, cfg: AlgoConfig, device: torch.device) -> None:
        self.cfg, self.size, self.device = cfg, size, device
        common = dict(n_act=NUM_ACTIONS, num_atoms=cfg.num_atoms, v_min=cfg.v_min, v_max=cfg.v_max,
                      sim_type="", sim_dimension=64, seq_len=8, device=device)
        self.actor = accepted(net.Actor, n_obs=NUM_OBS, num_envs=size.num_envs, init_scale=0.01,
                              hidden_dim=size.actor_width, **common)
        self.critic = accepted(net.Critic, n_obs=NUM_CRITIC_OBS, hidden_dim=size.critic_width, **common)
        self.target = accepted(net.Critic, n_obs=NUM_CRITIC_OBS, hidden_dim=size.critic_width, **common)
        self.target.load_state_dict(self.critic.state_dict())
        self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=torch.tensor(cfg.critic_lr),
                                                  weight_decay=cfg.weight_decay)
        self.actor_optimizer = torch.optim.AdamW(self.actor.parameters(), lr=torch.tensor(cfg.actor_lr),
                                                 weight_decay=cfg.weight_decay)
        self.buffer = accepted(utils.SimpleReplayBuffer, n_env=size.num_envs, buffer_size=CAPACITY, n_obs=NUM_OBS,
                               n_act=NUM_ACTIONS, n_critic_obs=NUM_CRITIC_OBS, asymmetric_obs=True,
                               playground_mode=True, n_steps=1, gamma=cfg.gamma, device=device)
        self.obs_normalizer = utils.EmpiricalNormalization(NUM_OBS, device)
        self.critic_obs_normalizer = utils.EmpiricalNormalization(NUM_CRITIC_OBS, device)
        steps = [self.critic_step, self.actor_step, self.obs_normalizer.forward, self.critic_obs_normalizer.forward]
        if size.compile:  # its trainer compiles the two update functions and the normalisers
            steps = [torch.compile(step) for step in steps]
        self._critic_step, self._actor_step, self._normalize_obs, self._normalize_critic_obs = steps

    def fill(self, transitions: list[TensorDict]) -> None:
        for t in transitions:
            t = t.to(self.device)
            self.buffer.extend(TensorDict({
                "observations": t[keys.OBS], "critic_observations": t[keys.CRITIC_OBS],
                "actions": t[keys.ACTIONS],
                "next": {"observations": t[keys.NEXT_OBS], "critic_observations": t[keys.NEXT_CRITIC_OBS],
                         "rewards": t[keys.REWARDS], "dones": (t[keys.TERMINATED] | t[keys.TRUNCATED]).long(),
                         "truncations": t[keys.TRUNCATED].long()},
            }, batch_size=[self.size.num_envs]))

    def _critic_loss(self, data: TensorDict) -> torch.Tensor:
        """Its update_main: smoothed next actions from the online actor, both target heads
        projected, per sample the head with the smaller value, cross-entropy summed over heads."""
        cfg, nxt = self.cfg, data["next"]
        bootstrap = (nxt["truncations"].bool() | ~nxt["dones"].bool()).float()
        own = cfg.fast_td3
        noise = (torch.randn_like(data["actions"]) * own.policy_noise).clamp(-own.noise_clip, own.noise_clip)
        next_actions = (self.actor(nxt["observations"]) + noise).clamp(-1.0, 1.0)
        with torch.no_grad():
            proj1, proj2 = self.target.projection(nxt["critic_observations"], next_actions, nxt["rewards"],
                                                  bootstrap, cfg.gamma ** nxt["effective_n_steps"])
            v1, v2 = self.target.get_value(proj1), self.target.get_value(proj2)
            target = torch.where((v1 < v2).unsqueeze(1), proj1, proj2)
        q1, q2 = self.critic(data["critic_observations"], data["actions"])
        return (-(target * F.log_softmax(q1, dim=1)).sum(1).mean()
                - (target * F.log_softmax(q2, dim=1)).sum(1).mean())

    def _actor_loss(self, data: TensorDict) -> torch.Tensor:
        """Its update_pol: minus the smaller head's expected value."""
        p1, p2 = self.critic(data["critic_observations"], self.actor(data["observations"]))
        value = torch.minimum(self.critic.get_value(F.softmax(p1, dim=1)), self.critic.get_value(F.softmax(p2, dim=1)))
        return -value.mean()

    def _step(self, loss_fn, optimizer, data: TensorDict) -> torch.Tensor:
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.cfg.precision == "bf16"):
            loss = loss_fn(data)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def critic_step(self, data: TensorDict) -> torch.Tensor:
        return self._step(self._critic_loss, self.critic_optimizer, data)

    def actor_step(self, data: TensorDict) -> torch.Tensor:
        return self._step(self._actor_loss, self.actor_optimizer, data)

    def sample(self) -> TensorDict:
        data = self.buffer.sample(max(1, self.size.batch_size // self.size.num_envs))
        data["observations"] = self._normalize_obs(data["observations"])
        data["next"]["observations"] = self._normalize_obs(data["next"]["observations"])
        data["critic_observations"] = self._normalize_critic_obs(data["critic_observations"])
        data["next"]["critic_observations"] = self._normalize_critic_obs(data["next"]["critic_observations"])
        return data

    def learn(self) -> None:
        """One global step of learning: `num_updates` critic updates, the actor on every second."""
        for i in range(self.cfg.num_updates):
            data = self.sample()
            self._critic_step(data)
            if i % self.cfg.policy_frequency == 1:
                self._actor_step(data)
            self.soft_update()

    @torch.no_grad()
    def soft_update(self) -> None:
        """Its soft_update: scale the target, then add the online weights."""
        target, online = list(self.target.parameters()), list(self.critic.parameters())
        torch._foreach_mul_(target, 1.0 - self.cfg.tau)
        torch._foreach_add_(target, online, alpha=self.cfg.tau)


# ------------------------------------------------------------------ ours
class Ours:
    def __init__(self, size: Size, cfg: AlgoConfig, device: torch.device) -> None:
        self.size, self.cfg = size, cfg
        spec = EnvSpec(num_envs=size.num_envs, num_obs=NUM_OBS, num_critic_obs=NUM_CRITIC_OBS, num_actions=NUM_ACTIONS)
        self.agent = FastTD3(cfg, spec, device).compile_update()
        self.buffer = ReplayBuffer(spec, CAPACITY, critic_obs_extends_actor_obs=True, n_step=cfg.n_step, gamma=cfg.gamma,
                                   device=device)
        self.generator = torch.Generator(device=device).manual_seed(0)

    def fill(self, transitions: list[TensorDict]) -> None:
        for t in transitions:
            self.buffer.extend(t.to(self.agent.device))

    def learn(self) -> None:
        for _ in range(self.cfg.num_updates):
            self.agent.update(self.buffer.sample(self.size.batch_size, generator=self.generator))


def transitions(num_envs: int, steps: int, seed: int = 0) -> list[TensorDict]:
    """Random Playground-shaped transitions (the critic observation extends the actor's)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        obs, next_obs = torch.randn(num_envs, NUM_OBS, generator=g), torch.randn(num_envs, NUM_OBS, generator=g)
        tail = NUM_CRITIC_OBS - NUM_OBS
        out.append(TensorDict({
            keys.OBS: obs, keys.NEXT_OBS: next_obs,
            keys.CRITIC_OBS: torch.cat([obs, torch.randn(num_envs, tail, generator=g)], 1),
            keys.NEXT_CRITIC_OBS: torch.cat([next_obs, torch.randn(num_envs, tail, generator=g)], 1),
            keys.ACTIONS: torch.rand(num_envs, NUM_ACTIONS, generator=g) * 2 - 1,
            keys.REWARDS: torch.randn(num_envs, generator=g),
            keys.TERMINATED: (ended := torch.rand(num_envs, generator=g)) < 0.02,
            keys.TRUNCATED: (ended >= 0.02) & (ended < 0.03),  # a time-out is never also a termination
        }, batch_size=[num_envs]))
    return out


# ------------------------------------------------------------------ the maths check
def paired_parameters(reference: Reference, ours: Ours):
    """(reference tensor, our tensor) for every weight and bias of actor, critic and target
    critic: its twin heads are two modules, ours one stacked module storing weights transposed."""
    ref_linears = [m for m in reference.actor.modules() if isinstance(m, torch.nn.Linear)]
    our_linears = [m for m in ours.agent.actor.modules() if isinstance(m, torch.nn.Linear)]
    assert len(ref_linears) == len(our_linears), "actor depths differ"
    for theirs, mine in zip(ref_linears, our_linears):
        yield theirs.weight, mine.weight
        yield theirs.bias, mine.bias
    for critic, ref in ((ours.agent.critic, reference.critic), (ours.agent.target_critic, reference.target)):
        heads = [[m for m in q.modules() if isinstance(m, torch.nn.Linear)] for q in (ref.qnet1, ref.qnet2)]
        for depth, layer in enumerate(critic.layers):
            for h in range(2):
                yield heads[h][depth].weight, layer.weight[h].T
                yield heads[h][depth].bias, layer.bias[h, 0]


@torch.no_grad()
def copy_weights(reference: Reference, ours: Ours) -> None:
    """Our networks take the reference's weights."""
    for theirs, mine in paired_parameters(reference, ours):
        mine.copy_(theirs)


def reference_batch(sample: TensorDict) -> TensorDict:
    """One of our sampled batches in the reference's layout."""
    return TensorDict({
        "observations": sample[keys.OBS], "critic_observations": sample[keys.CRITIC_OBS],
        "actions": sample[keys.ACTIONS],
        "next": {"observations": sample[keys.NEXT_OBS], "critic_observations": sample[keys.NEXT_CRITIC_OBS],
                 "rewards": sample[keys.REWARDS],
                 "dones": (sample[keys.TERMINATED] | sample[keys.TRUNCATED]).long(),
                 "truncations": sample[keys.TRUNCATED].long(),
                 "effective_n_steps": sample[keys.NSTEP_LENGTH].float()},
    }, batch_size=sample.batch_size)


def one_update_each(net, utils, sample: TensorDict, device: torch.device) -> dict[str, float]:
    """One whole update on each side from the same weights, batch and smoothing noise (fp32,
    no normalisation, the same AdamW settings): critic step, actor step, Polyak. Returns
    both sides' losses and the largest parameter difference afterwards."""
    size = Size("check", 8, sample.shape[0], 64, 128, compile=False)
    base = algo_config(size, precision="fp32", compile=False)
    cfg = replace(base, fast_td3=replace(base.fast_td3, policy_noise=0.2), policy_frequency=1,
                  obs_normalization=False, adam_betas=[0.9, 0.999])  # the reference's AdamW betas
    reference, ours = Reference(net, utils, size, cfg, device), Ours(size, cfg, device)
    copy_weights(reference, ours)
    data = reference_batch(sample)
    torch.manual_seed(11)
    ref_critic, ref_actor = reference.critic_step(data), reference.actor_step(data)
    reference.soft_update()
    torch.manual_seed(11)
    metrics = ours.agent.update(sample)
    gap = max((theirs - mine).abs().max().item() for theirs, mine in paired_parameters(reference, ours))
    return {"critic_loss_reference": float(ref_critic), "critic_loss_ours": float(metrics["critic_loss"]),
            "actor_loss_reference": float(ref_actor), "actor_loss_ours": float(metrics["actor_loss"]),
            "parameter_gap": gap}


def check_same_maths(net, utils, device: torch.device, batch_size: int = 512) -> dict[str, dict[str, float]]:
    """`one_update_each` on a batch whose targets stay inside the value support (asserted
    equal within 1e-5) and on the same batch with rewards that push targets outside it
    (reported: the two pick the clipped-double-Q head differently there, see docs/performance.md)."""
    size = Size("check", 8, batch_size, 64, 128, compile=False)
    filler = Ours(size, algo_config(size, precision="fp32", compile=False), device)
    filler.fill(transitions(size.num_envs, 8, seed=1))
    sample = filler.buffer.sample(batch_size, generator=torch.Generator().manual_seed(3))
    inside = sample.clone()
    inside[keys.REWARDS] = sample[keys.REWARDS].clamp(-1, 1) * 0.25  # |r| + 0.97 * 10 < 10
    outside = sample.clone()
    outside[keys.REWARDS] = sample[keys.REWARDS] * 5.0
    same, clamped = one_update_each(net, utils, inside, device), one_update_each(net, utils, outside, device)
    for side in ("critic", "actor"):
        ours, theirs = same[f"{side}_loss_ours"], same[f"{side}_loss_reference"]
        assert abs(ours - theirs) <= 1e-5 * max(1.0, abs(theirs)), f"{side} losses differ: {ours} vs {theirs}"
    assert same["parameter_gap"] < 1e-5, f"parameters differ by {same['parameter_gap']} after one update"
    return {"inside_support": same, "outside_support": clamped}


# ------------------------------------------------------------------ timing
def time_alternating(contenders: dict, rounds: int, steps: int, device: torch.device) -> dict[str, float]:
    """Median seconds per call of each contender's `learn`, run alternately `rounds` times."""
    for learner in contenders.values():  # warm-up (compilation; CUDA graphs record on a later call)
        for _ in range(3):
            learner.learn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, learner in contenders.items():
            synchronize(device)
            start = time.perf_counter()
            for _ in range(steps):
                learner.learn()
            synchronize(device)
            times[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(t) for name, t in times.items()}


def time_sampling(reference: Reference, ours: Ours, device: torch.device, rounds: int = 20) -> dict[str, float]:
    """Median seconds of drawing one batch from each replay buffer (no normalisation)."""
    per_env = max(1, reference.size.batch_size // reference.size.num_envs)
    samplers = {"reference": lambda: reference.buffer.sample(per_env),
                "ours": lambda: ours.buffer.sample(ours.size.batch_size, generator=ours.generator)}
    times: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(rounds):
        for name, sample in samplers.items():
            synchronize(device)
            start = time.perf_counter()
            sample()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=path_in, required=True, help="a checkout of younggyoseo/FastTD3")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--rounds", type=whole(1, 1000), default=5, help="alternating timing rounds (median reported)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=file_out(), default=None)
    args = parser.parse_args()
    if not (args.reference / "fast_td3" / "fast_td3.py").is_file():
        parser.refuse(f"--reference {args.reference}: not a checkout of younggyoseo/FastTD3 (no fast_td3/fast_td3.py)")
    device = torch.device(args.device)
    net, utils = load_reference(args.reference)
    maths = check_same_maths(net, utils, device)
    same, clamped = maths["inside_support"], maths["outside_support"]
    print("One whole update each from the same weights, batch and noise (fp32):")
    print(f"  targets inside the support: critic loss {same['critic_loss_ours']:.6f} (ours) vs "
          f"{same['critic_loss_reference']:.6f} (reference), actor loss {same['actor_loss_ours']:.6f} vs "
          f"{same['actor_loss_reference']:.6f}, parameters after the step within {same['parameter_gap']:.1e}")
    print(f"  rewards x5, targets clamped: critic loss {clamped['critic_loss_ours']:.6f} vs "
          f"{clamped['critic_loss_reference']:.6f}, parameters within {clamped['parameter_gap']:.1e} "
          "(the heads' choice under clipped double Q differs where targets are clamped)")
    rows = []
    for key in args.sizes:
        size = SIZES[key]
        data = transitions(size.num_envs, CAPACITY)
        contenders = {
            "reference fp32": Reference(net, utils, size, algo_config(size, "fp32"), device),
            "ours fp32": Ours(size, algo_config(size, "fp32"), device),
            "ours bf16": Ours(size, algo_config(size, "bf16"), device),
        }
        for learner in contenders.values():
            learner.fill(data)
        reference_bf16 = Reference(net, utils, size, algo_config(size, "bf16"), device)
        reference_bf16.fill(data)
        try:
            reference_bf16.learn()
            contenders["reference bf16"] = reference_bf16
        except RuntimeError as error:  # its projection mixes dtypes under CPU autocast
            print(f"{size.name}: the reference does not run under bf16 autocast here: {str(error).splitlines()[0]}")
        learn = time_alternating(contenders, args.rounds, 1 if key == "full" else 5, device)
        sampling = time_sampling(contenders["reference fp32"], contenders["ours fp32"], device)
        baseline = learn.get("reference bf16", learn["reference fp32"])
        row = {"size": size.name, "batch": size.batch_size, "envs": size.num_envs, "compiled": size.compile,
               "learn_s": learn, "sample_s": sampling,
               "same_precision_speedup": learn["reference fp32"] / learn["ours fp32"],
               "best_speedup": min(learn["reference fp32"], baseline) / min(learn["ours fp32"], learn["ours bf16"]),
               "sample_speedup": sampling["reference"] / sampling["ours"]}
        rows.append(row)
        print(f"{size.name}: batch {size.batch_size}, {size.num_envs} envs, {'compiled' if size.compile else 'eager'}, "
              "2 critic updates + 1 actor update per global step (ms, median of alternating rounds):", flush=True)
        for name, seconds in learn.items():
            print(f"  {name:15s} {seconds * 1e3:9.1f} ms  ({learn['reference fp32'] / seconds:.2f}x the reference fp32)")
        print(f"  ours vs the reference, both fp32: {row['same_precision_speedup']:.2f}x; mixed precision, "
              f"each at its fastest that runs here: {row['best_speedup']:.2f}x")
        print(f"  replay sampling: reference {sampling['reference'] * 1e3:.2f} ms, ours {sampling['ours'] * 1e3:.2f} ms "
              f"({row['sample_speedup']:.2f}x)", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": platform.processor() or platform.machine(),
                                         "torch": torch.__version__, "threads": torch.get_num_threads(),
                                         "maths": maths, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
