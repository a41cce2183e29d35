"""The robot side of the observation: the 47 numbers from Booster SDK messages.

On the robot the policy's inputs arrive as a `LowState` message
(`booster_robotics_sdk_python`): the IMU's roll/pitch/yaw and gyro, and per motor (SDK
order, `motor_state_serial`) its position `q` and velocity `dq`. `observation_from_low_state`
turns one into the policy input through the same `sim2real.t1.actor_observation` the
training env uses; `low_state_from_mujoco` writes a MuJoCo state into such a message, so
tests can check that both paths give the same numbers. The SDK wheel is optional
(`pip install booster-robotics-sdk-python`, Linux x86-64/aarch64).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sim2real import t1

SDK_INSTALL = "pip install booster-robotics-sdk-python"


def sdk():
    """The SDK module, or ImportError with the install command."""
    try:
        import booster_robotics_sdk_python
    except ImportError as error:
        raise ImportError(f"the Booster SDK is not installed: {SDK_INSTALL}") from error
    return booster_robotics_sdk_python


def rpy_from_rotation(rotation: np.ndarray) -> tuple[float, float, float]:
    """Roll, pitch, yaw of `R = Rz(yaw) Ry(pitch) Rx(roll)` (the IMU's convention)."""
    r = np.asarray(rotation).reshape(3, 3)
    roll = np.arctan2(r[2, 1], r[2, 2])
    pitch = np.arctan2(-r[2, 0], np.hypot(r[2, 1], r[2, 2]))
    yaw = np.arctan2(r[1, 0], r[0, 0])
    return float(roll), float(pitch), float(yaw)


def low_state_from_mujoco(robot) -> object:
    """A `LowState` message holding a `sim2sim.T1Robot`'s IMU and joint state (what the robot would publish).

    The SDK's `ImuState` is filled through its own setters. Its `MotorState` fields cannot
    be written from Python (1.6.3 binds each setter to the getter's signature), so where
    that refuses, the motors are stand-ins with the same `q`/`dq` attributes and the
    message is a plain object with the SDK's attribute names.
    """
    b1 = sdk()
    imu = b1.ImuState()
    imu.rpy = list(rpy_from_rotation(robot.base_rotation()))
    imu.gyro = [float(x) for x in robot.gyro()]
    q, dq = robot.data.qpos[7:7 + t1.NUM_JOINTS], robot.data.qvel[6:6 + t1.NUM_JOINTS]
    try:
        motors = []
        for i in range(t1.NUM_JOINTS):
            motor = b1.MotorState()
            motor.q, motor.dq = float(q[i]), float(dq[i])
            motors.append(motor)
        state = b1.LowState()
        state.imu_state, state.motor_state_serial = imu, motors
        return state
    except TypeError:
        motors = [SimpleNamespace(q=float(q[i]), dq=float(dq[i])) for i in range(t1.NUM_JOINTS)]
        return SimpleNamespace(imu_state=imu, motor_state_serial=motors)


def observation_from_low_state(low_state, command, gait_process, last_action, default_pose) -> np.ndarray:
    """The policy input from a `LowState` message, the smoothed command, the gait process and the last action."""
    roll, pitch, yaw = (float(x) for x in low_state.imu_state.rpy)
    gravity = t1.projected_gravity_from_rpy(np, np.float64(roll), np.float64(pitch), np.float64(yaw))
    q = np.array([m.q for m in low_state.motor_state_serial])
    dq = np.array([m.dq for m in low_state.motor_state_serial])
    return t1.actor_observation(
        np, projected_gravity=gravity, gyro=np.asarray(low_state.imu_state.gyro, dtype=np.float64),
        command=np.asarray(command, dtype=np.float64), gait_process=np.asarray(gait_process, dtype=np.float64),
        joint_pos=q, joint_vel=dq, last_action=np.asarray(last_action, dtype=np.float64),
        default_pose=np.asarray(default_pose, dtype=np.float64)).astype(np.float32)
