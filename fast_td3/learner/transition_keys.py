"""Names of the fields of a transition and of a sampled batch: the one vocabulary the
collector, the replay buffer and the algorithms share (imported as `keys`).
"""

# Keys of a transition handed to `extend` (batch `[num_envs]`).
OBS = "observations"
ACTIONS = "actions"
REWARDS = "rewards"
TERMINATED = "terminated"
TRUNCATED = "truncated"
NEXT_OBS = "next_observations"
CRITIC_OBS = "critic_observations"
NEXT_CRITIC_OBS = "next_critic_observations"
# Keys added to a sampled batch.
DISCOUNT = "discount"
NSTEP_LENGTH = "n_step_length"
