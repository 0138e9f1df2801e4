"""Action chunks executed open-loop: the chunked VecEnv (robo_rl.adapters.chunked), `TaskEnv.reset_worlds`, ReinFlow on
chunks through the CLI, and the chunk's export and execution in the deploy core."""

import dataclasses

import numpy as np
import pytest
import torch

from robo_rl.adapters.chunked import ChunkedVecEnv, chunked
from robo_rl.cli import main as cli
from robo_rl.core.config import ConfigError
from robo_rl.tasks.task_registry import make_env, task_config_class

N, E = 3, 3


def _reach(episode_steps: int):
    cfg = task_config_class("arm-reach")()
    env = make_env("arm-reach", N, cfg=cfg, seed=5)
    return make_env("arm-reach", N, cfg=dataclasses.replace(cfg, episode_length_s=episode_steps * env.dt), seed=5)


def test_a_chunk_sums_rewards_up_to_the_end_of_the_episode_and_restarts_it():
    plain, inner = _reach(5), _reach(5)  # episodes of 5 steps: the second chunk (steps 4-6) ends at its 2nd step
    env = chunked(inner, E)
    assert isinstance(env, ChunkedVecEnv) and chunked(plain, 1) is plain
    assert env.action_dim == plain.action_dim and env.obs_dims == plain.obs_dims  # the wrapped env's
    torch.testing.assert_close(env.reset(random_start=False)["policy"], plain.reset(random_start=False)["policy"])
    g = torch.Generator().manual_seed(0)
    chunks = [torch.randn(N, E, plain.action_dim, generator=g) * 0.3 for _ in range(2)]
    ref = [plain.step(chunks[c][:, j]) for c in range(2) for j in range(E)]  # (obs, reward, term, trunc, info)

    obs, reward, terminated, truncated, info = env.step(chunks[0])
    torch.testing.assert_close(reward, ref[0][1] + ref[1][1] + ref[2][1])
    torch.testing.assert_close(obs["policy"], ref[2][0]["policy"])
    assert not (terminated | truncated).any() and info["episode"] == {}

    obs, reward, terminated, truncated, info = env.step(chunks[1])
    assert ref[4][3].all() and not ref[3][3].any()  # the plain env timed out at step 5
    torch.testing.assert_close(reward, ref[3][1] + ref[4][1])  # step 6 ran in the next episode: not counted
    assert truncated.all() and not terminated.any()
    torch.testing.assert_close(info["final_obs"]["critic"], ref[4][4]["final_obs"]["critic"])  # exact bootstrapping
    assert sorted(info["episode"]["ids"].tolist()) == list(range(N))  # each episode's end, once
    assert (inner.episode_steps == 0).all()  # restarted after the chunk: a fresh episode starts a fresh chunk
    assert info["log"] == ref[4][4]["log"] and info["log"]  # the episodes' logs, as the plain env logged them
    with pytest.raises(ValueError, match=r"action chunks have shape \(3, 7\); expected \(3, 3, 7\)"):
        env.step(torch.zeros(N, plain.action_dim))


def test_reset_worlds_renews_only_the_given_worlds():
    env = make_env("quadruped-walk-flat", 4, seed=1)  # noisy policy terms: the other rows must keep their draws
    env.reset(random_start=False)
    for _ in range(3):
        obs, *_ = env.step(torch.zeros(4, env.action_dim))
    before = {k: v.clone() for k, v in obs.items()}
    new = env.reset_worlds(torch.tensor([1, 3]), obs)
    assert env.episode_steps.tolist() == [3, 0, 3, 0]
    for k in ("policy", "critic"):
        torch.testing.assert_close(new[k][[0, 2]], before[k][[0, 2]])
    assert not torch.allclose(new["critic"][[1, 3]], before["critic"][[1, 3]])


def test_chunks_need_an_env_that_resets_single_worlds_and_fit_in_the_horizon():
    with pytest.raises(ValueError, match="resets single worlds"):
        ChunkedVecEnv(object(), 2)
    from robo_rl.learn.algorithms.bc import FlowPolicyConfig

    with pytest.raises(ConfigError, match=r"policy.execute_steps = 3: must be <= policy.horizon = 2"):
        FlowPolicyConfig(horizon=2, execute_steps=3).validate()


