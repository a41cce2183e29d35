"""Sharing the cores with other processes: the thread rule for given core counts and loads, the
monitor that applies it (fed samples, no timing), the run that uses it, and the update's numbers
unchanged by the thread count."""

from __future__ import annotations

import pytest
import torch

from envs.protocol import EnvSpec
from fast_td3.learner.algorithms import make_algorithm
from fast_td3.training import contention
from fast_td3.training.contention import CoreMonitor, CpuSample, busy_seconds, others_cores, threads_for
from helpers import random_batch, tiny_sac_config

PROC_STAT = """cpu  900 90 300 5000 10 5 5 70 0 0
cpu0 100 0 100 2000 5 0 0 30 0 0
cpu1 200 10 50 1000 5 3 2 40 0 0
cpu2 600 80 150 2000 0 2 3 0 0 0
intr 12345 0 0
ctxt 999
"""


def test_busy_seconds_counts_the_run_cores_busy_fields_only():
    ticks = contention.CLOCK_TICKS
    assert busy_seconds(PROC_STAT, {0, 1}) == pytest.approx((200 + 265) / ticks)  # idle, iowait, steal are not busy
    assert busy_seconds(PROC_STAT, {2}) == pytest.approx(835 / ticks)  # the aggregate "cpu" line is never summed
    assert busy_seconds(PROC_STAT, set()) == 0


def test_others_cores_is_the_machine_s_busy_time_less_the_run_s_own():
    before, after = CpuSample(10.0, 100.0, 40.0), CpuSample(12.0, 103.0, 41.0)
    assert others_cores(before, after) == pytest.approx(1.0)  # 3 busy core-seconds, 1 of them ours, over 2 s
    assert others_cores(before, CpuSample(12.0, 100.5, 41.0)) == 0.0  # never negative (tick rounding)


@pytest.mark.parametrize("cores,others,current,ceiling,expected", [
    (2, 0.0, 2, 2, 2),    # alone: every core
    (2, 0.01, 2, 2, 2),   # an idle machine's background
    (2, 1.0, 2, 2, 1),    # a one-core spinner: one thread
    (2, 0.4, 2, 2, 1),    # a process busy 40 % of the time already counts as a core taken
    (2, 0.25, 2, 2, 2),   # under the threshold: kept
    (2, 0.25, 1, 2, 1),   # ...but not given back until the others clearly left
    (2, 0.1, 1, 2, 2),
    (2, 2.0, 2, 2, 1),    # never fewer than one
    (4, 1.2, 4, 4, 3),
    (4, 1.4, 4, 4, 2),
    (4, 2.7, 4, 4, 1),
    (4, 0.0, 1, 2, 2),    # a sweep's share (2 of 4 cores) is the ceiling
    (2, 0.0, 1, 1, 1),    # a share of one stays one
])
def test_threads_for_core_counts_and_loads(cores, others, current, ceiling, expected):
    assert threads_for(cores, others, current, ceiling) == expected


class FakeMachine:
    """Samples and a clock under the test's control: `others` cores busy besides the run."""

    def __init__(self):
        self.now, self.busy, self.own, self.others = 0.0, 0.0, 0.0, 0.0

    def advance(self, seconds: float, own_cores: float = 1.5) -> None:
        self.now += seconds
        self.own += own_cores * seconds
        self.busy += (own_cores + self.others) * seconds

    def read(self) -> CpuSample:
        return CpuSample(self.now, self.busy, self.own)


def monitor(machine, threads=2, adapt=True):
    lines, set_to = [], []
    watch = CoreMonitor(lines.append, set_to.append, threads, adapt=adapt, cores=2, period_s=2.0,
                        read=machine.read, clock=lambda: machine.now)
    return watch, lines, set_to


def run_steps(watch, machine, steps, seconds_per_step, start=0):
    for step in range(start + 1, start + steps + 1):
        machine.advance(seconds_per_step)
        watch.tend(step)
    return start + steps


def test_the_monitor_drops_a_thread_for_a_busy_core_and_returns_it_after_two_quiet_periods():
    machine = FakeMachine()
    watch, lines, set_to = monitor(machine)
    step = run_steps(watch, machine, 50, 0.1)
    assert set_to == [] and watch.threads == 2
    machine.others = 1.0
    step = run_steps(watch, machine, 30, 0.1, step)
    assert set_to == [1] and watch.threads == 1 and lines[-1].endswith("torch threads 2 -> 1")
    machine.others = 0.0
    step = run_steps(watch, machine, 21, 0.1, step)  # one quiet period: not yet
    assert set_to == [1]
    run_steps(watch, machine, 60, 0.1, step)
    assert set_to == [1, 2] and watch.metrics()["perf/torch_threads"] == 2.0


