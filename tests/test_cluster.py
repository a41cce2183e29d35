"""Sweeps beyond one machine (fast_td3/training/cluster.py, conf/hydra/launcher/): the CPUs a
launcher granted, a preempted job that checkpoints, is requeued and continues in its own folder,
the rendezvous of a multi-node torchrun from SLURM's variables, and the one-line refusals.

The sweeps run the real engines in local mode: submitit's local executor (the same pickled job,
signal handler and requeue as on SLURM) and a local Ray runtime with 2 CPUs. Tiny InvertedPendulum
runs; about 40 s on 2 cores (the Ray sweep, in the slow tier, about 30 s more)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fast_td3.training import cluster
from fast_td3.training.cluster import Grant, SlurmJob, expand_hostlist, granted_cpus, launcher_problem
from fast_td3.training.checkpoint import find_checkpoint
from fast_td3.training.metrics_log import read_metrics
from fast_td3.training.threads import thread_share

ROOT = Path(__file__).resolve().parents[1]
TINY = ["sizing=cpu", "env.num_envs=4", "algo.batch_size=64", "algo.buffer_size=500", "algo.learning_starts=3",
        "algo.precision=fp32", "eval_episodes=2", "env.max_episode_steps=20", "logger.console=false"]
SUBMITIT_LOCAL = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"


def has_module(name: str) -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


needs_submitit = pytest.mark.skipif(not has_module("hydra_plugins.hydra_submitit_launcher"),
                                    reason='hydra-submitit-launcher is not installed (pip install -e ".[cluster]")')
needs_ray = pytest.mark.skipif(not has_module("hydra_plugins.hydra_ray_launcher"),
                               reason='hydra-ray-launcher is not installed (pip install -e ".[cluster]")')


def trainer_env(**extra: str) -> dict[str, str]:
    """This environment without a fixed thread count (the jobs read their grants) or SLURM/Ray
    variables of an outer job."""
    env = {k: v for k, v in os.environ.items()
           if k != "FAST_TD3_THREADS" and not k.startswith(("SLURM_", "RAY_"))}
    env.update(extra)
    return env


def sweep(tmp_path: Path, *args: str, timeout: float = 300, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fast_td3.training.train", "-m", *TINY, *args,
                             f"out_dir={tmp_path}"], cwd=ROOT, env=trainer_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen)


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        raise AssertionError(f"the sweep did not finish in {timeout} s:\n{output[-4000:]}")
    assert process.returncode == 0, output[-4000:]
    return output


def run_folders(out_dir: Path) -> list[Path]:
    (sweep_dir,) = (out_dir / "sweeps").iterdir()
    return sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def training_steps(run: Path) -> list[int]:
    if not (run / "metrics.jsonl").is_file():
        return []
    return [r["step"] for r in read_metrics(run) if "loss/critic" in r]


def latest_checkpoint_step(run: Path) -> int:
    return int(find_checkpoint(run).stem.split("_")[1])


# ================================================================ the CPUs a job was granted
def test_the_thread_share_reads_slurms_grant_not_the_nodes_cores():
    slurm = {"SLURM_JOB_ID": "77", "SLURM_CPUS_PER_TASK": "6"}
    grant = granted_cpus(None, slurm)
    assert grant == Grant(6, "SLURM's --cpus-per-task")
    share = thread_share(128, slurm, granted=grant)  # a 128-core node: the job still takes its 6
    assert share.threads == 6 and "SLURM" in str(share)
    # torchrun's ranks on the node share the task's CPUs; a sweep's other jobs have grants of their own
    assert thread_share(128, {**slurm, "LOCAL_WORLD_SIZE": "2"}, sweep_jobs=4, granted=grant).threads == 3
    # without --cpus-per-task SLURM sets no count: the cores this process may run on are shared as before
    assert granted_cpus(None, {"SLURM_JOB_ID": "77"}) is None
    with pytest.raises(ValueError, match="SLURM_CPUS_PER_TASK"):
        granted_cpus(None, {"SLURM_JOB_ID": "77", "SLURM_CPUS_PER_TASK": "0"})


def test_the_thread_share_reads_rays_grant():
    ray_worker = {"RAY_RAYLET_PID": "4242", "OMP_NUM_THREADS": "3"}  # Ray sets OMP_NUM_THREADS to num_cpus
    assert granted_cpus(None, ray_worker, ray_assigned=lambda: None) == Grant(3, "Ray's num_cpus")
    # Ray's runtime context, when at hand, is what counts (fractions of a CPU get one thread)
    assert granted_cpus(None, ray_worker, ray_assigned=lambda: 5.0).cpus == 5
    assert granted_cpus(None, ray_worker, ray_assigned=lambda: 0.5).cpus == 1
    assert thread_share(64, ray_worker, granted=granted_cpus(None, ray_worker, ray_assigned=lambda: 4.0)).threads == 4
    # OMP_NUM_THREADS alone (torchrun, joblib set it too) is no grant
    assert granted_cpus(None, {"OMP_NUM_THREADS": "1"}, ray_assigned=lambda: 8.0) is None


def test_a_submitit_local_job_takes_the_launchers_cpus_per_task_and_the_explicit_count_wins():
    hydra_cfg = OmegaConf.create({"launcher": {"_target_": SUBMITIT_LOCAL, "cpus_per_task": 2}})
    assert granted_cpus(hydra_cfg, {}) == Grant(2, "hydra.launcher.cpus_per_task of submitit_local")
    assert granted_cpus(OmegaConf.create({"launcher": {"_target_": SUBMITIT_LOCAL, "cpus_per_task": None}}), {}) is None
    assert thread_share(16, {"FAST_TD3_THREADS": "5"}, granted=Grant(2, "x")).threads == 5
    assert thread_share(16, {}, sweep_jobs=4).threads == 4  # no grant: the cores over the parallel runs


# ================================================================ preemption, in this process
def test_sigusr2_asks_for_a_stop_and_then_reaches_the_schedulers_handler(capsys):
    """During training SIGUSR2 only sets the stop flag (the runner checkpoints after the step);
    afterwards the handler found before (submitit's) is back, and the stop hands it the signal.
    A SIGTERM stop is not handed on (scancel means stop), nor is SIGUSR2 without a handler."""
    from fast_td3.training.guards import stop_signals

    received = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: received.append(signum))
    try:
        with stop_signals() as stop_request:
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.01)  # Python runs the handler between bytecodes
        assert stop_request.signum == signal.SIGUSR2 and received == []
        cluster.hand_back_preemption(signal.SIGTERM)
        assert received == []
        cluster.hand_back_preemption(signal.SIGUSR2)
        assert received == [signal.SIGUSR2] and "requeues" in capsys.readouterr().err
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        cluster.hand_back_preemption(signal.SIGUSR2)  # a plain run: the caller exits 128 + 12
    finally:
        signal.signal(signal.SIGUSR2, previous)


# ================================================================ torchrun across SLURM nodes
@pytest.mark.parametrize("nodelist, hosts", [
    ("node[01-03,7]", ["node01", "node02", "node03", "node7"]),
    ("gpu5", ["gpu5"]),
    ("a[1-2],b[009-011],c", ["a1", "a2", "b009", "b010", "b011", "c"]),
    ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
])
def test_node_lists_expand_as_scontrol_show_hostnames(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


@pytest.mark.parametrize("nodelist", ["node[01-03", "node[3-1]", "node[a-b]", "node]1["])
def test_a_malformed_node_list_is_refused(nodelist):
    with pytest.raises(ValueError, match="SLURM node list"):
        expand_hostlist(nodelist)


SLURM_NODE_2 = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_JOB_NUM_NODES": "3",
                "SLURM_NODEID": "2", "SLURM_PROCID": "2", "SLURM_NTASKS": "3", "SLURM_LOCALID": "0"}


def test_rank_world_size_and_rendezvous_come_from_slurms_variables():
    job = SlurmJob.from_env(SLURM_NODE_2)
    assert job.nodes == ["gpu07", "gpu08", "gpu09"] and job.node_rank == 2
    assert job.rendezvous() == "gpu07:29500"  # the first node of the list hosts the rendezvous
    assert job.world_size(nproc_per_node=8) == 24
    assert [job.global_rank(8, local) for local in (0, 7)] == [16, 23]
    assert job.torchrun_flags(8, port=29400) == [
        "--nnodes=3", "--nproc-per-node=8", "--node-rank=2", "--rdzv-id=4711", "--rdzv-backend=static",
        "--rdzv-endpoint=gpu07:29400"]
    with pytest.raises(RuntimeError, match="one torchrun per node"):  # srun started a task per GPU
        SlurmJob.from_env({**SLURM_NODE_2, "SLURM_NTASKS": "24"}).torchrun_flags(8)
    with pytest.raises(RuntimeError, match="names 3 nodes"):
        SlurmJob.from_env({**SLURM_NODE_2, "SLURM_JOB_NUM_NODES": "2"})


def test_the_torchrun_flags_command_reads_the_environment_srun_gives_each_task():
    command = [sys.executable, "-m", "fast_td3.training.cluster", "torchrun-flags", "--nproc-per-node", "4"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**trainer_env(), **SLURM_NODE_2},
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--nnodes=3", "--nproc-per-node=4", "--node-rank=2", "--rdzv-id=4711",
                                     "--rdzv-backend=static", "--rdzv-endpoint=gpu07:29500"]
    outside = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=trainer_env(), timeout=60)
    assert outside.returncode == 2 and "not inside a SLURM job" in outside.stderr


# ================================================================ bad input
def test_a_launcher_without_its_extra_and_slurm_without_slurm_are_named_with_the_fix():
    missing = launcher_problem(["-m", "hydra/launcher=ray", "seed=1,2"], find_module=lambda name: None)
    assert missing == 'hydra/launcher=ray needs the hydra-ray-launcher plugin: pip install -e ".[cluster]"'
    assert 'pip install -e ".[sweep]"' in launcher_problem(["hydra/launcher=joblib"], find_module=lambda name: None)
    no_slurm = launcher_problem(["hydra/launcher=submitit_slurm"], find_module=lambda name: True,
                                which=lambda cmd: None)
    assert "no SLURM" in no_slurm and "hydra/launcher=submitit_local" in no_slurm
    on_slurm = launcher_problem(["hydra/launcher=submitit_slurm"], find_module=lambda name: True,
                                which=lambda cmd: "/usr/bin/sbatch")
    assert on_slurm is None
    assert launcher_problem(["hydra/launcher=basic", "seed=1"], find_module=lambda name: None) is None


@pytest.mark.parametrize("override, says", [
    ("hydra.launcher.timeout_min=-1", "hydra.launcher.timeout_min=-1: give a whole number, 1 or more"),
    ("hydra.launcher.cpus_per_task=0.5", "hydra.launcher.cpus_per_task=0.5: give a whole number, 1 or more"),
    ("hydra.launcher.mem_gb=nan", "hydra.launcher.mem_gb=nan: give a number above 0"),
    ("hydra.launcher.gpus_per_node=-2", "hydra.launcher.gpus_per_node=-2: give a whole number, 0 or more"),
])
def test_a_launcher_count_out_of_range_is_one_line_before_any_job(override, says):
    """`timeout_min=-1` reached submitit: 29 lines of UncompletedJobError and a folder named `%j`."""
    args = ["-m", "hydra/launcher=submitit_local", override, "seed=1,2"]
    assert launcher_problem(args, find_module=lambda name: True) == says
    assert launcher_problem(["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=30",
                             "hydra.launcher.mem_gb=null"], find_module=lambda name: True) is None


BLOCK_RAY_PLUGIN = """
import sys
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("hydra_plugins.hydra_ray_launcher"):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, NotInstalled())
from fast_td3.training.train import cli
sys.argv = ["fast-td3-train"] + sys.argv[1:]
cli()
"""


@pytest.mark.parametrize("case", ["extra missing", "no slurm"])
def test_the_command_line_refuses_in_one_line_before_hydra(tmp_path, case):
    if case == "extra missing":
        command = [sys.executable, "-c", BLOCK_RAY_PLUGIN, "-m", "hydra/launcher=ray", *TINY, "seed=1,2"]
        env = trainer_env()
    else:
        command = [sys.executable, "-m", "fast_td3.training.train", "-m", "hydra/launcher=submitit_slurm", *TINY,
                   "seed=1,2"]
        env = trainer_env(PATH=os.path.dirname(sys.executable))  # python, and no sbatch
    result = subprocess.run([*command, f"out_dir={tmp_path}"], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    if case == "extra missing":
        assert lines[0] == ('fast-td3-train: error: hydra/launcher=ray needs the hydra-ray-launcher plugin: '
                            'pip install -e ".[cluster]"')
    else:
        assert "no SLURM" in lines[0] and "hydra/launcher=submitit_local" in lines[0]
    assert not any(tmp_path.iterdir())  # refused before Hydra made a sweep folder


# ================================================================ submitit, locally
@needs_submitit
def test_a_two_job_sweep_through_submitit_local_writes_two_runs_each_on_its_grant(tmp_path):
    output = finish(sweep(tmp_path, "hydra/launcher=submitit_local", "total_steps=60", "logger.log_interval=20",
                          "seed=1,2"))
    runs = run_folders(tmp_path)
    assert [r.name for r in runs] == ["0_InvertedPendulum-v5_seed1", "1_InvertedPendulum-v5_seed2"], output[-3000:]
    for run in runs:
        assert training_steps(run) == [20, 40, 60]
        assert latest_checkpoint_step(run) == 60
        # cpus_per_task=1 of the preset, not the machine's cores (the share of a plain sweep)
        assert OmegaConf.load(run / "config.yaml").resolved.torch_threads == 1
    assert (runs[0].parent / ".submitit").is_dir()  # submitted as submitit jobs


def job_processes(folder: Path) -> list[int]:
    """Pids of submitit's job processes (`python -m submitit.core._submit <folder>/...`)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in command and any(str(folder).encode() in part for part in command):
            pids.append(int(proc.name))
    return pids


