import pytest
import torch

from fast_td3.learner.device import DeviceError, resolve_device
from envs.protocol import EnvSpec
from fast_td3.learner.replay import ReplayBuffer


def test_auto_picks_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(None).type == expected
    assert ReplayBuffer(EnvSpec(num_envs=2, num_obs=3, num_actions=1), 4).device.type == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_asking_for_a_missing_gpu_says_what_to_do():
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        resolve_device("cuda")
