import os

import pytest

from robo_rl.core.config import ConfigError, build, load_yaml
from robo_rl.learn.algorithm_registry import ALGORITHMS, algorithm_configs
from robo_rl.learn.algorithms.ppo import PPOConfig
from robo_rl.learn.train_config import resolve_train_config
from robo_rl.tasks.task_registry import task_config_class
from tests.conftest import REPO


def resolve(overrides, raw=None):
    return resolve_train_config(raw or {"task": "arm-reach"}, overrides, env_config_cls=task_config_class,
                                algo_configs=algorithm_configs)


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
    with pytest.raises(ConfigError, match="task = 'arm-reech': unknown task; valid: arm-reach, quadruped-walk-flat"):
        resolve([], raw={"task": "arm-reech"})


def test_build_rejects_non_mapping():
    with pytest.raises(ConfigError, match="expected a mapping"):
        build(PPOConfig, [1, 2], "algo")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--task", "arm-reech"], "task = 'arm-reech': unknown task; valid: arm-reach, quadruped-walk-flat"),
        (["train", "--task", "arm-reach", "--set", "algo.lerning_rate=1"], "unknown key 'algo.lerning_rate'"),
        (["train", "--task", "arm-reach", "--set", "sim.num_envs=0"], "sim.num_envs = 0: must be >= 1"),
        (["train", "--task", "arm-reach", "--set", "algo.gamma=abc"], "algo.gamma = 'abc': expected a number"),
        (["train", "--config", "no/such.yaml"], "does not exist"),
        (["play", "no_such_run"], "neither a checkpoint file nor a run directory"),
    ],
)
def test_cli_user_errors_are_one_line(capsys, monkeypatch, args, fragment):
    """`robo-rl ARGS` returns 2 with one line on stderr (in this process: tests/cli/test_cli_errors.py checks the
    real process's exit code)."""
    from robo_rl.cli.main import main
    from robo_rl.sim import TRAINING_ENV_DEFAULTS

    for key in TRAINING_ENV_DEFAULTS:  # the command sets these for its process: restored after this test
        if key in os.environ:
            monkeypatch.setenv(key, os.environ[key])
        else:
            monkeypatch.delenv(key, raising=False)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().count("\n") == 0, err
    assert fragment in err


def _is_float(tp):
    import typing

    return tp is float or typing.get_args(tp)[:1] == (float,)


def _float_fields():
    """(task, algorithm, dotted path) of every float or tuple-of-float field in the train, algorithm, policy and
    task configs (every registered algorithm's on arm-reach)."""
    import dataclasses
    import typing

    from robo_rl.learn.train_config import RunnerConfig, TrainConfig
    from robo_rl.sim.sim_config import SimConfig
    from robo_rl.tasks.task_registry import TASKS

    out = []
    for prefix, cls in [("", TrainConfig), ("sim", SimConfig), ("runner", RunnerConfig)]:
        out += [("arm-reach", "ppo", f"{prefix}.{n}".lstrip(".")) for n, tp in typing.get_type_hints(cls).items()
                if _is_float(tp)]
    for algo, entry in ALGORITHMS.items():
        for prefix, cls in [("algo", entry.config_cls), ("policy", entry.policy_config_cls)]:
            out += [("arm-reach", algo, f"{prefix}.{n}") for n, tp in typing.get_type_hints(cls).items()
                    if _is_float(tp)]
    for task, (_env, cfg_cls) in TASKS.items():
        for f in dataclasses.fields(cfg_cls):
            if _is_float(typing.get_type_hints(cfg_cls)[f.name]):
                out.append((task, "ppo", f"env.{f.name}"))
    return out


FLOAT_FIELDS = _float_fields()


def test_float_fields_are_found():
    paths = {p for _, _, p in FLOAT_FIELDS}
    assert {"algo.entropy_coef", "policy.init_noise_std", "env.target_low", "env.lin_vel_x"} <= paths
    assert {"algo.tau", "algo.init_alpha", "policy.action_bound", "policy.v_min"} <= paths  # SAC's


