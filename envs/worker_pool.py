"""Gymnasium envs stepped in batches: in this process, or sharded over worker processes.

Both backends step with same-step auto-reset and return plain NumPy arrays
`(obs, rewards, terminated, truncated, final_obs)`, where `final_obs` holds the true
last observation of every env that just finished (and equals `obs` elsewhere).

`WorkerPool` splits the envs into `num_workers` contiguous shards; each worker steps its
shard in a `SyncVectorEnv` and exchanges actions and results through shared memory, so a
step costs one small pipe message per worker, not one per env. `SubprocPool` is SB3's
`SubprocVecEnv` (one process per env, observations pickled through pipes), the way the
reference runs HumanoidBench. On 2 cores the shared-memory pool beat a process per env
for every task we measured; in-process stepping is faster still for cheap envs (see
scripts/bench_envs.py).

Every backend also has `call(name)`: each env's method `name()` (found through its
wrappers) called where the env lives, the results in env order (HumanoidBench's gait
signals come back this way).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import traceback
import weakref
from typing import Any, Callable

import gymnasium as gym
import numpy as np

EnvFactory = Callable[[], gym.Env]
StepResult = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _sync_vector_env(make_env: EnvFactory, num_envs: int) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([make_env] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def _step(vec: gym.vector.SyncVectorEnv, actions: np.ndarray) -> StepResult:
    obs, rewards, terminated, truncated, info = vec.step(actions)
    final_obs = obs
    finished = info.get("_final_obs")
    if finished is not None and finished.any():
        final_obs = obs.copy()
        for i in np.flatnonzero(finished):
            final_obs[i] = info["final_obs"][i]
    return obs, np.asarray(rewards, dtype=np.float64), terminated, truncated, final_obs


class InProcess:
    """All envs in this process (no inter-process cost: best for cheap envs and few cores)."""

    def __init__(self, make_env: EnvFactory, num_envs: int) -> None:
        self._vec = _sync_vector_env(make_env, num_envs)
        self.single_observation_space = self._vec.single_observation_space
        self.single_action_space = self._vec.single_action_space

    def reset(self, seeds: list[int] | None) -> np.ndarray:
        return self._vec.reset(seed=seeds)[0]

    def step(self, actions: np.ndarray) -> StepResult:
        return _step(self._vec, actions)

    def render(self, env_index: int) -> np.ndarray:
        return np.asarray(self._vec.envs[env_index].render())

    def call(self, name: str) -> list[Any]:
        """Every env's method `name()` (looked up through its wrappers), in env order."""
        return list(self._vec.call(name))

    def close(self) -> None:
        self._vec.close()


# ------------------------------------------------------------------ worker processes
class _Shared:
    """NumPy views of the shared arrays of one pool."""

    def __init__(self, raw: dict[str, Any], num_envs: int, num_obs: int, num_actions: int) -> None:
        def view(name, dtype, *shape):
            return np.frombuffer(raw[name], dtype=dtype).reshape(num_envs, *shape)

        self.actions = view("actions", np.float64, num_actions)
        self.obs = view("obs", np.float64, num_obs)
        self.final_obs = view("final_obs", np.float64, num_obs)
        self.rewards = view("rewards", np.float64)
        self.terminated = view("terminated", np.bool_)
        self.truncated = view("truncated", np.bool_)


def _worker(conn, parent_ends, make_env: EnvFactory, lo: int, hi: int, raw: dict[str, Any], sizes) -> None:
    # Ctrl-C and SIGTERM reach the whole process group; the trainer decides when to stop
    # and closes its workers itself (with SIGKILL when they do not answer).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Close the parent's pipe ends this fork inherited, so that when the trainer dies the
    # worker reads end-of-file and exits instead of living on as an orphan.
    for end in parent_ends:
        end.close()
    try:
        vec = _sync_vector_env(make_env, hi - lo)
        shared = _Shared(raw, *sizes)
        conn.send(("ok", None))
        while True:
            command, arg = conn.recv()
            if command == "step":
                obs, rewards, terminated, truncated, final_obs = _step(vec, shared.actions[lo:hi])
                shared.obs[lo:hi] = obs
                shared.final_obs[lo:hi] = final_obs
                shared.rewards[lo:hi] = rewards
                shared.terminated[lo:hi] = terminated
                shared.truncated[lo:hi] = truncated
                conn.send(("ok", None))
            elif command == "reset":
                shared.obs[lo:hi] = vec.reset(seed=arg)[0]
                conn.send(("ok", None))
            elif command == "render":
                conn.send(("ok", np.asarray(vec.envs[arg].render())))
            elif command == "call":
                conn.send(("ok", list(vec.call(arg))))
            elif command == "close":
                vec.close()
                conn.send(("ok", None))
                return
    except (EOFError, OSError):  # the trainer is gone
        return
    except Exception:  # report to the trainer instead of dying silently
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass


