"""The training application: the command line (`fast-td3-train`), the typed run config, the
runner that moves transitions from the envs to the learner, checkpoints and resume,
metrics logging, in-run evaluation, torchrun data parallelism, and input guards.
"""