@pytest.mark.parametrize("bad", [".nan", ".inf", "-.inf", "nan", "inf"])
@pytest.mark.parametrize("task, algo, path", FLOAT_FIELDS)
def test_every_float_field_refuses_non_finite_values(task, algo, path, bad):
    raw = {"task": task, "algo_name": algo}
    current = resolve([], raw=raw).to_dict()
    node = current
    for key in path.split("."):
        node = node[key]
    value = f"[{bad}{', 0.5' * (len(node) - 1)}]" if isinstance(node, list) else bad
    with pytest.raises(ConfigError, match="must be a finite number") as err:
        resolve([f"{path}={value}"], raw=raw)
    assert path in str(err.value)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("device=cuda", "device = 'cuda': the learner must be on sim.device ('cpu'), where the env's tensors are"),
        ("sim.device=cuda", "sim.device = 'cuda': the mujoco_cpu backend runs on the cpu only"),
        ("sim.backend=isaaclab", "sim.backend = 'isaaclab': unknown physics backend; valid: mujoco_cpu, mujoco_warp"),
        ("algo.num_mini_batches=97", "algo.num_mini_batches = 97: must be <= the batch size"),
        ("policy.actor_hidden_dims=[64, -1]", "policy.actor_hidden_dims[1] = -1: hidden widths must be 1 .. 65536"),
        ("policy.critic_hidden_dims=[100000000]", "policy.critic_hidden_dims[0] = 100000000"),
        ("runner.run_name=a/b", "runner.run_name = 'a/b': must be a single folder name"),
        ("algo.gamma={0.9", "override algo.gamma = '{0.9': not a valid YAML value"),
        ("seed=99999999999", "seed = 99999999999: must be <= 2147483647"),
    ],
)
def test_cross_field_and_unsupported_values(override, fragment):
    with pytest.raises(ConfigError) as err:
        resolve(["sim.num_envs=8", "algo.num_steps_per_env=12", override])
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_num_mini_batches_equal_to_the_batch_is_allowed():
    assert resolve(["sim.num_envs=8", "algo.num_steps_per_env=12", "algo.num_mini_batches=96"]).algo.num_mini_batches


def test_resume_changes_lists_only_fields_that_may_not_change():
    from robo_rl.learn.train_config import RESUMABLE_FIELDS, resume_changes

    old = resolve([])
    allowed = resolve(["runner.max_iterations=7", "runner.max_time_s=3", "runner.save_interval=2",
                       "runner.video_interval=5", "runner.video_at_end=true", "runner.video_episodes=2",
                       "runner.eval_episodes=0", "runner.progress_bar=false", "algo.precision=bfloat16"])
    assert resume_changes(old, allowed) == []
    assert len(RESUMABLE_FIELDS) == 9
    changed = resolve(["sim.num_envs=7", "policy.actor_hidden_dims=[3]", "env.rewards.action_rate=-1", "seed=4"])
    assert resume_changes(old, changed) == [
        "env.rewards.action_rate (-0.005 -> -1.0)",
        "policy.actor_hidden_dims ([256, 128, 64] -> [3])",
        "seed (0 -> 4)",
        "sim.num_envs (1024 -> 7)",
    ]


def test_task_validation_is_a_config_error():
    with pytest.raises(ConfigError, match=r"env.lin_vel_y = \[0.5, -0.5\]: expected \[low, high\]"):
        resolve(["env.lin_vel_y=[0.5, -0.5]"], raw={"task": "quadruped-walk-flat"})
    with pytest.raises(ConfigError, match="env.model = 'envs/none.xml': MJCF file .* not found"):
        resolve(["env.model=envs/none.xml"])


def test_load_yaml_of_a_directory_or_binary_file(tmp_path):
    from robo_rl.core.config import load_yaml

    with pytest.raises(ConfigError, match="is a directory"):
        load_yaml(tmp_path)
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="cannot be read as text"):
        load_yaml(tmp_path / "bin.yaml")


def test_partial_section_overrides_the_fields_own_default():
    """quadruped-walk-rough's randomization default pushes; setting one other field keeps its pushes."""
    from robo_rl.tasks.task_registry import task_config_class

    cfg = resolve_train_config({"task": "quadruped-walk-rough"}, ["env.randomization.friction_scale=[0.5,1.5]"],
                               env_config_cls=task_config_class)
    assert cfg.env.randomization.friction_scale == (0.5, 1.5)
    assert cfg.env.randomization.push_interval_s == 15.0 and cfg.env.randomization.push_velocity == 1.0


@pytest.mark.parametrize("preset", sorted((REPO / "sim_configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_preset_resolves(preset):
    from robo_rl.learn.builders import resolve_config

    cfg = resolve_config(load_yaml(preset))  # raises on an unknown key or a bad value
    stem = preset.stem
    if stem.endswith("-rlpd"):  # SAC with RLPD's recipe, given with --config
        assert cfg.algo_name == "sac" and cfg.algo.demo_ratio > 0, stem
    elif cfg.algo_name != "ppo":  # <task>-<algo>.yaml is the default preset of --algo <algo>; <task>-<algo>-<variant>
        # .yaml a variant of it, given with --config
        assert (stem.endswith(f"-{cfg.algo_name}") or f"-{cfg.algo_name}-" in stem
                or cfg.task.startswith("gym:")), (stem, cfg.algo_name)
