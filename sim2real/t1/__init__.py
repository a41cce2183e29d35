"""The Booster T1 deployment contract, written once for training, export, sim-to-sim and the robot.

Booster's deploy code feeds a TorchScript policy a float32 `[1, 47]` observation at 50 Hz and turns its
`[1, 12]` output (clipped to ±1) into position targets `default + action_scale * a` for the 12 leg joints,
tracked by the motor drivers' PD loop at 500 Hz. Everything both sides must agree on lives in this package, as
plain data and as functions generic over the array module (`numpy`, `jax.numpy`): the joint table in SDK order,
the observation layout and scales, the gait-phase convention (including standing), command smoothing and
the control settings (gains, torque limits, default pose, action scale, rates). The training env
(`envs/playground/t1_lowdim.py`), the exported bundle (`sim2real/export.py`), the sim-to-sim gate
(`sim2real/sim2sim.py`) and the deploy-path emulation (`sim2real/t1/sdk.py`) all call these; none
re-derives them.

The package is the base layer the training envs (`envs/`) may import; the tools on top of it (export,
the gates, watch, shipping: the rest of `sim2real/`) import it and the envs, never the other way.
Its modules, one concern each: `joints` (the joint table in SDK order), `control` (actions to PD
targets), `observation` (the 47 inputs), `gait` (commands and the gait clock), `mirror` (left-right
symmetry), `deploy_spec` (what a bundle records), `perturbations` (what the robust gate varies) and
`sdk` (the robot side of the observation, from Booster SDK messages). The names of the first six
are re-exported here (`t1.SDK_JOINT_NAMES`, `t1.T1Control`, ...).
"""

from sim2real.t1.joints import (  # noqa: F401
    SDK_JOINT_NAMES, NUM_JOINTS, LEG_SDK_INDICES, LEG_JOINT_NAMES, NUM_LEG_JOINTS, PARALLEL_MECH_SDK_INDICES,
    DEFAULT_POSE, STIFFNESS, DAMPING, TORQUE_LIMIT, JOINT_RANGE, ACTION_BOUNDS, PREPARE,
)
from sim2real.t1.control import (  # noqa: F401
    T1Control, targets_from_actions, filtered_targets,
)
from sim2real.t1.gait import (  # noqa: F401
    STANDING_COMMAND_NORM, standing, gait_phase_features, smooth_command, update_command_and_gait,
    CommandSpec,
)
from sim2real.t1.observation import (  # noqa: F401
    OBSERVATION_LAYOUT, OBSERVATION_SIZE, observation_slices, actor_observation, imu_from_floating_base,
    projected_gravity_from_rpy,
)
from sim2real.t1.mirror import (  # noqa: F401
    Mirror, joint_mirror, VECTOR_MIRROR, RATE_MIRROR, COMMAND_MIRROR, GAIT_PHASE_MIRROR, concat_mirrors,
    action_mirror, observation_mirror,
)
from sim2real.t1.deploy_spec import (  # noqa: F401
    DeploySpec, deploy_normalization,
)