def _kill(processes: list, conns: list) -> None:
    """Last resort (also at interpreter exit): workers ignore SIGTERM, so SIGKILL them."""
    for conn in conns:
        conn.close()
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join(timeout=5)


def available_cpus() -> int:
    """CPU cores this process may run on (affinity and container limits included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class WorkerPool:
    """`num_envs` envs sharded over `num_workers` processes (fork where available)."""

    CLOSE_TIMEOUT_S = 10.0

    def __init__(
        self, make_env: EnvFactory, num_envs: int, num_workers: int, probe_env: EnvFactory | None = None
    ) -> None:
        # The spaces come from a probe env in this process: one that never renders, since a GL
        # context made here before forking hangs the workers' own (HumanoidBench builds its
        # renderer in its constructor).
        probe = (probe_env or make_env)()
        self.single_observation_space = probe.observation_space
        self.single_action_space = probe.action_space
        probe.close()
        num_obs = int(np.prod(self.single_observation_space.shape))
        num_actions = int(np.prod(self.single_action_space.shape))
        self.num_envs = num_envs
        self.num_workers = max(1, min(int(num_workers), num_envs))
        methods = mp.get_all_start_methods()
        context = mp.get_context("fork" if "fork" in methods else "spawn")
        sizes = (num_envs, num_obs, num_actions)
        raw = {
            "actions": context.RawArray("d", num_envs * num_actions),
            "obs": context.RawArray("d", num_envs * num_obs),
            "final_obs": context.RawArray("d", num_envs * num_obs),
            "rewards": context.RawArray("d", num_envs),
            "terminated": context.RawArray("b", num_envs),
            "truncated": context.RawArray("b", num_envs),
        }
        self._shared = _Shared(raw, *sizes)
        bounds = np.linspace(0, num_envs, self.num_workers + 1).astype(int)
        self._shards = list(zip(bounds[:-1], bounds[1:]))
        self._conns: list = []
        self._processes: list = []
        self._closed = False
        # Kills the workers if this pool is never closed (garbage collection or exit).
        self._finalizer = weakref.finalize(self, _kill, self._processes, self._conns)
        try:
            for lo, hi in self._shards:
                parent, child = context.Pipe()
                self._conns.append(parent)
                args = (child, list(self._conns), make_env, int(lo), int(hi), raw, sizes)
                process = context.Process(target=_worker, args=args, daemon=True)
                process.start()
                child.close()
                self._processes.append(process)
            self._collect()
        except BaseException:
            self.close()
            raise

    def _collect(self) -> list[Any]:
        results = []
        for conn, process in zip(self._conns, self._processes):
            try:
                status, payload = conn.recv()
            except (EOFError, ConnectionResetError):
                raise RuntimeError(f"env worker {process.pid} died (exit code {process.exitcode})") from None
            if status == "error":
                raise RuntimeError(f"env worker {process.pid} failed:\n{payload}")
            results.append(payload)
        return results

    def reset(self, seeds: list[int] | None) -> np.ndarray:
        for conn, (lo, hi) in zip(self._conns, self._shards):
            conn.send(("reset", None if seeds is None else seeds[lo:hi]))
        self._collect()
        return self._shared.obs.copy()

    def step(self, actions: np.ndarray) -> StepResult:
        shared = self._shared
        shared.actions[:] = actions
        for conn in self._conns:
            conn.send(("step", None))
        self._collect()
        return (
            shared.obs.copy(), shared.rewards.copy(), shared.terminated.copy(),
            shared.truncated.copy(), shared.final_obs.copy(),
        )

    def render(self, env_index: int) -> np.ndarray:
        for i, (lo, hi) in enumerate(self._shards):
            if lo <= env_index < hi:
                self._conns[i].send(("render", env_index - lo))
                status, frame = self._conns[i].recv()
                if status == "error":
                    raise RuntimeError(frame)
                return frame
        raise IndexError(env_index)

    def call(self, name: str) -> list[Any]:
        """Every env's method `name()`, called in its worker (one pipe round trip per
        worker; the results are pickled back), in env order."""
        for conn in self._conns:
            conn.send(("call", name))
        return [result for shard in self._collect() for result in shard]

    def close(self) -> None:
        """Ask every worker to close its envs; kill those that do not answer in time."""
        if self._closed:
            return
        self._closed = True
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except OSError:
                pass
        for conn in self._conns:
            try:
                if conn.poll(self.CLOSE_TIMEOUT_S):
                    conn.recv()
            except Exception:  # a dead worker or a reply torn by an interrupt: kill below
                pass
        self._finalizer()


# ------------------------------------------------------------------ SB3 SubprocVecEnv
class SeedFromResetOptions(gym.Wrapper):
    """Takes `reset(options={"seed": s})` as `reset(seed=s)`: SB3's public `set_options`
    then carries a different seed to each env (its `seed()` only offers `seed + index`)."""

    def reset(self, *, seed=None, options=None):
        options = dict(options or {})
        seed = options.pop("seed", seed)
        return self.env.reset(seed=seed, options=options or None)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the trainer dies. Forked SB3 workers inherit each
    other's pipe ends, so they would never read end-of-file and would live on as orphans."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: close() and the finalizer still kill them
        pass


def _seed_wrapped(make_env: EnvFactory) -> gym.Env:
    """Runs in each SB3 worker: like `_worker`, leave Ctrl-C and SIGTERM to the trainer
    (which finishes its step and saves), and die with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    return SeedFromResetOptions(make_env())


