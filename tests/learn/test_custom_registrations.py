"""Acceptance (issue 27): an algorithm, a task, a physics backend and a transport registered from this file alone
train, resume and export through the CLI and run on the twin through the deploy core, and each registration is
shown to have been used.

Nothing outside this module names them: the registries are the only way in.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from robo_rl.cli.main import main
from robo_rl.core.config import _f
from robo_rl.deploy.policy import OnnxPolicy
from robo_rl.deploy.robot import TRANSPORTS, Transport
from robo_rl.deploy.session import open_session, rehearse
from robo_rl.deploy.state_machine import Mode
from robo_rl.deploy.transports.sim import connect_twin
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec
from robo_rl.learn.algorithms.ppo import PPO, PPOConfig
from robo_rl.learn.checkpoint import latest_checkpoint, load_run_checkpoint
from robo_rl.learn.networks.actor_critic import ActorCritic
from robo_rl.learn.runner import OnPolicyRunner
from robo_rl.sim.backend import BACKENDS
from robo_rl.sim.mujoco_cpu import MujocoCpuBackend
from robo_rl.tasks.arm_reach import ArmReachConfig, ArmReachEnv
from robo_rl.tasks.task_registry import TASKS, TaskEntry
from tests.conftest import REPO

USED: Counter[str] = Counter()
"""What the toys did, by name (this test's own record; reset by the fixture)."""


# ---------------------------------------------------------------------------------------------- toy algorithm
@dataclass(frozen=True, kw_only=True)
class ToyPPOConfig(PPOConfig):
    """PPO's fields plus one of its own."""

    toy_scale: float = _f(0.5, gt=0.0)
    """Reported by every update (proves this config class, not PPOConfig, was built)."""


class ToyPPO(PPO):
    """PPO whose updates also report `toy_scale` and count themselves."""

    def update(self) -> dict[str, float]:
        USED["algo_updates"] += 1
        return {**super().update(), "toy_scale": self.cfg.toy_scale}


class ToyRunner(OnPolicyRunner):
    """The on-policy loop, counting the runners made (proves the entry's runner class is used)."""

    def __init__(self, *args, **kwargs):
        USED["runners"] += 1
        super().__init__(*args, **kwargs)


def build_toy(cfg: ToyPPOConfig, policy: ActorCritic, spec: EnvSpec, generator: torch.Generator) -> ToyPPO:
    return ToyPPO(cfg, policy, spec.num_envs, generator)


# ---------------------------------------------------------------------------------------------- toy task
@dataclass(frozen=True, kw_only=True)
class ToyReachConfig(ArmReachConfig):
    """Arm reach with a shorter episode and its own field."""

    episode_length_s: float = 2.0
    toy_note: str = "toy"
    """A field arm-reach does not have (proves this config class was resolved)."""


class ToyReachEnv(ArmReachEnv):
    """Arm reach, counting the envs made."""

    def __init__(self, cfg: ToyReachConfig, num_envs: int, **options):
        USED["task_envs"] += 1
        super().__init__(cfg, num_envs, **options)


# ---------------------------------------------------------------------------------------------- toy backend
class ToyBackend(MujocoCpuBackend):
    """The CPU backend, counting the physics steps it takes."""

    def step(self, n_substeps: int = 1) -> None:
        USED["backend_steps"] += n_substeps
        super().step(n_substeps)


# ---------------------------------------------------------------------------------------------- toy transport
class ToyLink:
    """The MuJoCo twin behind a transport of this test's own, counting the commands it carries."""

    def __init__(self, twin):
        self.twin = twin
        self.hw = twin.hw

    def read_state(self):
        USED["transport_reads"] += 1
        return self.twin.read_state()

    def send_command(self, command):
        USED["transport_commands"] += 1
        self.twin.send_command(command)

    def close(self):
        self.twin.close()

    @property
    def time(self) -> float:
        """Robot time (a fast-forward rehearsal's clock)."""
        return self.twin.time


def connect_toy(hw, options):
    return ToyLink(connect_twin(hw, options))


@pytest.fixture
def toys():
    ppo = ALGORITHMS.get("ppo")
    entry = AlgorithmEntry(config_cls=ToyPPOConfig, policy_config_cls=ppo.policy_config_cls, runner_cls=ToyRunner,
                           build_policy=ppo.build_policy, build=build_toy)
    USED.clear()
    with (ALGORITHMS.registered("toy-ppo", entry),
          TASKS.registered("toy-reach", TaskEntry(ToyReachEnv, ToyReachConfig)),
          BACKENDS.registered("toy_cpu", ToyBackend),
          TRANSPORTS.registered("toy-link", Transport(connect=connect_toy, rehearsal=True, help="a test's link"))):
        yield
    assert "toy-ppo" not in ALGORITHMS and "toy-reach" not in TASKS and "toy_cpu" not in BACKENDS
    assert "toy-link" not in TRANSPORTS


def test_toy_algorithm_task_backend_and_transport_train_resume_export_and_deploy(toys, tmp_path, capsys):
    run_dir = tmp_path / "runs" / "toy"
    train = ["train", "--task", "toy-reach", "--algo", "toy-ppo", "--num-envs", "4", "--max-iterations", "2",
             "--run-name", "toy", "--set", f"runner.log_dir={tmp_path / 'runs'}", "--set", "sim.backend=toy_cpu",
             "--set", "algo.num_steps_per_env=4", "--set", "algo.toy_scale=0.25", "--set", "runner.eval_episodes=0",
             "--set", "runner.progress_bar=false", "--set", "policy.actor_hidden_dims=[16]",
             "--set", "policy.critic_hidden_dims=[16]"]
    assert main(train) == 0, capsys.readouterr().err
    state = load_run_checkpoint(latest_checkpoint(run_dir))
    assert state["iteration"] == 2
    config = state["config"]
    assert config["algo_name"] == "toy-ppo" and config["algo"]["toy_scale"] == 0.25
    assert config["task"] == "toy-reach" and config["env"]["toy_note"] == "toy"
    assert config["env"]["episode_length_s"] == 2.0  # the toy config's default, not arm-reach's
    assert config["sim"]["backend"] == "toy_cpu"
    assert USED["runners"] == 1 and USED["algo_updates"] == 2 and USED["task_envs"] >= 1
    steps = USED["backend_steps"]
    assert steps >= 2 * 4  # two iterations of four policy steps, each at least one physics step

    assert main(["train", "--resume", str(run_dir), "--max-iterations", "4"]) == 0, capsys.readouterr().err
    assert load_run_checkpoint(latest_checkpoint(run_dir))["iteration"] == 4
    assert USED["runners"] == 2 and USED["algo_updates"] == 4 and USED["backend_steps"] > steps

    out = tmp_path / "toy.onnx"
    envs = USED["task_envs"]
    steps = USED["backend_steps"]
    assert main(["export", str(run_dir), "--out", str(out)]) == 0, capsys.readouterr().err
    contract = OnnxPolicy(out).contract
    assert contract.extra["task"] == "toy-reach"
    assert USED["task_envs"] > envs and USED["backend_steps"] > steps  # the parity check ran the toy task and backend
    assert USED["algo_updates"] == 4  # export builds the policy, never trains

    runtime = open_session(out, REPO / "hardware" / "panda.yaml", "toy-link", realtime=False,
                           commands={"target_pos": np.array([0.5, 0.1, 0.3])})
    ramp = runtime.hw.safety.ramp_time_s
    stats = rehearse(runtime, ramp + 1.0)  # robot time: the soft start, then 1 s of the toy policy
    modes = [t.mode for t in runtime.controller.state_machine.transitions]
    assert modes == [Mode.PASSIVE, Mode.RAMP, Mode.READY, Mode.POLICY, Mode.DAMP]
    assert runtime.controller.state_machine.fault_reason is None
    assert USED["transport_commands"] == stats["ticks"] + 1 and USED["transport_reads"] >= stats["ticks"]
    runtime.robot.close()


def test_unknown_names_list_the_registered_toys(toys):
    from robo_rl.core.config import ConfigError
    from robo_rl.learn.builders import resolve_config

    with pytest.raises(ConfigError, match=r"algo_name = 'toy': unknown algorithm; valid: .*toy-ppo"):
        resolve_config({"task": "toy-reach", "algo_name": "toy"})
    with pytest.raises(ConfigError, match=r"task = 'toy': unknown task; valid: .*toy-reach, or gym:"):
        resolve_config({"task": "toy"})
    with pytest.raises(ConfigError, match=r"sim.backend = 'toy': unknown physics backend; valid: .*toy_cpu"):
        resolve_config({"task": "toy-reach", "sim": {"backend": "toy"}})
    cfg = resolve_config({"task": "toy-reach", "algo_name": "toy-ppo"})
    assert dataclasses.asdict(cfg.algo)["toy_scale"] == 0.5 and type(cfg.env) is ToyReachConfig
