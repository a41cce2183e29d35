"""Booster T1 sim-to-real, in two layers. `sim2real.t1` is the contract (joint table, control,
observation, gait and commands, mirror, deploy spec, perturbation ranges, SDK messages), the base the
training envs build on. The rest of the package are the tools on top of the trainer: the export
bundle, the native-MuJoCo sim-to-sim and robust gates, play and watch, gating a run, shipping."""
