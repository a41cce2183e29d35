"""Data-parallel training on torch.distributed: gloo, 2 processes on this CPU.

The update check spawns two ranks in-process; the end-to-end check launches the real
CLI under torchrun (`python -m torch.distributed.run`), trains, checkpoints, resumes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import random_batch, tiny_config

from fast_td3.training import distributed
from envs.protocol import EnvSpec
from fast_td3.learner.algorithms.fast_td3 import FastTD3

ROOT = Path(__file__).resolve().parents[1]
NUM_OBS, NUM_CRITIC_OBS, NUM_ACTIONS, BATCH = 6, 9, 3, 32
# policy noise off: its random draws could not match between one batch of 2n and two of n
ALGO = dict(policy_frequency=1, policy_noise=0.0, max_grad_norm=0.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent() -> FastTD3:
    torch.manual_seed(0)
    spec = EnvSpec(num_obs=NUM_OBS, num_critic_obs=NUM_CRITIC_OBS, num_actions=NUM_ACTIONS)
    return FastTD3(tiny_config(**ALGO), spec, device="cpu")


def _observations(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(7 + 5 * rank, NUM_OBS, generator=g) * (rank + 1) + 3 * rank


def _update_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        agent = _agent()
        if rank == 1:  # a different start: the broadcast must replace it
            torch.nn.init.normal_(next(agent.critic.parameters()))
        ctx = distributed.Context(rank, world, rank, dist.group.WORLD)
        distributed.broadcast_parameters_(agent, ctx)
        agent.enable_data_parallel(world)
        agent.update_normalizers(_observations(rank))  # different data and sizes per rank
        for step in range(2):
            agent.update(random_batch(NUM_OBS, NUM_ACTIONS, BATCH, NUM_CRITIC_OBS, seed=10 * step + rank))
        distributed.check_replicas(agent, ctx)
        torch.save(agent.state_dict(), f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_ranks_stay_identical_and_equal_one_process_on_the_pooled_batches(tmp_path):
    """Two updates, each rank on its own batch: both ranks hold the same networks, equal to
    one process updating on the two batches concatenated; the observation normaliser
    holds the statistics of both ranks' data pooled."""
    world = 2
    mp.spawn(_update_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]

    single = _agent()
    single.update_normalizers(torch.cat([_observations(r) for r in range(world)]))
    for step in range(2):
        pooled = torch.cat([random_batch(NUM_OBS, NUM_ACTIONS, BATCH, NUM_CRITIC_OBS, seed=10 * step + r)
                            for r in range(world)])
        single.update(pooled)
    expected = single.state_dict()
    for name, value in expected.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{name} differs between the ranks"
        if name.endswith("num_batches_tracked"):
            continue
        torch.testing.assert_close(ranks[0][name], value, atol=2e-5, rtol=1e-4,
                                   msg=lambda m: f"{name}: ranks vs one process on the pooled batch: {m}")
    initial = _agent().state_dict()
    assert any(not torch.equal(expected[k], initial[k]) for k in expected if k.startswith(("critic.", "actor.")))


def _mismatch_worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        agent = _agent()  # no gradient averaging: the replicas drift apart
        agent.update(random_batch(NUM_OBS, NUM_ACTIONS, BATCH, NUM_CRITIC_OBS, seed=rank))
        try:
            distributed.check_replicas(agent, distributed.Context(rank, world, rank, dist.group.WORLD))
            Path(out, f"rank{rank}").write_text("no error")
        except distributed.ReplicaMismatchError as error:
            Path(out, f"rank{rank}").write_text(str(error))
    finally:
        dist.destroy_process_group()


def test_replicas_that_drift_apart_are_detected(tmp_path):
    mp.spawn(_mismatch_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2)
    for rank in range(2):
        assert "rank 1's networks differ from rank 0's" in (tmp_path / f"rank{rank}").read_text()


def test_rank_seeds_are_independent_of_neighbouring_run_seeds():
    seeds = {(seed, rank): distributed.Context(rank, 4, rank).rank_seed(seed) for seed in (1, 2, 3) for rank in range(4)}
    assert seeds[(1, 0)] == 1  # rank 0 keeps the run seed: a 1-rank run is the single-process run
    assert len(set(seeds.values())) == len(seeds)  # e.g. seed 1's rank 1 is not seed 2's rank 0


def test_split_batch_gives_each_rank_its_share():
    from helpers import make_runner, tiny_train_config

    cfg = tiny_train_config(batch_size=64)
    cfg.distributed.batch = "split"
    runner = make_runner(cfg, "/tmp/unused-run", eval_env=False)
    assert runner.batch_size == 64  # one process: the whole batch
    runner.env.close()
    assert distributed.batch_per_rank(64, "split", 4, distributed.Context(0, 4, 0)) == 16
    assert distributed.batch_per_rank(64, "per_rank", 4, distributed.Context(0, 4, 0)) == 64
    with pytest.raises(ValueError, match="at least env.num_envs"):
        distributed.batch_per_rank(64, "split", 4, distributed.Context(0, 32, 0))


