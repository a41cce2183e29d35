"""Each training process's share of the CPU cores.

Several trainers on one machine (torchrun ranks, a joblib sweep's parallel runs)
each start with torch's default of one thread per core, so N processes run N
times as many threads as there are cores and spend the difference waiting on
each other. Each process takes `cores // processes` threads instead. A job that a
launcher or scheduler granted CPUs (SLURM's --cpus-per-task, Ray's num_cpus:
training/cluster.py reads them) shares those, not the node's cores.
`FAST_TD3_THREADS` sets the count explicitly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from fast_td3.training.cluster import Grant

THREADS_ENV = "FAST_TD3_THREADS"


@dataclass(frozen=True)
class ThreadShare:
    threads: int
    reason: str

    def __str__(self) -> str:
        return f"{self.threads} ({self.reason})"


def cores_available() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset or a container)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def joblib_parallel_jobs(n_jobs: int, cores: int) -> int:
    """Runs a joblib launcher executes at once for `n_jobs` (joblib's meaning: -1 is every core)."""
    return n_jobs if n_jobs > 0 else max(cores + 1 + n_jobs, 1)


def sweep_jobs_in_parallel(hydra_cfg) -> int:
    """Runs of this Hydra sweep executing at once (the joblib launcher's n_jobs), else 1."""
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    n_jobs = OmegaConf.select(hydra_cfg, "launcher.n_jobs", default=None)
    if hydra_cfg.mode != RunMode.MULTIRUN or not isinstance(n_jobs, int):
        return 1
    return joblib_parallel_jobs(n_jobs, cores_available())


def thread_share(
    cores: int, environ: Mapping[str, str] | None = None, sweep_jobs: int = 1, granted: Grant | None = None
) -> ThreadShare:
    """Threads for one process: $FAST_TD3_THREADS when set, else the CPUs `granted` to this job
    (then the job is alone on them: `sweep_jobs` is not counted), else the cores, divided over
    the torchrun ranks on this node ($LOCAL_WORLD_SIZE) times the sweep runs in parallel."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(THREADS_ENV)
    if explicit:
        try:
            threads = int(explicit)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ValueError(f"{THREADS_ENV} must be a positive integer, got {explicit!r}")
        return ThreadShare(threads, f"{THREADS_ENV}")
    ranks = max(int(environ.get("LOCAL_WORLD_SIZE", "1") or 1), 1)
    if granted is not None:
        if ranks == 1:
            return ThreadShare(granted.cpus, f"{granted.cpus} CPUs granted by {granted.source}")
        return ThreadShare(max(granted.cpus // ranks, 1),
                           f"{granted.cpus} CPUs granted by {granted.source}, shared by {ranks} ranks")
    processes = ranks * max(sweep_jobs, 1)
    if processes == 1:
        return ThreadShare(cores, f"all {cores} cores")
    parts = [f"{ranks} ranks" if ranks > 1 else "", f"{sweep_jobs} parallel sweep runs" if sweep_jobs > 1 else ""]
    return ThreadShare(max(cores // processes, 1), f"{cores} cores shared by " + " x ".join(p for p in parts if p))


def apply_thread_share(share: ThreadShare) -> None:
    """Set torch's intra-op threads (imported here: callers decide before heavy imports)."""
    import torch

    torch.set_num_threads(share.threads)
