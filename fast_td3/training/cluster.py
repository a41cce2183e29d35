"""Runs on clusters, through engines labs already run: Hydra's submitit launcher (SLURM, or
the same path on this machine) and its Ray launcher (the `cluster` extra), and torchrun
across SLURM nodes. Nothing here schedules anything; it reads what those engines decided.

- **What a job was granted** (`granted_cpus`): SLURM's `--cpus-per-task`, Ray's `num_cpus`, or
  `hydra.launcher.cpus_per_task` of a `submitit_local` sweep (whose jobs all run at once);
  training/threads.py turns it into the job's torch threads.
- **A job that starts again** (`continues_run`): a requeued SLURM job or a retried Ray task runs
  the same sweep job again, into the same folder (the folder is the identity: same sweep, same
  job, same folder). It continues there as `resume=<its run folder>` would.
- **Preemption** (`hand_back_preemption`): SIGUSR2 (submitit's `--signal`) stops training after
  the current global step with a checkpoint (guards.py); then submitit's own handler requeues
  the job and exits with the code submitit expects.
- **torchrun across SLURM nodes** (`SlurmJob`, `torchrun-flags` below): the node rank, world size
  and rendezvous endpoint from SLURM's variables and node list.

    python -m fast_td3.training.cluster torchrun-flags --nproc-per-node 8   # inside `srun`
    python -m fast_td3.training.cluster hostnames 'gpu[01-03,7]'            # as scontrol show hostnames

This module imports neither torch nor a launcher, so `fast-td3-train` checks a named launcher
before anything heavy loads.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import shutil
import signal
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from omegaconf import OmegaConf
from fast_td3.command_line import ArgumentParser, number, read_value, whole

LAUNCHERS = {
    # hydra/launcher=<name>: (the Hydra plugin that provides it, the extra that installs it)
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "cluster"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "cluster"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "cluster"),
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "sweep"),
}
SUBMITIT_LOCAL = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
CLUSTER_LAUNCHERS = ("hydra_plugins.hydra_submitit_launcher.", "hydra_plugins.hydra_ray_launcher.")
"""Launchers whose jobs may start again in the same folder (a requeue, a retry)."""
PREEMPTION_SIGNAL = getattr(signal, "SIGUSR2", None)
"""The signal submitit asks SLURM to send before a time limit (`--signal=USR2@<signal_delay_s>`)."""
DEFAULT_RDZV_PORT = 29500

# conf/hydra/launcher/{submitit_slurm,submitit_local,ray}.yaml replace the plugins' presets of the
# same names; Hydra checks them against the plugins' schemas (a mistyped key is refused) and warns
# on every composition that it may stop doing so. Without the check they still work as written.
warnings.filterwarnings("ignore", message=r"(?s).*is validated against ConfigStore schema with the same name")


# ================================================================ naming a launcher
LAUNCHER_COUNTS = {"timeout_min": whole(1), "cpus_per_task": whole(1), "gpus_per_node": whole(0),
                   "tasks_per_node": whole(1), "nodes": whole(1), "mem_gb": number(0), "num_cpus": whole(1),
                   "num_gpus": whole(0)}
"""The launchers' counts a sweep sets on the command line (submitit's and Ray's), by kind."""

def launcher_problem(args: list[str], find_module: Callable[[str], object] = importlib.util.find_spec,
                     which: Callable[[str], str | None] = shutil.which) -> str | None:
    """One line for `hydra/launcher=<name>` when its plugin is not installed (the install command),
    when `submitit_slurm` is named on a machine without SLURM, or for a launcher count out of range
    (`hydra.launcher.timeout_min=-1` ended in submitit's 29-line error and a folder named `%j`);
    None otherwise."""
    for arg in args:
        key, sep, value = arg.lstrip("+").partition("=")
        kind = LAUNCHER_COUNTS.get(key.removeprefix("hydra.launcher."))
        if key.startswith("hydra.launcher.") and sep and kind is not None and value != "null":
            try:
                read_value(key, value, kind)
            except ValueError as error:
                return str(error)
    named = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("hydra/launcher=")]
    for name in named:
        if name not in LAUNCHERS:
            continue  # Hydra lists the options it has
        module, extra = LAUNCHERS[name]
        try:
            found = find_module(module) is not None
        except ModuleNotFoundError:  # no hydra_plugins package at all
            found = False
        if not found:
            return (f"hydra/launcher={name} needs the {module.split('.')[-1].replace('_', '-')} plugin: "
                    f'pip install -e ".[{extra}]"')
        if name == "submitit_slurm" and which("sbatch") is None:
            return ("hydra/launcher=submitit_slurm submits jobs with sbatch, and this machine has no SLURM "
                    "(sbatch is not on PATH); hydra/launcher=submitit_local runs the same sweep on this machine")
    return None


