"""Typed hyperparameters of the learner (the `algo` section of a run's config).

One dataclass holds everything the algorithm needs; suites and tasks change it
through data (presets), never through code branches. The defaults are the
reference FastTD3 recipe (arXiv 2505.22642). The field types stay within what
OmegaConf accepts, so the same class serves as a Hydra structured config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Dict, List

PRECISIONS = ("auto", "bf16", "fp32")
"""Values of AlgoConfig.precision; fast_td3.learner.precision resolves them on the hardware."""


class ConfigError(ValueError):
    """A configuration value that cannot work; the message names the field."""


LR_SCHEDULES = ("constant", "cosine")


ALGORITHMS = ("fast_td3", "fast_sac")
"""Values of AlgoConfig.name: each is a module fast_td3/learner/algorithms/<name>.py, a settings section
AlgoConfig.<name> below and a file conf/algo/<name>.yaml."""
ACTIVATIONS = ("relu", "silu")
NORMALIZATION_SOURCES = ("collect", "replay")


@dataclass
class FastTD3Config:
    """What only FastTD3 uses: deterministic actor, Gaussian exploration, target smoothing."""

    actor_last_layer_std: float = 0.01
    """Std of the actor's last-layer weights: near-zero initial actions."""
    use_target_actor: bool = False
    """Bootstrap actions from a Polyak-averaged actor (classic TD3); the reference uses the online actor."""
    policy_noise: float = 0.001
    """Std of the target-policy smoothing noise."""
    noise_clip: float = 0.5
    """Clip of the target-policy smoothing noise."""
    std_min: float = 0.001
    """Lower end of the per-env exploration-noise std range."""
    std_max: float = 0.4
    """Upper end of the per-env exploration-noise std range."""

    def problems(self) -> list[str]:
        if not 0.0 <= self.std_min <= self.std_max:
            return [f"need 0 <= fast_td3.std_min <= fast_td3.std_max, got {self.std_min}, {self.std_max}"]
        return []


@dataclass
class FastSACConfig:
    """What only FastSAC uses: the tanh-Gaussian actor and the learnt temperature (holosoma's values)."""

    log_std_min: float = -5.0
    """Lower bound of the actor's log-std (a tanh squashes the head's output into [min, max])."""
    log_std_max: float = 0.0
    """Upper bound of the actor's log-std."""
    alpha_init: float = 0.001
    """Initial temperature alpha (the entropy bonus weight); log alpha is what is learnt."""
    learn_alpha: bool = True
    """Learn the temperature towards target_entropy (false: alpha stays at alpha_init)."""
    alpha_lr: float = 3e-4
    """Learning rate of log alpha (AdamW with the shared betas)."""
    alpha_weight_decay: float = 0.0
    """AdamW weight decay on log alpha (holosoma's code leaves torch's default 0.01; it pulls alpha to 1)."""
    target_entropy_per_action: float = 0.0
    """Target entropy per action dimension (holosoma: 0; classic SAC: -1); times num_actions."""

    def problems(self) -> list[str]:
        problems = []
        if not self.log_std_min < self.log_std_max:
            problems.append(f"fast_sac.log_std_min ({self.log_std_min}) must be < log_std_max ({self.log_std_max})")
        if not self.alpha_init > 0.0:
            problems.append(f"fast_sac.alpha_init must be > 0, got {self.alpha_init}")
        return problems