# ---------------------------------------------------------------- the CLI under torchrun
COMMON = ["task=InvertedPendulum-v5", "sizing=cpu", "env.num_envs=4", "algo.batch_size=64",
          "algo.learning_starts=5", "eval_interval=20", "save_interval=20", "eval_episodes=3",
          "logger.log_interval=10", "logger.console=false"]


def stop_torchrun(job: subprocess.Popen) -> None:
    """Ends a torchrun job that is still running (Ctrl-C, a timeout, a failed assert). Its ranks
    run in sessions of their own, out of reach of the terminal's Ctrl-C: SIGTERM lets torchrun
    stop them; a SIGKILL straight away (what subprocess.run does) would leave them orphaned."""
    if job.poll() is None:
        job.terminate()
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()


def torchrun(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "fast_td3.training.train", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        stdout, stderr = job.communicate(timeout=600)
    finally:
        stop_torchrun(job)
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr)


def test_two_ranks_train_evaluate_checkpoint_and_resume(tmp_path):
    """One run folder for the job, metrics and checkpoints from rank 0, evaluation over
    both ranks' episodes, env steps counted over both ranks; a resume on 2 ranks continues
    from rank 0's checkpoint (replicas are checked identical at every checkpoint)."""
    from fast_td3.training.metrics_log import read_metrics

    first = torchrun(*COMMON, "total_steps=40", f"out_dir={tmp_path}")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    (run_dir,) = (tmp_path / "InvertedPendulum-v5").iterdir()
    assert run_dir.name.startswith("torchrun-")
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt")) == [
        "best.pt", "step_000000020.pt", "step_000000040.pt"]  # best.pt: from rank 0 alone, like the others
    records = read_metrics(run_dir)
    evals = [r for r in records if "eval/return_mean" in r]
    assert [r["step"] for r in evals] == [20, 40] and all(r["eval/episodes"] == 6 for r in evals)
    assert len([r for r in records if r.get("step") == 10 and "loss/critic" in r]) == 1  # rank 0 logs alone
    assert all(r["env_steps"] == r["step"] * 4 * 2 for r in records)  # 4 envs on each of 2 ranks
    assert first.stdout.count("Run folder:") == 1

    second = torchrun(f"resume={run_dir}", "total_steps=60")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-4000:]
    assert "Resuming" in second.stdout and "global step 40" in second.stdout
    assert (run_dir / "checkpoints" / "step_000000060.pt").exists()
    assert [r["step"] for r in read_metrics(run_dir) if "eval/return_mean" in r] == [20, 40, 60]
    assert len(list((tmp_path / "InvertedPendulum-v5").iterdir())) == 1  # no second folder


def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint(tmp_path):
    """SIGTERM to one worker only: the ranks agree on the stop at the next step, rank 0
    saves, both report the same step."""
    import signal
    import time

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "fast_td3.training.train", *COMMON, "total_steps=100000", "eval_interval=0", "save_interval=0",
               f"out_dir={tmp_path}"]
    job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.time() + 300
        metrics = None
        while time.time() < deadline and metrics is None:
            time.sleep(1)
            metrics = next((p for p in tmp_path.glob("*/*/metrics.jsonl") if p.stat().st_size > 0), None)
        assert metrics is not None, "training did not start"
        workers = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 2
        os.kill(int(workers[-1]), signal.SIGTERM)
        _, stderr = job.communicate(timeout=300)
    finally:
        stop_torchrun(job)
    stops = [line for line in stderr.splitlines() if line.startswith("Stopped at global step")]
    assert len(stops) == 2 and stops[0].split(";")[0] == stops[1].split(";")[0], stderr[-3000:]
    step = int(stops[0].split(";")[0].removeprefix("Stopped at global step "))
    (checkpoint,) = metrics.parent.glob("checkpoints/*.pt")
    assert checkpoint.name == f"step_{step:09d}.pt"


def test_ranks_stop_lines_sharing_one_stderr_never_run_into_each_other():
    """The CI failure behind `_say_whole_line`: two ranks' stop lines written to torchrun's one
    stderr pipe came out as one line (unbuffered, print() writes the text and its newline
    separately). Two processes write the line at once for half a second, starting together; every
    line read back must be whole."""
    import time

    line = "Stopped at global step 20; checkpoint saved to " + "x" * 200
    start = time.time() + 10  # both have imported by then (later only shortens the overlap)
    writer = ("import sys, time; from fast_td3.training.train import _say_whole_line\n"
              f"time.sleep(max(0.0, {start} - time.time()))\n"
              f"while time.time() < {start} + 0.5: _say_whole_line({line!r} + sys.argv[1])")
    read, write = os.pipe()
    writers = [subprocess.Popen([sys.executable, "-c", writer, str(rank)], cwd=ROOT, stderr=write,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}) for rank in (0, 1)]
    os.close(write)
    with os.fdopen(read) as pipe:
        lines = pipe.read().splitlines()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    assert sorted(set(lines)) == [line + "0", line + "1"], [l for l in lines if l not in (line + "0", line + "1")][:3]
