"""Small builders shared by the learner tests."""

import os
from pathlib import Path

import torch
from tensordict import TensorDict

from fast_td3.learner.config import FAST_TD3_KEYS, AlgoConfig, FastSACConfig, FastTD3Config
from fast_td3.learner.replay import ReplayBuffer


def tiny_config(**overrides) -> AlgoConfig:
    """The reference algorithm with small networks and eager fp32 execution."""
    values = dict(
        actor_hidden_dims=[32, 32],
        critic_hidden_dims=[64, 64],
        num_atoms=21,
        v_min=-10.0,
        v_max=10.0,
        batch_size=64,
        precision="fp32",
        compile=False,
    )
    td3 = {k: overrides.pop(k) for k in FAST_TD3_KEYS if k in overrides}  # FastTD3's own keys, flat here
    values.update(overrides)
    values["fast_td3"] = FastTD3Config(**td3)
    if isinstance(values.get("fast_sac"), dict):
        values["fast_sac"] = FastSACConfig(**values["fast_sac"])
    return AlgoConfig(**values)


def tiny_sac_config(**overrides) -> AlgoConfig:
    """FastSAC with its network options (SiLU, LayerNorm) at the tiny sizes of `tiny_config`."""
    values = dict(name="fast_sac", activation="silu", layer_norm=True, use_cdq=False, tau=0.125, weight_decay=0.001)
    values.update(overrides)
    return tiny_config(**values)


def random_batch(num_obs, num_actions, batch_size, num_critic_obs=None, seed=0) -> TensorDict:
    """A sampled-batch-shaped TensorDict with random contents (mixed terminations/time-outs)."""
    g = torch.Generator().manual_seed(seed)
    data = {
        "observations": torch.randn(batch_size, num_obs, generator=g),
        "next_observations": torch.randn(batch_size, num_obs, generator=g),
        "actions": torch.rand(batch_size, num_actions, generator=g) * 2 - 1,
        "rewards": torch.randn(batch_size, generator=g),
        "terminated": torch.rand(batch_size, generator=g) < 0.1,
        "truncated": torch.rand(batch_size, generator=g) < 0.1,
        "discount": torch.full((batch_size,), 0.99),
    }
    if num_critic_obs is not None:
        data["critic_observations"] = torch.randn(batch_size, num_critic_obs, generator=g)
        data["next_critic_observations"] = torch.randn(batch_size, num_critic_obs, generator=g)
    return TensorDict(data, batch_size=[batch_size])