class SubprocPool:
    """`num_envs` envs, one process each, through stable-baselines3's `SubprocVecEnv`.

    SB3 auto-resets a finished env inside its worker and keeps the true last observation in
    `info["terminal_observation"]`; `info["TimeLimit.truncated"]` marks time-outs that are not
    also terminations, which is exactly the contract's split.
    """

    def __init__(self, make_env: EnvFactory, num_envs: int, start_method: str | None = None) -> None:
        from stable_baselines3.common.vec_env import SubprocVecEnv

        factory = functools.partial(_seed_wrapped, make_env)
        if start_method is None and "fork" in mp.get_all_start_methods():
            # SB3's default, forkserver, re-imports everything in every env's process: for
            # HumanoidBench hundreds of MB each before its env, too much for 128 envs.
            start_method = "fork"
        self._vec = SubprocVecEnv([factory] * num_envs, start_method=start_method)
        self._finalizer = weakref.finalize(self, _kill, self._vec.processes, [])
        self.num_envs = num_envs
        self.single_observation_space = self._vec.observation_space
        self.single_action_space = self._vec.action_space

    def reset(self, seeds: list[int] | None) -> np.ndarray:
        if seeds is not None:
            self._vec.set_options([{"seed": int(s)} for s in seeds])
        return np.asarray(self._vec.reset(), dtype=np.float64)

    def step(self, actions: np.ndarray) -> StepResult:
        obs, rewards, dones, infos = self._vec.step(actions)
        obs = np.asarray(obs, dtype=np.float64)
        truncated = np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos])
        terminated = dones & ~truncated
        final_obs = obs
        if dones.any():
            final_obs = obs.copy()
            for i in np.flatnonzero(dones):
                final_obs[i] = infos[i]["terminal_observation"]
        return obs, np.asarray(rewards, dtype=np.float64), terminated, truncated, final_obs

    def render(self, env_index: int) -> np.ndarray:
        return np.asarray(self._vec.env_method("render", indices=[env_index])[0])

    def call(self, name: str) -> list[Any]:
        """Every env's method `name()`, called in its process (SB3's `env_method`, which
        looks it up through the wrappers), in env order."""
        return list(self._vec.env_method(name))

    def close(self) -> None:
        """SB3's close, then SIGKILL for any worker it could not reach (a dead pipe)."""
        try:
            self._vec.close()
        except (OSError, EOFError):
            pass
        finally:
            self._finalizer()