def call(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


class _Recording:
    """An OnnxPolicy that keeps what each inference returned."""

    def __init__(self, policy):
        self.policy, self.outputs = policy, []
        self.contract, self.path = policy.contract, policy.path

    def __call__(self, obs, inputs=None):
        self.outputs.append(self.policy(obs, inputs))
        return self.outputs[-1]


def test_reinflow_trains_on_chunks_and_the_deploy_core_executes_them(tmp_path, capsys):
    """flow-bc with H = 4, E = 2 -> ReinFlow on chunks -> export: the contract says chunk 2, the graph outputs (2, A)
    and the deploy core infers on every 2nd tick, executing the chunk's actions in order."""
    from robo_rl.deploy.hardware import load_hardware
    from robo_rl.deploy.policy import OnnxPolicy, PolicyStep
    from robo_rl.export.onnx_export import export_policy
    from tests.conftest import REPO
    from tests.deploy.test_deploy_parity import robot_state_of

    demos = tmp_path / "demos"
    assert call(["record", "--task", "arm-reach", "--expert", "--episodes", "2", "--num-envs", "2",
                 "--out", str(demos)]) == 0
    common = ["--task", "arm-reach", "--num-envs", "2", "--set", f"runner.log_dir={tmp_path}",
              "--set", "runner.eval_episodes=2", "--set", "runner.progress_bar=false",
              "--set", "policy.hidden_dims=[16]", "--set", "policy.horizon=4", "--set", "policy.execute_steps=2"]
    assert call(["train", "--algo", "flow-bc", "--dataset", str(demos), "--max-iterations", "1",
                 "--set", "algo.num_steps_per_env=2", *common, "--run-name", "fbc"]) == 0
    assert call(["train", "--algo", "reinflow", "--max-iterations", "2", "--set", f"algo.pretrained={tmp_path / 'fbc'}",
                 "--set", "algo.num_steps_per_env=8", "--set", "algo.critic_warmup_iterations=0",
                 "--set", "algo.num_mini_batches=2", *common, "--run-name", "rf"]) == 0
    contract = export_policy(tmp_path / "rf", tmp_path / "rf.onnx", parity_envs=2, parity_steps=2, evaluate=False)
    assert contract.action.chunk == 2 and contract.extra["flow"]["execute_steps"] == 2
    onnx = OnnxPolicy(tmp_path / "rf.onnx")
    actions, targets = onnx(np.zeros(contract.obs_dim, dtype=np.float32))
    assert actions.shape == (2, 7) and targets.shape == (2, 7)

    hw = load_hardware(REPO / "hardware" / "panda.yaml")
    env = make_env("arm-reach", 1, seed=0)
    env.reset(random_start=False)
    state = robot_state_of(env, 0, hw)
    recording = _Recording(onnx)
    step = PolicyStep(recording, hw)
    executed = []
    for _ in range(5):
        step(state)
        executed.append(step.last_action.copy())
    assert len(recording.outputs) == 3  # ticks 1, 3 and 5 infer
    for tick, (chunk, row) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]):
        np.testing.assert_array_equal(executed[tick], recording.outputs[chunk][0][row])  # the chunk's actions, in order
    step.reset()
    step(state)
    assert len(recording.outputs) == 4  # a new POLICY phase starts a new chunk
    capsys.readouterr()
    assert call(["play", str(tmp_path / "rf"), "--episodes", "2"]) == 0
    assert "evaluation: 2 episodes" in capsys.readouterr().out


def test_videos_render_every_env_step_inside_a_chunk():
    from robo_rl.learn.evaluation import run_episodes
    from robo_rl.learn.policy_video import record_episodes

    def idle(obs):
        return torch.zeros(N, E, 7)

    frames = []
    result = run_episodes(chunked(_reach(5), E), idle, video_frames=frames)
    plain_frames = []
    run_episodes(_reach(5), lambda obs: torch.zeros(N, 7), video_frames=plain_frames)
    assert len(frames) == len(plain_frames) == 5 and result["episodes"] == N  # one frame per env step, as unchunked
    chunked_video = record_episodes(chunked(_reach(5), E), idle, 2, size=(32, 24))
    assert len(chunked_video) == len(record_episodes(_reach(5), lambda obs: torch.zeros(N, 7), 2, size=(32, 24))) == 10


def test_a_chunked_vision_env_renders_only_the_images_that_are_read():
    """Inside a chunk only the ending worlds' final images are rendered; the chunk's last observation and the final
    observations are the images the plain env renders at those steps."""
    cfg = dataclasses.replace(task_config_class("arm-pick-place-vision")(), episode_length_s=0.1)  # 5 steps
    plain = make_env("arm-pick-place-vision", 2, cfg=cfg, seed=3)
    inner = make_env("arm-pick-place-vision", 2, cfg=cfg, seed=3)
    env = chunked(inner, 3)
    assert torch.equal(env.reset(random_start=False)["image"], plain.reset(random_start=False)["image"])
    calls = []
    render = inner.backend.render_cameras
    inner.backend.render_cameras = lambda *a, **k: calls.append(k.get("ids")) or render(*a, **k)
    actions = torch.zeros(2, 3, plain.action_dim)
    ref = [plain.step(actions[:, j % 3]) for j in range(6)]
    obs, _, _, truncated, info = env.step(actions)
    assert torch.equal(obs["image"], ref[2][0]["image"])
    assert calls == [None]  # one full render, after the chunk's last step
    calls.clear()
    obs, _, _, truncated, info = env.step(actions)  # the episodes end at the chunk's 2nd step (step 5)
    assert truncated.all()
    assert torch.equal(info["final_obs"]["image"], ref[4][4]["final_obs"]["image"])  # rendered for the bootstrap
    assert sorted(calls[0].tolist()) == [0, 1]  # step 5: the ending worlds only
    assert sum(c is None for c in calls) == 1  # and one full render, after the chunk's last step
    assert inner.defer_images is False