def fill_buffer(buffer: ReplayBuffer, steps: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    spec = buffer.spec
    e = spec.num_envs
    for _ in range(steps):
        step = {
            "observations": torch.randn(e, spec.num_obs, generator=g),
            "next_observations": torch.randn(e, spec.num_obs, generator=g),
            "actions": torch.rand(e, spec.num_actions, generator=g) * 2 - 1,
            "rewards": torch.randn(e, generator=g),
            "terminated": torch.rand(e, generator=g) < 0.05,
            "truncated": torch.rand(e, generator=g) < 0.05,
        }
        if spec.num_critic_obs is not None:
            step["critic_observations"] = torch.randn(e, spec.num_critic_obs, generator=g)
            step["next_critic_observations"] = torch.randn(e, spec.num_critic_obs, generator=g)
        buffer.extend(TensorDict(step, batch_size=[e]))


def tiny_train_config(total_steps=30, seed=0, num_envs=4, **algo_overrides):
    """A short InvertedPendulum run with the tiny learner (eager fp32, no console)."""
    from fast_td3.training.config import EnvConfig, LoggerConfig, TrainConfig

    algo = dict(batch_size=64, buffer_size=200, learning_starts=4, v_min=-10.0, v_max=110.0)
    algo.update(algo_overrides)
    return TrainConfig(
        env=EnvConfig(suite="gymnasium", task="InvertedPendulum-v5", num_envs=num_envs),
        algo=tiny_config(**algo),
        logger=LoggerConfig(log_interval=10, console=False),
        total_steps=total_steps,
        eval_interval=0,
        eval_episodes=2,
        save_interval=0,
        seed=seed,
        device="cpu",
    )


def save_untrained_t1_checkpoint(run_dir: Path, step: int):
    """An untrained T1LowDim FastTD3 checkpoint in `run_dir`, saved the way the runner saves one.

    Returns its TrainConfig. For the export and shipping code, which only need the checkpoint's
    shapes and config, not a walking policy (training one takes an hour)."""
    from dataclasses import asdict

    from envs.protocol import EnvSpec
    from fast_td3.learner.algorithms.fast_td3 import FastTD3
    from fast_td3.training import checkpoint
    from fast_td3.training.config import EnvConfig, TrainConfig
    from sim2real.export import t1_bundle_extras

    cfg = TrainConfig(env=EnvConfig(suite="playground", task="T1LowDimJoystickFlatTerrain", num_envs=2),
                      algo=tiny_config(), device="cpu")
    meta = t1_bundle_extras(cfg)["meta"]
    shapes = {"num_envs": 2, "num_obs": meta["observation"]["size"], "num_critic_obs": None,
              "num_actions": meta["action"]["size"]}
    agent = FastTD3(cfg.algo, EnvSpec(**shapes), "cpu")
    state = {"global_step": step, "agent": agent.training_state(), "config": asdict(cfg), "env": shapes}
    checkpoint.CheckpointManager(run_dir).save(state, step)
    return cfg


def make_runner(cfg, run_dir, eval_env=True):
    """A Runner over real gymnasium envs built the way `fast-td3-train` builds them."""
    from envs.gymnasium import GymnasiumVecEnv
    from fast_td3.training.evaluation import eval_seed
    from fast_td3.training.runner import Runner

    env = GymnasiumVecEnv(cfg.env.task, cfg.env.num_envs, seed=cfg.seed, **cfg.env.adapter_options())
    evaluation = None
    if eval_env:
        options = cfg.env.adapter_options(evaluation=True)
        evaluation = GymnasiumVecEnv(cfg.env.task, cfg.eval_episodes, seed=eval_seed(cfg.seed), **options)
    return Runner(cfg, env, evaluation, run_dir)


def assert_updates_continue_identically(agent, resumed, batches, metrics=("critic_loss",)) -> None:
    """Both learners take the same updates (same seeds) with bit-identical metrics and end with
    bit-identical modules: what a checkpoint round trip must give."""
    for b in batches:
        torch.manual_seed(7)
        m1 = agent.update(b)
        torch.manual_seed(7)
        m2 = resumed.update(b)
        for key in metrics:
            torch.testing.assert_close(m1[key], m2[key], rtol=0, atol=0, msg=key)
    for (name, a), b in zip(agent.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def site_hook(folder: Path, target: str | None = None, patch: str = "", block: tuple[str, ...] = ()) -> dict:
    """Environment for a subprocess whose sitecustomize blocks `block` imports and runs `patch`
    (with the module as `m`) as soon as `target` ("module:attribute") has been defined."""
    folder.mkdir(parents=True, exist_ok=True)
    code = ["import sys"] + [f"sys.modules[{name!r}] = None" for name in block]
    if target:
        module, attribute = target.split(":")
        code += [
            "import builtins",
            "_import = builtins.__import__",
            "def _hook(*args, **kwargs):",
            "    result = _import(*args, **kwargs)",
            f"    m = sys.modules.get({module!r})",
            f"    if hasattr(m, {attribute!r}) and not getattr(m, '_patched_by_test', False):",
            "        m._patched_by_test = True",
            *("        " + line for line in patch.strip().splitlines()),
            "    return result",
            "builtins.__import__ = _hook",
        ]
    (folder / "sitecustomize.py").write_text("\n".join(code) + "\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone), from /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_a_trainer_with_workers(script: Path, workers: int) -> list[int]:
    """Run `script` (it prints its env workers' pids on one line, then waits), check that
    `workers` of them run, SIGKILL the script and return their pids: what the OOM killer does."""
    import signal
    import subprocess
    import sys

    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parent.parent)
    try:
        pids = [int(pid) for pid in trainer.stdout.readline().split()]
        assert len(pids) == workers and all(process_alive(pid) for pid in pids), pids
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    return pids


def assert_processes_exit(pids: list[int], what: str, seconds: float = 20) -> None:
    """Wait up to `seconds` for every process in `pids` to be gone; fail naming `what` otherwise."""
    import time

    deadline = time.monotonic() + seconds
    while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(process_alive(pid) for pid in pids), what
