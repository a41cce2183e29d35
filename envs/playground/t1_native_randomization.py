"""Domain randomisation of the native T1 env's robots: the switched-on kinds of `randomization.*`
written into a `mujoco.batch.Batch`'s per-env model fields, as `T1LowDimJoystick.domain_randomize`
draws them on MJX. Apart from the env so its step and reset read without the model surgery."""

from __future__ import annotations

import numpy as np

from sim2real import t1


def randomize_robots(batch, model, index, control: t1.T1Control, cfg, rng: np.random.Generator, ids: np.ndarray,
                     encoder_offsets: np.ndarray) -> None:
    """Draw new robots for the envs `ids` (`cfg` is the task's `randomization` config); writes
    their encoder offsets into `encoder_offsets`. Masses, inertias and gains are drawn around the
    model's own, so a redraw does not compound on the last one; the draws come from `rng` in a
    fixed order, so a seed gives the same robots."""
    n = len(ids)
    kp, kd = np.asarray(control.stiffness), np.asarray(control.damping)
    if cfg.floor_friction:
        batch.expand("geom_friction")[ids, index.floor_geom, 0] = rng.uniform(*cfg.floor_friction_range, n)
    if cfg.link_masses or cfg.payload:
        mass, inertia = batch.expand("body_mass"), batch.expand("body_inertia")
        mass[ids], inertia[ids] = model.body_mass, model.body_inertia
    if cfg.link_masses:
        scale = rng.uniform(*cfg.link_mass_scale, (n, model.nbody))
        mass[ids] *= scale
        inertia[ids] *= scale[..., None]
    if cfg.payload:
        trunk = int(model.jnt_bodyid[0])
        mass[ids, trunk] = np.maximum(mass[ids, trunk] + rng.uniform(*cfg.payload_range, n), 1e-3)
    if cfg.gains or cfg.joint_offsets:
        gain, bias = batch.expand("actuator_gainprm"), batch.expand("actuator_biasprm")
        gain[ids], bias[ids] = model.actuator_gainprm, model.actuator_biasprm
        if cfg.gains:
            kp = kp * rng.uniform(*cfg.kp_scale, (n, t1.NUM_JOINTS))
            gain[ids, :, 0] = kp
            bias[ids, :, 1], bias[ids, :, 2] = -kp, -kd * rng.uniform(*cfg.kd_scale, (n, t1.NUM_JOINTS))
        if cfg.joint_offsets:  # encoder offsets δ: the PD loop and the observation see q + δ
            legs = index.legs
            offset = rng.uniform(*cfg.joint_offset_range, (n, t1.NUM_LEG_JOINTS))
            bias[np.ix_(ids, legs, [0])] = bias[np.ix_(ids, legs, [1])] * offset[..., None]  # -kp·δ
            encoder_offsets[np.ix_(ids, legs)] = offset
    if cfg.link_masses or cfg.payload:
        batch.set_const()  # what MuJoCo derives from the masses, as the gate's mj_setConst
