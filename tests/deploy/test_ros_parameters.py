"""The policy node's parameter rules (robo_rl.deploy.ros_parameters), without rclpy: descriptors, defaults, and the
changes a configured node refuses with a reason instead of accepting and ignoring them."""

import pytest

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_parameters as rp


def test_every_parameter_has_a_descriptor_and_the_defaults_are_safe():
    assert set(names.PARAMETER_DESCRIPTIONS) == set(names.PARAMETERS)
    assert set(names.READ_ONLY_PARAMETERS) <= set(names.PARAMETERS)
    for name in names.PARAMETERS:
        fields = rp.descriptor_fields(name)
        assert fields["description"] and fields["read_only"] == (name in names.READ_ONLY_PARAMETERS)
    assert names.PARAMETERS["dry_run"] is True  # `ros2 run` without the launch file sends nothing
    assert names.PARAMETERS["estop_timeout_s"] > 0  # an e-stop heartbeat is expected unless switched off
    assert {"hardware_config", "command_interface"} <= set(names.READ_ONLY_PARAMETERS)
    assert rp.descriptor_fields("command_interface")["additional_constraints"] == (
        "one of: '', 'forward_position', 'joint_trajectory', 'pd_targets'")
    config = rp.runtime_config({})
    config.validate()
    assert config.dry_run is True and config.command_interface is None  # "": the hardware file's
    with pytest.raises(ValueError, match="parameter 'kp': not a parameter of the policy node"):
        rp.descriptor_fields("kp")


@pytest.mark.parametrize("state", ["inactive", "active"])
@pytest.mark.parametrize("name,value", [("dry_run", False), ("policy_path", "policies/other.onnx"),
                                        ("cmd_vel_timeout_s", 1.0), ("estop_timeout_s", 0.0)])
def test_a_configured_node_refuses_changes_that_would_do_nothing(state, name, value):
    why = rp.refuse_change({name: value}, names.PARAMETERS, state)
    assert why == (f"{name}: read at configure, so setting it while {state} would have no effect; cleanup "
                   "(ros2 lifecycle set /robo_rl_policy cleanup), set it, then configure again")


def test_unconfigured_accepts_valid_values_and_refuses_bad_ones():
    assert rp.refuse_change({"dry_run": False, "reset_module": "random"}, names.PARAMETERS, "unconfigured") is None
    assert rp.refuse_change({"reset_module": "teleport"}, names.PARAMETERS, "unconfigured") == (
        "reset_module 'teleport': allowed values are home, random, operator")
    assert rp.refuse_change({"estop_timeout_s": -0.1}, names.PARAMETERS, "unconfigured").startswith(
        "estop_timeout_s = -0.1: must be a finite number >= 0")
    assert rp.refuse_change({"realtime_priority": 120}, names.PARAMETERS, "unconfigured") is not None


def test_read_only_parameters_are_refused_in_every_state_and_foreign_ones_pass():
    for state in rp.LIFECYCLE_STATES:
        assert rp.refuse_change({"hardware_config": "hardware/panda.yaml"}, names.PARAMETERS, state) == (
            "hardware_config: read-only, set by the launch (relaunch the node to change it)")
        assert rp.refuse_change({"use_sim_time": True}, names.PARAMETERS, state) is None
    assert [rp.lifecycle_state(c, a) for c, a in [(False, False), (True, False), (True, True)]] == [
        "unconfigured", "inactive", "active"]


def test_rewards_are_semicolon_separated_specs_checked_like_the_cli():
    config = rp.runtime_config({"rewards": " goal_distance:sigma=0.05,threshold=0.02 ; operator ;"})
    assert config.rewards == ("goal_distance:sigma=0.05,threshold=0.02", "operator")
    config.validate()
    assert rp.runtime_config({}).rewards == ()  # the default: none
    why = rp.refuse_change({"rewards": "goal_distance;nope"}, names.PARAMETERS, "unconfigured")
    assert why is not None and why.startswith("rewards: ") and "nope" in why and "\n" not in why
    assert rp.refuse_change({"rewards": 3}, names.PARAMETERS, "unconfigured") == (
        "rewards: rewards = 3: expected a string of ';'-separated reward specs")