@dataclass
class AlgoConfig:
    """The learner: the algorithm's name, the settings every algorithm shares (networks' sizes,
    C51 support, TD targets, optimisation, replay, normalisation, execution), and one section
    of its own per algorithm (`fast_td3`, `fast_sac`). The defaults are the FastTD3 recipe;
    conf/algo/<name>.yaml sets another algorithm's values."""

    name: str = "fast_td3"
    """The algorithm: fast_td3 or fast_sac (`algo=<name>` picks conf/algo/<name>.yaml, which sets it)."""

    # --- networks -----------------------------------------------------------
    actor_hidden_dims: List[int] = field(default_factory=lambda: [512, 256, 128])
    """Hidden widths of the actor MLP."""
    critic_hidden_dims: List[int] = field(default_factory=lambda: [1024, 512, 256])
    """Hidden widths of each distributional critic head."""
    activation: str = "relu"
    """Hidden-layer activation of actor and critic: relu (FastTD3) or silu (FastSAC)."""
    layer_norm: bool = False
    """LayerNorm after every hidden linear layer of actor and critic (FastSAC: on)."""
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
    """Clipped double Q: each sample's target comes from the head with the smaller mean, and the actor
    maximises the smaller head; false: each head its own target, the actor maximises the heads' mean."""
    disable_bootstrap: bool = False
    """Treat time-outs like terminations (no bootstrap); for tasks whose final observation is unreliable."""
    tau: float = 0.1
    """Polyak coefficient of the target networks, applied after every critic update."""

    # --- optimisation -------------------------------------------------------
    batch_size: int = 32768
    """Transitions per update, split evenly over the envs (batch_size // num_envs each)."""
    symmetry: bool = False
    """Left-right mirror augmentation: each sampled batch gains its mirror image (2x the update's
    work), from the env's `mirror_maps()` (the T1LowDim tasks have them; fast_td3/learner/symmetry.py)."""
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
    """AdamW weight decay of the actor and critic optimisers."""
    adam_betas: List[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW betas; ahead of the reference's (0.9, 0.999) on HalfCheetah, tied on Hopper (docs/algorithms.md)."""
    max_grad_norm: float = 0.0
    """Clip gradients to this global norm (0 disables clipping)."""

    # --- replay and normalisation -------------------------------------------
    buffer_size: int = 51200
    """Replay capacity per env (transitions)."""
    store_obs_bf16: bool = False
    """Store observations in bfloat16 (half the replay memory)."""
    learning_starts: int = 10
    """Global steps of pure exploration before the first update."""
    obs_normalization: bool = True
    """Normalise actor and critic observations with running statistics."""
    obs_normalization_source: str = "collect"
    """Where the observation statistics come from: 'collect' (every collected step) or 'replay'
    (the observations of every sampled batch, as holosoma's FastSAC)."""
    reward_normalization: bool = False
    """Scale rewards by the running std of the discounted return."""
    normalizer_eps: float = 1e-2
    """Added to the std of the observation normaliser."""

    # --- execution ----------------------------------------------------------
    precision: str = "auto"
    """'auto': bf16 where the hardware computes it natively (CUDA 8.0+, AMX/AVX512-BF16 CPUs, by a
    cached sub-second probe), else fp32; 'bf16' forces bfloat16 autocast; 'fp32' disables it."""
    compile: bool = True
    """torch.compile the update function."""
    compile_mode: str = "auto"
    """torch.compile mode; 'auto' picks per device (CUDA graphs on GPU, default on CPU)."""

    # --- per algorithm ------------------------------------------------------
    fast_td3: FastTD3Config = field(default_factory=FastTD3Config)
    """FastTD3's own settings (read only when name=fast_td3)."""
    fast_sac: FastSACConfig = field(default_factory=FastSACConfig)
    """FastSAC's own settings (read only when name=fast_sac)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Fail early, naming the field, rather than deep inside an update."""
        problems = []
        if self.name not in ALGORITHMS:
            problems.append(f"name must be one of {ALGORITHMS}, got {self.name!r}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.obs_normalization_source not in NORMALIZATION_SOURCES:
            problems.append(f"obs_normalization_source must be one of {NORMALIZATION_SOURCES}, "
                            f"got {self.obs_normalization_source!r}")
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
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            problems.append(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.buffer_size < 1:
            problems.append(f"buffer_size must be >= 1, got {self.buffer_size}")
        elif self.learning_starts > self.buffer_size:
            problems.append(
                f"learning_starts ({self.learning_starts}) must be <= buffer_size ({self.buffer_size}): "
                "the buffer holds at most buffer_size steps per env, so learning would never start"
            )
        if len(self.adam_betas) != 2:
            problems.append(f"adam_betas needs two values, got {list(self.adam_betas)}")
        for name in ALGORITHMS:
            section = getattr(self, name)
            if is_dataclass(section):  # a plain dict while OmegaConf builds the node
                problems.extend(section.problems())
        if problems:
            raise ConfigError("invalid AlgoConfig: " + "; ".join(problems))


FAST_TD3_KEYS = tuple(f.name for f in fields(FastTD3Config))
"""Keys that sat at the top of `algo` before the per-algorithm sections (checkpoint format 1)."""


def migrate_algo_config(algo: Dict[str, Any]) -> Dict[str, Any]:
    """A recorded `algo` config from before the per-algorithm sections (flat FastTD3 keys such as
    std_min) in today's layout; today's layout is returned unchanged."""
    algo = dict(algo)
    moved = {key: algo.pop(key) for key in FAST_TD3_KEYS if key in algo}
    if moved:
        algo["fast_td3"] = {**dict(algo.get("fast_td3") or {}), **moved}
    return algo