@needs_submitit
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the job process through /proc")
def test_a_preempted_submitit_job_checkpoints_is_requeued_and_finishes_with_every_metrics_row_once(tmp_path):
    total, interval = 1000, 100
    process = sweep(tmp_path, "hydra/launcher=submitit_local", f"total_steps={total}",
                    f"logger.log_interval={interval}", "eval_interval=0", "save_interval=0", "seed=1")
    deadline = time.monotonic() + 240
    while True:  # the job is training: two metrics rows, and the job's process is there
        assert process.poll() is None and time.monotonic() < deadline, "the job never started training"
        runs = run_folders(tmp_path) if (tmp_path / "sweeps").is_dir() else []
        pids = job_processes(tmp_path)
        if runs and len(training_steps(runs[0])) >= 2 and pids:
            break
        time.sleep(0.2)
    (pid,) = pids
    os.kill(pid, signal.SIGUSR2)  # what SLURM sends signal_delay_s before a time limit
    output = finish(process)
    (run,) = runs
    log = "".join(p.read_text() for p in (run.parent / ".submitit").rglob("*_log.*"))
    assert "Stopped at global step" in log and "Requeued job" in log, log[-4000:]
    stopped_at = int(log.split("Stopped at global step ")[1].split(";")[0])
    assert 2 * interval <= stopped_at < total
    assert f"Resuming {run} from " in log and f"(global step {stopped_at})" in log
    # no row lost or doubled: every training row once, then the one final evaluation
    assert training_steps(run) == list(range(interval, total + 1, interval)), output[-2000:]
    assert [r["step"] for r in read_metrics(run) if "eval/return_mean" in r] == [total]
    assert latest_checkpoint_step(run) == total
    assert list((run / ".hydra").glob("resumed_*/config.yaml"))  # it continued as resume=<its folder>