# ================================================================ what a job was granted
@dataclass(frozen=True)
class Grant:
    """The CPUs a launcher or scheduler granted this job, and who granted them."""

    cpus: int
    source: str


def _ray_assigned_cpus() -> float | None:
    """The `num_cpus` Ray assigned to the task running in this process (None outside Ray)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_assigned_resources().get("CPU")


def granted_cpus(hydra_cfg=None, environ: Mapping[str, str] | None = None,
                 ray_assigned: Callable[[], float | None] = _ray_assigned_cpus) -> Grant | None:
    """The CPUs this job was granted, else None (then the machine's cores are shared as before).

    - a `submitit_local` sweep with `hydra.launcher.cpus_per_task`: that many (submitit's local
      executor runs every job of the sweep at once and ignores the value; we honour it);
    - under SLURM with `--cpus-per-task` (`$SLURM_CPUS_PER_TASK`): that many;
    - in a Ray task (`$RAY_RAYLET_PID`): its `num_cpus` (Ray's runtime context; Ray also sets
      `$OMP_NUM_THREADS` to it, read when the context is not at hand).
    """
    environ = os.environ if environ is None else environ
    launcher = OmegaConf.select(hydra_cfg, "launcher", default=None) if hydra_cfg is not None else None
    if launcher is not None and launcher.get("_target_") == SUBMITIT_LOCAL and launcher.get("cpus_per_task"):
        return Grant(int(launcher.cpus_per_task), "hydra.launcher.cpus_per_task of submitit_local")
    if environ.get("SLURM_JOB_ID") and environ.get("SLURM_CPUS_PER_TASK"):
        return Grant(_positive(environ["SLURM_CPUS_PER_TASK"], "SLURM_CPUS_PER_TASK"), "SLURM's --cpus-per-task")
    if environ.get("RAY_RAYLET_PID"):
        cpus = ray_assigned()
        if cpus is None:
            cpus = environ.get("OMP_NUM_THREADS")
        if cpus is not None:
            return Grant(max(int(float(cpus)), 1), "Ray's num_cpus")
    return None


def _positive(value: str, name: str) -> int:
    try:
        number = int(value.split("(")[0])  # SLURM writes e.g. "4" (some variables "4(x2)")
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"${name} is {value!r}, not a positive count of CPUs")
    return number


# ================================================================ a job that starts again
def continues_run(hydra_cfg, run_dir: Path, overrides: list[str]) -> bool:
    """Whether this job is a cluster sweep job starting again in its own folder (a requeued
    SLURM job, a retried Ray task): a submitit or Ray launcher, a folder that already holds
    checkpoints, and the same overrides as the ones that made that run (overrides.yaml). Such
    a job continues as `resume=<run folder>`; any other job meeting checkpoints is refused."""
    target = OmegaConf.select(hydra_cfg, "launcher._target_", default="") or ""
    if not str(target).startswith(CLUSTER_LAUNCHERS):
        return False
    from fast_td3.training.checkpoint import has_checkpoints

    recorded = Path(run_dir) / "overrides.yaml"
    if not has_checkpoints(run_dir) or not recorded.is_file():
        return False
    return [str(o) for o in OmegaConf.load(recorded)] == [str(o) for o in overrides]


def hand_back_preemption(signum: int) -> None:
    """After a run stopped on `signum` with a checkpoint: when that is the preemption signal and
    a job scheduler's handler waits for it (submitit's: it requeues the job, then exits with the
    code its executor reads as "requeued", 144 locally), hand the signal on. Returns when no
    handler of another program's is there (a plain run: the caller exits with 128 + signum)."""
    if PREEMPTION_SIGNAL is None or signum != PREEMPTION_SIGNAL:
        return
    handler = signal.getsignal(signum)
    if callable(handler):  # not SIG_DFL / SIG_IGN
        print("Preempted: the checkpoint is saved; submitit requeues this job, which continues from it.",
              file=sys.stderr, flush=True)
        handler(signum, None)


# ================================================================ torchrun across SLURM nodes
def expand_hostlist(hostlist: str) -> list[str]:
    """SLURM's compressed node list in full, as `scontrol show hostnames` prints it:
    `gpu[01-03,7],cpu5` -> gpu01 gpu02 gpu03 gpu7 cpu5 (zero padding kept; several bracket
    groups in one name, `r[1-2]n[1-2]`, expand to every combination)."""
    hosts: list[str] = []
    for name in _split_top_level(hostlist.strip()):
        parts = re.split(r"(\[[^\]]*\])", name)
        choices = [_expand_range(p[1:-1], hostlist) if p.startswith("[") else [p] for p in parts if p]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    return hosts


