"""Library noise the user cannot act on is silenced by its text; everything else still shows."""

import logging

import pytest

from envs import quiet

SETTOTALMASS_MODEL = """<mujoco><compiler settotalmass="5"/><worldbody>
  <body><freejoint/><geom size="0.1"/></body></worldbody></mujoco>"""


@pytest.fixture
def mujoco_default_handler(monkeypatch, tmp_path):
    """MuJoCo's own warning handler before and after the test (it is process-wide), and a
    working folder for the MUJOCO_LOG.TXT it writes."""
    mujoco = pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(None)
    yield mujoco
    mujoco.set_mju_user_warning(previous)


def test_the_settotalmass_deprecation_is_silenced_and_other_mujoco_warnings_show(mujoco_default_handler, capfd):
    mujoco = mujoco_default_handler
    mujoco.MjModel.from_xml_string(SETTOTALMASS_MODEL)
    assert "settotalmass" in "".join(capfd.readouterr())  # MuJoCo prints it (HalfCheetah: once per env)
    quiet.silence_library_noise("gymnasium")
    model = mujoco.MjModel.from_xml_string(SETTOTALMASS_MODEL)
    assert "settotalmass" not in "".join(capfd.readouterr())
    data = mujoco.MjData(model)
    data.qpos[0] = float("nan")
    mujoco.mj_step(model, data)  # an unstable simulation: the user's to know
    assert "MuJoCo warning: Nan, Inf or huge value in QPOS" in capfd.readouterr().err


def test_jax_backend_probing_is_silenced_and_its_other_messages_show(caplog):
    quiet.silence_library_noise("isaaclab")  # the logging filter only: no MuJoCo import for Isaac Lab
    logger = logging.getLogger(quiet.JAX_BACKEND_LOGGER)
    with caplog.at_level(logging.INFO, logger=quiet.JAX_BACKEND_LOGGER):
        logger.info("Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so")
        logger.info("Unable to initialize backend 'rocm': module not found")
        logger.warning("An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed.")
        logger.info("Some other message")
    assert [record.getMessage()[:20] for record in caplog.records] == ["An NVIDIA GPU may be", "Some other message"]


@pytest.mark.parametrize("logger_name,noise,level", [
    ("OpenGL.acceleratesupport", "No OpenGL_accelerate module loaded: No module named 'OpenGL_accelerate'", logging.INFO),
    ("torch._dynamo.variables.ctx_manager",
     "Profiler record function <class 'torch.autograd.profiler.record_function'> will be ignored", logging.WARNING),
])
def test_renderer_and_compiler_noise_is_silenced_and_their_other_messages_show(caplog, logger_name, noise, level):
    quiet.silence_library_noise("isaaclab")
    logger = logging.getLogger(logger_name)
    with caplog.at_level(logging.DEBUG, logger=logger_name):
        logger.log(level, noise)
        logger.warning("Something the user should see")
        logger.error(noise)  # the same text as an error is not the known noise
    assert [(r.levelno, r.getMessage()[:20]) for r in caplog.records] == [
        (logging.WARNING, "Something the user s"), (logging.ERROR, noise[:20])]


def test_a_compiled_update_prints_no_profiler_line(capfd):
    """The line torch's compiler printed at every T1 run's first update (torch.optim's profiler
    range inside the compiled step) is gone once the filters are in."""
    import torch

    quiet.silence_library_noise("isaaclab")
    torch._dynamo.reset()
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())

    @torch.compile(backend="eager")
    def step(x):
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        return loss

    step(torch.ones(3, 4))
    assert "will be ignored" not in "".join(capfd.readouterr())
