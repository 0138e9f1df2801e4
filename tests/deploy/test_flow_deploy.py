"""A flow policy that executes action chunks, exported with its initial-noise input, runs on the sim twin through the
whole deploy core and succeeds as often as in simulation (the evaluation that export records in its contract),
within noise. Chunks of H = 2 actions, both run open-loop: in simulation by the chunked env, on the twin
by the deploy core's PolicyStep."""

import numpy as np
import pytest

from robo_rl.cli import main as cli
from robo_rl.deploy.session import open_session
from robo_rl.export.onnx_export import export_policy
from tests.conftest import REPO
from tests.deploy.test_deploy_closed_loop import ramp_to_policy, run_ticks

pytestmark = pytest.mark.slow  # flow-bc (~1 min), export (~6 s, mostly torch's ONNX exporter), 16 twin episodes (~2 s)

TARGETS = 16
FLOW_BC_ITERATIONS = 60
"""Of 100 gradient steps each. The simulated success of 32 episodes swings from checkpoint to checkpoint before ~60
iterations (0.31-1.0 over seeds 0-4 at 35-55 iterations; 6 of 25 below 0.6) and settles after: 0.72-0.97 over seeds
0-7 at 60 and 0.72-1.0 at 70-100 (seed 0: 0.719 at 60 and at 100)."""


def reach_from_home(session, num_targets: int) -> np.ndarray:
    """End-effector distances (num_targets,) after one training episode (3 s) per target drawn (seed 0) from the
    contract's target box, each started from the default pose as training episodes are (READY holds it for 2 s)."""
    contract, c = session.policy.policy.contract, session.controller
    rng = np.random.default_rng(0)
    low, high = np.array(contract.extra["target_low"]), np.array(contract.extra["target_high"])
    ramp_to_policy(session)
    distances = []
    for i in range(num_targets):
        if i:
            c.end_policy()
            c.hold(None)  # back to the default pose
            for _ in range(round(2.0 / contract.policy_dt)):
                c.tick(session.robot.time)
            c.start_policy()
        target = rng.uniform(low, high)
        session.policy.commands["target_pos"] = target
        run_ticks(session, round(3.0 / contract.policy_dt))
        distances.append(np.linalg.norm(session.robot.read_state().ee_pos - target))
    return np.array(distances)


def test_flow_bc_reach_policy_on_the_twin_succeeds_as_in_simulation(reach_demos_50, tmp_path):
    """Flow-BC from the 50 noisy expert demonstrations (tests.conftest.reach_demos_50, shared with BC's check)."""
    runs = tmp_path / "runs"
    assert cli.main(["train", "--task", "arm-reach", "--algo", "flow-bc", "--dataset", str(reach_demos_50),
                     "--max-iterations", str(FLOW_BC_ITERATIONS), "--set", f"runner.log_dir={runs}",
                     "--set", "runner.eval_episodes=0",
                     "--run-name", "flow", "--set", "runner.progress_bar=false",
                     "--set", "policy.horizon=2", "--set", "policy.execute_steps=2"]) == 0
    contract = export_policy(runs / "flow", tmp_path / "reach_flow.onnx", parity_envs=32)
    assert contract.extra["flow"]["noise_input_dim"] == 14  # the deploy core draws x_0 (2 x 7) for every inference
    assert contract.action.chunk == 2
    in_sim = contract.extra["train_eval"]["success"]  # 32 episodes in simulation
    session = open_session(tmp_path / "reach_flow.onnx", REPO / "hardware" / "panda.yaml", realtime=False)
    distances = reach_from_home(session, TARGETS)
    on_twin = float(np.mean(distances < 0.03))  # arm-reach's success distance
    print(f"flow reach success (chunks): twin {on_twin:.3f} ({TARGETS} targets), simulation {in_sim:.3f}; "
          f"distances {np.round(distances, 3).tolist()}")
    # the cloned policy reaches in simulation (measured 0.72 with these chunks; 0.91 re-planning every step, 0.69
    # with H = 4, E = 2: open-loop steps correct less)
    assert in_sim >= 0.6, in_sim
    # the same rate within noise: two binomial standard errors of 16 episodes at the simulated rate, plus 0.1
    tolerance = 2 * np.sqrt(in_sim * (1 - in_sim) / TARGETS) + 0.1
    assert on_twin >= in_sim - tolerance, (on_twin, in_sim, tolerance)
