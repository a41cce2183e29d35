"""The T1's joint table in SDK order: names, the legs the policy drives, default pose, gains,
torque limits, ranges and the deploy code's stand-up (`prepare`) values."""

from __future__ import annotations


SDK_JOINT_NAMES = (
    "AAHead_yaw", "Head_pitch",
    "Left_Shoulder_Pitch", "Left_Shoulder_Roll", "Left_Elbow_Pitch", "Left_Elbow_Yaw",
    "Right_Shoulder_Pitch", "Right_Shoulder_Roll", "Right_Elbow_Pitch", "Right_Elbow_Yaw",
    "Waist",
    "Left_Hip_Pitch", "Left_Hip_Roll", "Left_Hip_Yaw", "Left_Knee_Pitch", "Left_Ankle_Pitch", "Left_Ankle_Roll",
    "Right_Hip_Pitch", "Right_Hip_Roll", "Right_Hip_Yaw", "Right_Knee_Pitch", "Right_Ankle_Pitch", "Right_Ankle_Roll",
)
"""The T1's 23 joints by SDK index (`booster_robotics_sdk_python.JointIndex`), named as in the MJCF model."""
NUM_JOINTS = len(SDK_JOINT_NAMES)
LEG_SDK_INDICES = tuple(range(11, 23))
"""The joints the policy drives: left leg 11-16, right leg 17-22 (hip pitch/roll/yaw, knee, ankle pitch/roll)."""
LEG_JOINT_NAMES = tuple(SDK_JOINT_NAMES[i] for i in LEG_SDK_INDICES)
NUM_LEG_JOINTS = len(LEG_SDK_INDICES)
PARALLEL_MECH_SDK_INDICES = (15, 16, 21, 22)
"""Ankle joints driven through a parallel linkage: the deploy code sends them torques, not PD targets."""

# Per-joint values, SDK order. The leg values are the robot's own (Booster's deploy
# configuration); head, arms and waist are held at their default pose by the same PD loop.
DEFAULT_POSE = (
    0.0, 0.0,
    0.2, -1.35, 0.0, -0.5,
    0.2, 1.35, 0.0, 0.5,
    0.0,
    -0.2, 0.0, 0.0, 0.4, -0.25, 0.0,
    -0.2, 0.0, 0.0, 0.4, -0.25, 0.0,
)
STIFFNESS = (20.0, 20.0) + (20.0,) * 8 + (200.0,) + (200.0, 200.0, 200.0, 200.0, 50.0, 50.0) * 2
DAMPING = (0.2, 0.2) + (0.5,) * 8 + (5.0,) + (5.0, 5.0, 5.0, 5.0, 3.0, 3.0) * 2
TORQUE_LIMIT = (7.0, 7.0) + (10.0,) * 8 + (30.0,) + (60.0, 25.0, 30.0, 60.0, 24.0, 15.0) * 2
JOINT_RANGE = (
    (-1.57, 1.57), (-0.35, 1.22),
    (-3.31, 1.22), (-1.74, 1.57), (-2.27, 2.27), (-2.44, 0.0),
    (-3.31, 1.22), (-1.57, 1.74), (-2.27, 2.27), (0.0, 2.44),
    (-1.57, 1.57),
    (-1.8, 1.57), (-0.2, 1.57), (-1.0, 1.0), (0.0, 2.34), (-0.87, 0.35), (-0.44, 0.44),
    (-1.8, 1.57), (-1.57, 0.2), (-1.0, 1.0), (0.0, 2.34), (-0.87, 0.35), (-0.44, 0.44),
)
"""Each joint's range [rad], SDK order: the robot model's (tests/test_t1_contract.py pins them to it)."""
ACTION_BOUNDS = ("none", "joint_limits")
"""How leg actions map to targets: `action_scale` and ±1 for every joint, or each joint's scale from its
range with its action bounded to keep the target inside it (`T1Control.joint_limits_bounds`)."""
PREPARE = {
    # the deploy code's stand-up phase before the policy takes over (its `prepare` section; robot values)
    "stiffness": [5.0, 5.0, 40.0, 50.0, 20.0, 10.0, 40.0, 50.0, 20.0, 10.0, 100.0,
                  350.0, 350.0, 180.0, 350.0, 450.0, 450.0, 350.0, 350.0, 180.0, 350.0, 450.0, 450.0],
    "damping": [0.1, 0.1, 0.5, 1.5, 0.2, 0.2, 0.5, 1.5, 0.2, 0.2, 5.0,
                7.5, 7.5, 3.0, 5.5, 0.5, 0.5, 7.5, 7.5, 3.0, 5.5, 0.5, 0.5],
    "default_qpos": [0.0, 0.0, 0.25, -1.4, 0.0, -0.5, 0.25, 1.4, 0.0, 0.5, 0.0,
                     -0.1, 0.0, 0.0, 0.2, -0.1, 0.0, -0.1, 0.0, 0.0, 0.2, -0.1, 0.0],
}