def test_the_threads_it_started_with_are_given_back_when_the_run_ends():
    machine = FakeMachine()
    watch, lines, set_to = monitor(machine)
    machine.others = 1.0
    run_steps(watch, machine, 50, 0.1)
    assert set_to == [1]
    watch.release()
    assert set_to == [1, 2] and watch.threads == 2
    watch.release()  # nothing more to give back
    assert set_to == [1, 2]


def test_a_set_thread_count_is_kept_and_a_slow_down_is_named_once():
    machine = FakeMachine()
    watch, lines, set_to = monitor(machine, adapt=False)
    step = run_steps(watch, machine, 100, 0.1)  # 10 steps/s
    machine.others = 1.0
    step = run_steps(watch, machine, 40, 0.3, step)  # 3.3 steps/s: one line, not one per period
    assert set_to == []
    slowed = [line for line in lines if line.startswith("Training slowed")]
    assert len(slowed) == 1 and "other processes are using 1.0 of the 2 cores" in slowed[0]
    machine.others = 0.0
    step = run_steps(watch, machine, 100, 0.1, step)  # recovered
    run_steps(watch, machine, 40, 0.3, step)  # slowed again, now with no one else busy
    slowed = [line for line in lines if line.startswith("Training slowed")]
    assert len(slowed) == 2 and "no other process" in slowed[1]


def test_time_spent_evaluating_is_not_a_slow_down():
    machine = FakeMachine()
    watch, lines, _ = monitor(machine)
    step = run_steps(watch, machine, 100, 0.1)
    machine.advance(30.0)  # an evaluation between two steps
    watch.paused_for(30.0)
    run_steps(watch, machine, 100, 0.1, step)
    assert not [line for line in lines if line.startswith("Training slowed")]


def test_more_threads_than_cores_is_named_as_the_cause():
    watch = CoreMonitor(print, lambda n: None, 8, adapt=False, cores=2, read=lambda: None)
    assert "8 torch threads on 2 available cores" in watch.cause()


def test_the_update_gives_the_same_numbers_on_one_thread_as_on_two():
    """The monitor changes torch's thread count mid-run: the update at the T1 recipe's sizes
    (256-wide FastSAC, batch 1024 doubled by the mirror) must not notice: three updates agree to
    float32 rounding."""
    spec = EnvSpec(num_obs=47, num_critic_obs=120, num_actions=12)
    cfg = tiny_sac_config(actor_hidden_dims=[256, 128], critic_hidden_dims=[256, 256], num_atoms=101,
                          batch_size=2048, precision="auto")
    batches = [random_batch(47, 12, 2048, num_critic_obs=120, seed=s) for s in range(3)]
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            agent = make_algorithm(cfg, spec)
            for i, batch in enumerate(batches):
                torch.manual_seed(100 + i)
                agent.update(batch)
            results.append({k: v.detach().clone() for k, v in agent.state_dict().items()})
    finally:
        torch.set_num_threads(before)
    for name, value in results[0].items():  # bit for bit on a Xeon with AMX; a CPU whose GEMM splits
        torch.testing.assert_close(results[1][name], value, rtol=1e-5, atol=1e-6, msg=name)  # by threads: rounding


def test_a_run_beside_a_busy_core_trains_on_one_thread_and_logs_it(tmp_path, monkeypatch):
    """The runner applies the monitor: a machine whose other processes hold a core (fed, not
    spun) leaves the run on one torch thread, in its metrics too; its numbers are unchanged."""
    from fast_td3.training import runner as runner_module
    from fast_td3.training.metrics_log import read_metrics
    from helpers import make_runner, tiny_train_config

    machine = FakeMachine()
    machine.others = 1.0

    def busy_machine(say, set_threads, threads):
        def read():
            machine.advance(1.0)
            return machine.read()
        return CoreMonitor(say, set_threads, 2, adapt=True, cores=2, period_s=0.0, read=read,
                           clock=lambda: machine.now)

    before = torch.get_num_threads()
    try:
        plain = make_runner(tiny_train_config(total_steps=20), tmp_path / "plain", eval_env=False)
        plain.train()
        monkeypatch.setattr(runner_module, "CoreMonitor", busy_machine)
        busy = make_runner(tiny_train_config(total_steps=20), tmp_path / "busy", eval_env=False)
        set_to = []
        torch_set = torch.set_num_threads
        monkeypatch.setattr(runner_module.torch, "set_num_threads", lambda n: (set_to.append(n), torch_set(n)))
        busy.train()
        assert set_to == [1, 2]  # one thread while training; the two it started with given back at the end
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    logged = [r for r in read_metrics(tmp_path / "busy") if "perf/torch_threads" in r]
    assert logged and logged[-1]["perf/torch_threads"] == 1.0 and logged[-1]["perf/other_processes_cores"] > 0.9
    for a, b in zip(plain.agent.parameters(), busy.agent.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