def _split_top_level(text: str) -> list[str]:
    """`a[1,2],b` -> [`a[1,2]`, `b`]: commas outside brackets separate names."""
    names, depth, current = [], 0, ""
    for char in text:
        depth += (char == "[") - (char == "]")
        if depth < 0 or depth > 1:
            raise ValueError(f"malformed SLURM node list {text!r}")
        if char == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"malformed SLURM node list {text!r}")
    return [n for n in names + [current] if n]


def _expand_range(spec: str, whole: str) -> list[str]:
    out = []
    for item in spec.split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise ValueError(f"malformed range [{spec}] in SLURM node list {whole!r}")
        width = len(low)
        out.extend(str(n).zfill(width) for n in range(int(low), int(high or low) + 1))
    return out


@dataclass(frozen=True)
class SlurmJob:
    """This task's place in a SLURM job (read from SLURM's variables)."""

    job_id: str
    nodes: list[str]
    node_rank: int
    """This node's index in `nodes` ($SLURM_NODEID)."""
    task_rank: int
    """This task's global index ($SLURM_PROCID)."""
    num_tasks: int
    local_task: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SlurmJob:
        environ = os.environ if environ is None else environ
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
        if not environ.get("SLURM_JOB_ID") or not nodelist:
            raise RuntimeError("not inside a SLURM job ($SLURM_JOB_ID and $SLURM_JOB_NODELIST are not set)")
        nodes = expand_hostlist(nodelist)
        expected = int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or len(nodes))
        if expected != len(nodes):
            raise RuntimeError(f"$SLURM_JOB_NODELIST names {len(nodes)} nodes, $SLURM_JOB_NUM_NODES says {expected}")
        return cls(job_id=environ["SLURM_JOB_ID"], nodes=nodes, node_rank=int(environ.get("SLURM_NODEID", 0)),
                   task_rank=int(environ.get("SLURM_PROCID", 0)), num_tasks=int(environ.get("SLURM_NTASKS", 1)),
                   local_task=int(environ.get("SLURM_LOCALID", 0)))

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def rendezvous(self, port: int = DEFAULT_RDZV_PORT) -> str:
        """The rendezvous endpoint: the job's first node, where rank 0's agent hosts the store."""
        return f"{self.nodes[0]}:{port}"

    def world_size(self, nproc_per_node: int) -> int:
        """Training processes in the job: one torchrun per node, `nproc_per_node` ranks each."""
        return self.num_nodes * nproc_per_node

    def global_rank(self, nproc_per_node: int, local_rank: int) -> int:
        """The rank torchrun gives local rank `local_rank` on this node: SLURM's node order, so
        rank 0 (which writes the run folder) is on the first node."""
        return self.node_rank * nproc_per_node + local_rank

    def torchrun_flags(self, nproc_per_node: int, port: int = DEFAULT_RDZV_PORT) -> list[str]:
        """torchrun's flags for this node: a static rendezvous on the first node with SLURM's node
        rank (ranks follow SLURM's node order); the SLURM job id, which a requeued job keeps,
        is torchrun's run id."""
        if self.num_tasks != self.num_nodes:
            raise RuntimeError(f"run one torchrun per node (srun --ntasks-per-node=1): this job has "
                               f"{self.num_tasks} tasks on {self.num_nodes} nodes")
        return [f"--nnodes={self.num_nodes}", f"--nproc-per-node={nproc_per_node}", f"--node-rank={self.node_rank}",
                f"--rdzv-id={self.job_id}", "--rdzv-backend=static", f"--rdzv-endpoint={self.rendezvous(port)}"]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m fast_td3.training.cluster", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    flags = commands.add_parser("torchrun-flags", help="torchrun's multi-node flags for this SLURM task")
    flags.add_argument("--nproc-per-node", type=whole(1, 1024), required=True, help="training processes per node (GPUs)")
    flags.add_argument("--port", type=whole(1, 65535), default=int(os.environ.get("MASTER_PORT", DEFAULT_RDZV_PORT)))
    hosts = commands.add_parser("hostnames", help="a compressed SLURM node list in full, one name a line")
    hosts.add_argument("nodelist", nargs="?", default=os.environ.get("SLURM_JOB_NODELIST", ""))
    args = parser.parse_args(argv)
    try:
        if args.command == "hostnames":
            print("\n".join(expand_hostlist(args.nodelist)))
        else:
            print(" ".join(SlurmJob.from_env().torchrun_flags(args.nproc_per_node, args.port)))
    except (RuntimeError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