# ================================================================ Ray, locally
@needs_ray
@pytest.mark.filterwarnings("ignore:(?s).*is validated against ConfigStore schema")
def test_the_ray_preset_composes_for_a_local_or_a_running_cluster():
    from hydra import compose, initialize_config_dir
    from hydra.utils import get_class

    from fast_td3.training.config import register_configs

    register_configs()  # the schema train.yaml starts from
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2"],
                      return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert get_class(launcher._target_).__name__ == "RayLauncher"
    init = OmegaConf.to_container(launcher.ray.init)
    # the plugin's own setdefault of a 75 MB object store, refused by ray.init(address=...), never applies
    assert "object_store_memory" in init and init["object_store_memory"] is None
    assert init["address"] is None and init["num_cpus"] == 2
    remote = OmegaConf.to_container(launcher.ray.remote)
    assert remote["num_cpus"] >= 1 and remote["max_retries"] >= 1
    for name in ("submitit_slurm", "submitit_local"):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
        assert cfg.hydra.launcher.submitit_folder.endswith(".submitit/%j") and cfg.hydra.launcher.cpus_per_task >= 1


@needs_ray
@pytest.mark.slow
def test_a_two_job_sweep_through_a_local_ray_runs_both_jobs_each_on_its_grant(tmp_path):
    started = time.monotonic()
    output = finish(sweep(tmp_path, "hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2",
                          "+hydra.launcher.ray.init.include_dashboard=false", "hydra.launcher.ray.remote.num_cpus=1",
                          "total_steps=60", "logger.log_interval=20", "seed=1,2"), timeout=400)
    runs = run_folders(tmp_path)
    assert [r.name for r in runs] == ["0_InvertedPendulum-v5_seed1", "1_InvertedPendulum-v5_seed2"], output[-3000:]
    for run in runs:
        assert training_steps(run) == [20, 40, 60]
        assert latest_checkpoint_step(run) == 60
        assert OmegaConf.load(run / "config.yaml").resolved.torch_threads == 1  # Ray's num_cpus, not 2 cores
    print(f"Ray sweep: {time.monotonic() - started:.0f} s")


