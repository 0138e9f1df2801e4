import torch

from robo_rl.learn.rollout_storage import compute_gae


def test_gae_matches_hand_computed_numbers():
    # One env, three steps, gamma 0.9, lambda 0.5, the episode ends after step 1 (index 1).
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    dones = torch.tensor([[0.0], [1.0], [0.0]])
    last = torch.tensor([2.0])
    adv, ret = compute_gae(rewards, values, dones, last, gamma=0.9, lam=0.5)
    # t=2: delta = 3 + 0.9*2 - 1.5 = 3.3; A2 = 3.3
    # t=1: done -> delta = 2 - 1 = 1.0; A1 = 1.0 (no bootstrap across the episode end)
    # t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4; A0 = 1.4 + 0.9*0.5*1.0 = 1.85
    assert torch.allclose(adv.squeeze(-1), torch.tensor([1.85, 1.0, 3.3]))
    assert torch.allclose(ret, adv + values)


def test_gae_with_lambda_one_is_discounted_return_minus_value():
    torch.manual_seed(0)
    rewards = torch.rand(5, 3)
    values = torch.rand(5, 3)
    dones = torch.zeros(5, 3)
    last = torch.rand(3)
    adv, ret = compute_gae(rewards, values, dones, last, gamma=0.95, lam=1.0)
    expected = last.clone()
    for t in reversed(range(5)):
        expected = rewards[t] + 0.95 * expected
        assert torch.allclose(ret[t], expected, atol=1e-6)
