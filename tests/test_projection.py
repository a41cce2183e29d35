"""C51 projection against a brute-force NumPy implementation and known answers."""

import numpy as np
import pytest
import torch

from fast_td3.learner.networks import project_distribution


def brute_force_projection(probs, rewards, bootstrap, discount, support):
    """Atom by atom: move each atom's mass to r + b*d*z, clamp, split between neighbours."""
    num_atoms = len(support)
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    out = np.zeros_like(probs, dtype=np.float64)
    for i in range(probs.shape[0]):
        for j in range(num_atoms):
            tz = min(max(rewards[i] + bootstrap[i] * discount[i] * support[j], v_min), v_max)
            b = (tz - v_min) / delta
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                out[i, lo] += probs[i, j]
            else:
                out[i, lo] += probs[i, j] * (hi - b)
                out[i, hi] += probs[i, j] * (b - lo)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force_on_random_inputs(seed):
    rng = np.random.default_rng(seed)
    batch, atoms = 64, 51
    support = np.linspace(-10.0, 10.0, atoms)
    logits = rng.normal(size=(batch, atoms))
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    rewards = rng.uniform(-12, 12, size=batch)  # some targets fall off the support
    bootstrap = (rng.uniform(size=batch) > 0.3).astype(np.float64)
    discount = 0.99 ** rng.integers(1, 4, size=batch)  # per-sample gamma^k
    expected = brute_force_projection(probs, rewards, bootstrap, discount, support)
    got = project_distribution(
        torch.tensor(probs), torch.tensor(rewards), torch.tensor(bootstrap),
        torch.tensor(discount), torch.tensor(support),
    )
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-10)
    np.testing.assert_allclose(got.sum(-1).numpy(), 1.0, atol=1e-12)


def test_target_on_an_atom_keeps_its_mass_once():
    # Support -2..2 step 1; reward 1, discount 1: atom z moves exactly to z + 1.
    support = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]], dtype=torch.float64)
    got = project_distribution(probs, torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([1.0]), support)
    # -2->-1, -1->0, 0->1, 1->2, 2->3 clamped to 2.
    expected = torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.40]], dtype=torch.float64)
    torch.testing.assert_close(got, expected)


def test_no_bootstrap_puts_all_mass_at_the_reward():
    support = torch.linspace(-10.0, 10.0, 21)
    probs = torch.softmax(torch.randn(2, 21), -1)
    got = project_distribution(probs, torch.tensor([3.0, 2.5]), torch.zeros(2), torch.ones(2), support)
    expected = torch.zeros(2, 21)
    expected[0, 13] = 1.0  # exactly on atom 3.0
    expected[1, 12] = 0.5  # halfway between 2.0 and 3.0
    expected[1, 13] = 0.5
    torch.testing.assert_close(got, expected)


def test_leading_head_dimension_and_float32_mass():
    support = torch.linspace(-250.0, 250.0, 101)
    probs = torch.softmax(torch.randn(2, 4096, 101), -1)
    rewards = torch.randn(4096) * 50
    got = project_distribution(probs, rewards, torch.ones(4096), torch.full((4096,), 0.99), support)
    assert got.shape == (2, 4096, 101)
    assert (got >= 0).all()
    torch.testing.assert_close(got.sum(-1), torch.ones(2, 4096), atol=1e-5, rtol=0)
    # Each head is projected on its own.
    single = project_distribution(probs[1], rewards, torch.ones(4096), torch.full((4096,), 0.99), support)
    torch.testing.assert_close(got[1], single)