def test_a_job_of_another_launcher_meeting_checkpoints_does_not_continue(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_10.pt").write_bytes(b"x")
    (tmp_path / "overrides.yaml").write_text("- seed=1\n")
    ray = OmegaConf.create({"launcher": {"_target_": "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"}})
    joblib = OmegaConf.create(
        {"launcher": {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}})
    assert cluster.continues_run(ray, tmp_path, ["seed=1"])
    assert not cluster.continues_run(ray, tmp_path, ["seed=2"])  # another job's overrides: not its folder
    assert not cluster.continues_run(joblib, tmp_path, ["seed=1"])
    assert not cluster.continues_run(ray, tmp_path / "elsewhere", ["seed=1"])


def ray_task_processes(folder: Path) -> list[int]:
    """Pids of Ray workers running a sweep job (Ray names the process after the task)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().startswith(b"ray::_run_job"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


@needs_ray
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the Ray worker through /proc")
def test_a_ray_task_lost_with_its_worker_is_retried_and_resumes_from_its_run_folder(tmp_path):
    """SIGKILL to the worker (a lost node): Ray runs the task again, into the same folder, which
    continues from its newest checkpoint; the rows logged after that checkpoint are logged once."""
    total, interval = 1000, 50
    process = sweep(tmp_path, "hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2",
                    "+hydra.launcher.ray.init.include_dashboard=false", "hydra.launcher.ray.remote.num_cpus=1",
                    f"total_steps={total}", f"logger.log_interval={interval}", "eval_interval=0",
                    "save_interval=200", "seed=1")
    deadline = time.monotonic() + 300
    while True:  # past the first checkpoint, with rows logged after it
        assert process.poll() is None and time.monotonic() < deadline, "the job never got past its first checkpoint"
        runs = run_folders(tmp_path) if (tmp_path / "sweeps").is_dir() else []
        if runs and max(training_steps(runs[0]), default=0) >= 300 and ray_task_processes(tmp_path):
            break
        time.sleep(0.1)
    (pid,) = ray_task_processes(tmp_path)
    os.kill(pid, signal.SIGKILL)
    output = finish(process, timeout=400)
    (run,) = runs
    assert f"Resuming {run} from " in output, output[-4000:]
    resumed_at = int(output.split(f"Resuming {run} from ")[1].split("(global step ")[1].split(")")[0])
    assert resumed_at >= 200 and resumed_at % 200 == 0
    assert training_steps(run) == list(range(interval, total + 1, interval))
    assert latest_checkpoint_step(run) == total


@pytest.mark.slow
def test_torchrun_takes_the_flags_read_from_slurms_variables(tmp_path):
    """What each node of the sbatch example runs, on one "node" (this machine) with 2 CPU ranks:
    torchrun accepts the flags, the ranks meet at the endpoint from the node list, and the run
    folder is named after the SLURM job id (kept by a requeued job)."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    slurm = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "1",
             "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}
    flags = SlurmJob.from_env(slurm).torchrun_flags(nproc_per_node=2, port=port)
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *flags, "-m", "fast_td3.training.train",
                            *TINY, "total_steps=30", "logger.log_interval=10"],  # into ./runs (out_dir's default)
                           cwd=tmp_path, env=trainer_env(OMP_NUM_THREADS="1", FAST_TD3_THREADS="1", **slurm), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = job.communicate(timeout=400)
    finally:
        if job.poll() is None:  # its ranks run in sessions of their own: SIGTERM lets torchrun stop them
            job.terminate()
            job.wait(timeout=30)
    assert job.returncode == 0, output[-4000:]
    (run,) = (tmp_path / "runs" / "InvertedPendulum-v5").iterdir()
    assert run.name == "torchrun-4711_1"
    assert training_steps(run) == [10, 20, 30] and latest_checkpoint_step(run) == 30
    assert "on each of 2 ranks" in output
