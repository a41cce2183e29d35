"""Where FastTD3's learner lived before the algorithms package; these names are kept for
existing imports. The code is in fast_td3/algorithms/ (base.py: what every algorithm shares;
fast_td3.py, fast_sac.py: one module per algorithm)."""

from fast_td3.algorithms.base import (  # noqa: F401
    AUTO_COMPILE_MODES,
    LearningRateSchedule,
    OffPolicyAlgorithm,
    actor_update_due,
    bootstrap_mask,
    critic_loss,
    make_adamw,
    polyak_update_,
    target_distribution,
)
from fast_td3.algorithms.fast_sac import FastSAC  # noqa: F401
from fast_td3.algorithms.fast_td3 import FastTD3, actor_loss, smoothed_target_actions  # noqa: F401
