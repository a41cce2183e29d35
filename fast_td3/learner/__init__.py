"""The learner: networks, the off-policy algorithms (FastTD3, FastSAC), the replay buffer,
normalisation, exploration noise and numeric precision.

It imports nothing from `envs/`, `fast_td3.training` or `fast_td3.analysis`: it sees tensors
and configs, never a simulator or a run folder (a test checks this).
"""
