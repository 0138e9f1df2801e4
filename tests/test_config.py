import pytest

from robo_rl.config import ConfigError, PPOConfig, build, resolve_train_config
from robo_rl.tasks import task_config_class


def resolve(overrides, raw=None):
    return resolve_train_config(raw or {"task": "arm-reach"}, overrides, env_config_cls=task_config_class)


def test_defaults_and_overrides():
    cfg = resolve(["algo.learning_rate=3e-4", "sim.num_envs=8", "env.rewards.action_rate=-0.1"])
    assert cfg.algo.learning_rate == pytest.approx(3e-4)
    assert cfg.sim.num_envs == 8
    assert cfg.env.rewards["action_rate"] == -0.1
    assert cfg.env.rewards["position_error"] == -1.0  # other terms keep their defaults
    assert cfg.hash() == resolve(["algo.learning_rate=3e-4", "sim.num_envs=8", "env.rewards.action_rate=-0.1"]).hash()


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("algo.lerning_rate=1e-3", "unknown key 'algo.lerning_rate'"),
        ("sim.num_envs=many", "sim.num_envs = 'many': expected an integer"),
        ("algo.learning_rate=-1", "algo.learning_rate = -1.0: must be > 0.0"),
        ("algo.schedule=cosine", "allowed values are adaptive, fixed"),
        ("env.rewards.speed=1.0", "env.rewards.speed: unknown reward term"),
        ("policy.actor_hidden_dims=[64, x]", "policy.actor_hidden_dims[1]"),
        ("nonsense", "expected KEY=VALUE"),
    ],
)
def test_bad_values_name_the_field(override, fragment):
    with pytest.raises(ConfigError) as err:
        resolve([override])
    message = str(err.value)
    assert fragment in message
    assert "\n" not in message


def test_unknown_task_lists_valid_names():
    with pytest.raises(ConfigError, match="valid tasks: arm-reach, quadruped-walk-flat"):
        resolve([], raw={"task": "arm-reech"})


def test_build_rejects_non_mapping():
    with pytest.raises(ConfigError, match="expected a mapping"):
        build(PPOConfig, [1, 2], "algo")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--task", "arm-reech"], "unknown task 'arm-reech'; valid tasks: arm-reach, quadruped-walk-flat"),
        (["train", "--task", "arm-reach", "--set", "algo.lerning_rate=1"], "unknown key 'algo.lerning_rate'"),
        (["train", "--task", "arm-reach", "--set", "sim.num_envs=0"], "sim.num_envs = 0: must be >= 1"),
        (["train", "--task", "arm-reach", "--set", "algo.gamma=abc"], "algo.gamma = 'abc': expected a number"),
        (["train", "--config", "no/such.yaml"], "does not exist"),
        (["play", "no_such_run"], "neither a checkpoint file nor a run directory"),
    ],
)
def test_cli_user_errors_are_one_line(cli, args, fragment):
    result = cli(*args)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert fragment in result.stderr
