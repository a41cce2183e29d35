"""Typed hyperparameters of the learner.

One dataclass holds everything the algorithm needs; suites and tasks change it
through data (presets), never through code branches. The defaults are the
reference FastTD3 recipe (arXiv 2505.22642). The field types stay within what
OmegaConf accepts, so the same class serves as a Hydra structured config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

PRECISIONS = ("fp32", "bf16")
LR_SCHEDULES = ("constant", "cosine")


@dataclass
class AlgoConfig:
    """FastTD3 hyperparameters (one line each: what it is and why it matters)."""

    # --- networks -----------------------------------------------------------
    actor_hidden_dims: List[int] = field(default_factory=lambda: [512, 256, 128])
    """Hidden widths of the actor MLP (ReLU, tanh output)."""
    critic_hidden_dims: List[int] = field(default_factory=lambda: [1024, 512, 256])
    """Hidden widths of each distributional critic head."""
    actor_last_layer_std: float = 0.01
    """Std of the actor's last-layer weights: near-zero initial actions."""
    num_atoms: int = 101
    """Number of C51 atoms of the value distribution."""
    v_min: float = -250.0
    """Lowest value on the C51 support; returns below it are clamped."""
    v_max: float = 250.0
    """Highest value on the C51 support; returns above it are clamped."""

    # --- TD targets ---------------------------------------------------------
    gamma: float = 0.99
    """Discount factor per env step."""
    n_step: int = 1
    """Length of the n-step return (truncated at the first episode end)."""
    use_cdq: bool = True
    """Clipped double Q: each sample's target comes from the head with the smaller mean."""
    use_target_actor: bool = False
    """Bootstrap actions from a Polyak-averaged actor (classic TD3); the reference uses the online actor."""
    policy_noise: float = 0.001
    """Std of the target-policy smoothing noise."""
    noise_clip: float = 0.5
    """Clip of the target-policy smoothing noise."""
    disable_bootstrap: bool = False
    """Treat time-outs like terminations (no bootstrap); for tasks whose final observation is unreliable."""
    tau: float = 0.1
    """Polyak coefficient of the target networks, applied after every critic update."""

    # --- optimisation -------------------------------------------------------
    batch_size: int = 32768
    """Transitions per update, split evenly over the envs (batch_size // num_envs each)."""
    num_updates: int = 2
    """Critic updates per global step (one vectorised env step)."""
    policy_frequency: int = 2
    """The actor is updated after every policy_frequency-th critic update."""
    actor_lr: float = 3e-4
    """Initial actor learning rate."""
    critic_lr: float = 3e-4
    """Initial critic learning rate."""
    actor_lr_end: float = 3e-4
    """Actor learning rate at the end of a cosine schedule."""
    critic_lr_end: float = 3e-4
    """Critic learning rate at the end of a cosine schedule."""
    lr_schedule: str = "constant"
    """'constant' or 'cosine' (from *_lr to *_lr_end over schedule_updates updates)."""
    schedule_updates: int = 0
    """Length of the cosine schedule in critic updates (0: derive from the run length)."""
    weight_decay: float = 0.1
    """AdamW weight decay of both optimisers."""
    adam_betas: List[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas."""
    max_grad_norm: float = 0.0
    """Clip gradients to this global norm (0 disables clipping)."""

    # --- exploration --------------------------------------------------------
    std_min: float = 0.001
    """Lower end of the per-env exploration-noise std range."""
    std_max: float = 0.4
    """Upper end of the per-env exploration-noise std range."""

    # --- replay and normalisation -------------------------------------------
    buffer_size: int = 51200
    """Replay capacity per env (transitions)."""
    store_obs_bf16: bool = False
    """Store observations in bfloat16 (half the replay memory)."""
    learning_starts: int = 10
    """Global steps of pure exploration before the first update."""
    obs_normalization: bool = True
    """Normalise actor and critic observations with running statistics."""
    reward_normalization: bool = False
    """Scale rewards by the running std of the discounted return."""
    normalizer_eps: float = 1e-2
    """Added to the std of the observation normaliser."""

    # --- execution ----------------------------------------------------------
    precision: str = "bf16"
    """'bf16' runs networks under bfloat16 autocast; 'fp32' disables it."""
    compile: bool = True
    """torch.compile the update function."""
    compile_mode: str = "auto"
    """torch.compile mode; 'auto' picks per device (CUDA graphs on GPU, default on CPU)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Fail early, naming the field, rather than deep inside an update."""
        problems = []
        if self.num_atoms < 2:
            problems.append(f"num_atoms must be >= 2, got {self.num_atoms}")
        if not self.v_min < self.v_max:
            problems.append(f"v_min ({self.v_min}) must be < v_max ({self.v_max})")
        if not 0.0 <= self.gamma <= 1.0:
            problems.append(f"gamma must be in [0, 1], got {self.gamma}")
        if self.n_step < 1:
            problems.append(f"n_step must be >= 1, got {self.n_step}")
        if self.num_updates < 1:
            problems.append(f"num_updates must be >= 1, got {self.num_updates}")
        if self.policy_frequency < 1:
            problems.append(f"policy_frequency must be >= 1, got {self.policy_frequency}")
        if not 0.0 < self.tau <= 1.0:
            problems.append(f"tau must be in (0, 1], got {self.tau}")
        if not 0.0 <= self.std_min <= self.std_max:
            problems.append(f"need 0 <= std_min <= std_max, got {self.std_min}, {self.std_max}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            problems.append(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if len(self.adam_betas) != 2:
            problems.append(f"adam_betas needs two values, got {list(self.adam_betas)}")
        if problems:
            raise ValueError("invalid AlgoConfig: " + "; ".join(problems))
