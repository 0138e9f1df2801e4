"""Benchmark: a VLA on arm-pick-place-vision, SFT from scripted demonstrations, then πRL-style online RL.

In one run: record `--demos` scripted-expert episodes with the task's camera and one instruction phrasing per
episode (DART noise on the executed actions); train the VLA by flow-matching SFT (`--algo vla-sft`, `--sft-minutes`);
evaluate it on fresh layouts (a seed no recording used) with the train phrasings and with the held-out ones, and
per cube colour; then, from that SFT checkpoint, fine-tune it with each RL method (`--methods`: Flow-SDE PPO,
Flow-Noise PPO, and `grpo`: Flow-SDE with GRPO's critic-free advantages, groups of `GRPO_GROUP` worlds from one
initial state and one whole episode per iteration) for `--rl-minutes` each and evaluate again. Peak memory (max RSS
of this process) is printed. Last, the best run (the SFT or an RL run) is exported to ONNX and deployed on the twin
(`--twin-episodes`): the deploy core (the Panda's hardware file and safety filter, its camera, the ONNX encoder and
step) from the same layouts as `--twin-episodes` worlds in simulation, the success of each printed.

Targets: each RL method raises the success on the train phrasings by >= 20 points absolute (or to >= 90 %);
the held-out phrasings stay within 10 points of the train phrasings (SFT and after RL); on the twin the exported
policy's success stays within 10 points of its success in simulation. With several `--seeds` each
method runs once per seed, one after the other; the spread is printed and a target is judged on the mean (the IQM
from five seeds on, with a bootstrap interval: `robo_rl.learn.run_statistics`).

    python scripts/bench_vla.py                  # 200 demos, 20 min SFT, 60 min per RL method: ~3.5 h here
    python scripts/bench_vla.py --rl-minutes 10  # a shorter look
    python scripts/bench_vla.py --smoke          # every step once, at the smallest sizes
    python scripts/bench_vla.py --sft-run runs/vla_sft --methods flow-sde --seeds 0 1   # RL from a longer SFT run
    python scripts/bench_vla.py --sft-run runs/vla_sft --methods flow-sde --rl-set policy.value_input=privileged
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from robo_rl.cli import main as cli
from robo_rl.core.config import load_yaml
from robo_rl.learn.builders import build_env, load_policy, load_trained, resolve_config
from robo_rl.learn.evaluation import inference_actor, run_episodes
from robo_rl.learn.run_statistics import summarize
from robo_rl.tasks.task_env import episode_steps

TASK = "arm-pick-place-vision"
SFT_PRESET = "sim_configs/arm-pick-place-vision-vla-sft-aux.yaml"
RL_PRESET = "sim_configs/arm-pick-place-vision-vla-rl-aux.yaml"
EVAL_SEED = 9876
"""Evaluation layouts: a seed neither the recording (0) nor training uses."""
SMOKE = ("env.episode_length_s=0.3", "policy.width=32", "policy.heads=2", "policy.prefix_layers=1",
         "policy.expert_layers=1")
"""`--smoke`: a tiny VLA on 0.3 s episodes."""
SMOKE_SFT = ("algo.num_steps_per_env=2", "algo.batch_size=8", "algo.aux_layouts=8")
SMOKE_RL = ("algo.num_steps_per_env=2", "algo.num_mini_batches=2", "algo.num_learning_epochs=1",
            "algo.critic_warmup_iterations=1", "runner.max_iterations=2")
METHODS = {"flow-sde": "flow-sde", "flow-noise": "flow-noise", "grpo": "flow-sde + GRPO"}
"""`--methods` name -> what it runs (its label)."""
GRPO_GROUP = 8
"""GRPO: worlds per group of shared initial states (the preset's 64 worlds: 8 groups)."""
TWIN_HARDWARE = "hardware/panda_gripper.yaml"
TWIN_SCENE = "envs/panda_pick_vision.xml"
"""The twin the exported VLA is deployed on: the Panda's hardware file as shipped (safety filter, setpoint limits)
and the scene whose camera the task renders."""
TWIN_SEED = EVAL_SEED + 1
GRPO_ACTOR_LR = 5e-6
"""GRPO's actor rate (the preset's 3e-6 is PPO's: its critic-based advantages are noisier; docs/vla.md)."""


def run_cli(argv: list[str]) -> None:
    code = cli.main(argv)
    if code:
        raise SystemExit(f"robo-rl {' '.join(argv[:3])} ... failed with exit code {code}")


def sets(overrides: tuple[str, ...]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def _yaml_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_yaml_value(v) for v in value) + "]"
    return str(value)


def sft_policy_overrides(sft: Path) -> tuple[str, ...]:
    """The policy settings vla-rl must share with its SFT run (its registry entry's `same_policy_fields`), as the
    SFT run `sft` has them: RL from any SFT run (`--sft-run`), whatever encoder and pooling it trained."""
    from robo_rl.learn.algorithm_registry import ALGORITHMS

    _, _, cfg = load_trained(sft)
    fields = ALGORITHMS.get("vla-rl").init_from.same_policy_fields
    return tuple(f"policy.{f}={_yaml_value(getattr(cfg.policy, f))}" for f in fields)


def method_overrides(method: str, overrides: tuple[str, ...]) -> tuple[str, ...]:
    """The RL preset's settings for `method` on top of `overrides`; GRPO runs Flow-SDE's likelihood in groups of
    GRPO_GROUP worlds, one whole episode (all its decisions) per iteration, at GRPO_ACTOR_LR."""
    if method != "grpo":
        return (f"algo.method={method}",)
    cfg = resolve_config(load_yaml(RL_PRESET), list(overrides))
    decisions = -(-episode_steps(cfg.env) // cfg.policy.execute_steps)  # ceil
    return ("algo.method=flow-sde", "algo.advantage=grpo", f"env.reset_group_size={GRPO_GROUP}",
            f"algo.num_steps_per_env={decisions}", f"algo.actor_learning_rate={GRPO_ACTOR_LR}")


EXECUTION_FIELDS = ("execute_steps", "initial_noise")
"""How a chain is run (not what it learned): the SFT baseline is measured the way the RL preset runs its chains."""


def rl_execution() -> dict[str, object]:
    """The RL preset's `EXECUTION_FIELDS` (its policy settings, the defaults where it sets none)."""
    cfg = resolve_config(load_yaml(RL_PRESET), [])
    return {f: getattr(cfg.policy, f) for f in EXECUTION_FIELDS}


@torch.no_grad()
def success_by_instruction(run: Path, episodes: int, split: str, execution: dict[str, object] | None = None
                           ) -> tuple[float, dict[str, float]]:
    """(success rate, success per cube colour) of the run's deterministic policy, one episode in each of `episodes`
    fresh worlds whose instructions are drawn from `split` ("train" or "heldout"); `execution` replaces the run's
    policy settings of that name (`EXECUTION_FIELDS`)."""
    _, state, cfg = load_trained(run)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, instruction_split=split),
                              policy=dataclasses.replace(cfg.policy, **(execution or {})))
    env = build_env(cfg, num_envs=episodes, seed=EVAL_SEED)
    try:
        metrics = run_episodes(env, inference_actor(load_policy(state, cfg, env)))["metrics"]
        names = env.instruction_set.goal_names
    finally:
        env.close()
    return metrics["success"], {c: metrics[f"success/{c}"] for c in names if f"success/{c}" in metrics}


def evaluate(label: str, run: Path, episodes: int, execution: dict[str, object] | None = None) -> tuple[float, float]:
    train, per = success_by_instruction(run, episodes, "train", execution)
    held, per_held = success_by_instruction(run, episodes, "heldout", execution)
    colours = ", ".join(f"{c} {v:.2f}/{per_held.get(c, float('nan')):.2f}" for c, v in per.items())
    print(f"{label}: success {train:.3f} with train phrasings, {held:.3f} with held-out ones (per colour, train/held-"
          f"out: {colours})", flush=True)
    return train, held


def twin_layouts(cfg, episodes: int) -> list[tuple[np.ndarray, np.ndarray, str, str]]:
    """(qpos (nq,), target (3,), instruction, goal cube body) of each of `episodes` worlds' first episode at
    TWIN_SEED; `cfg` without initial joint noise (the twin starts at the home pose). `run_episodes` on an env built
    the same way runs these layouts."""
    env = build_env(cfg, num_envs=episodes, seed=TWIN_SEED)
    try:
        env.reset()
        b, texts = env.backend, env.instruction_set.texts
        return [(b.qpos[i].numpy().astype(np.float64), env.target[i].numpy().astype(np.float64),
                 texts[int(env.instruction[i])], cfg.env.cube_bodies[int(env.goal[i])]) for i in range(episodes)]
    finally:
        env.close()


def twin_episode(policy: Path, layout: tuple[np.ndarray, np.ndarray, str, str], cfg) -> tuple[bool, str | None]:
    """One episode of the exported `policy` on the twin through the deploy core, from `layout`: ramp to READY, then
    the task's episode length in POLICY. (success as the task scores it: the goal cube within `success_distance` of
    the target, at rest; the safety fault that stopped the policy, or None). A fault ends the episode failed."""
    from robo_rl.deploy.session import open_session
    from robo_rl.deploy.state_machine import Mode

    qpos, target, text, cube = layout
    session = open_session(policy, TWIN_HARDWARE, realtime=False, instruction=text, scene=TWIN_SCENE,
                           warn=lambda _: None)
    robot, c = session.robot, session.controller
    try:
        robot.reset("home", qpos=qpos)
        robot.data.mocap_pos[0] = target  # the place target, drawn in the camera's image
        c.request_ramp()
        while c.mode is not Mode.READY:
            c.tick(robot.time)  # fast mode: the clock is simulation time
        c.start_policy()
        for _ in range(episode_steps(cfg.env)):
            c.tick(robot.time)
            if c.mode is not Mode.POLICY:  # the safety layer stopped the policy (the robot is damped)
                return False, c.last_fault or c.mode.name
        m, d = robot.model, robot.data
        body = m.body(cube).id
        dof = int(m.jnt_dofadr[m.body_jntadr[body]])
        distance = float(np.linalg.norm(d.xpos[body] - target))
        speed = float(np.linalg.norm(d.qvel[dof:dof + 3]))
        return distance < cfg.env.success_distance and speed < cfg.env.rest_speed, None
    finally:
        robot.close()


def twin_against_sim(run: Path, episodes: int, out: Path) -> tuple[float, float]:
    """(success in simulation, success on the twin) of `run`'s policy, exported to `out`, from the same layouts."""
    from robo_rl.export.onnx_export import export_policy

    export_policy(run, out, parity_envs=2, parity_steps=4, evaluate=False)
    _, state, cfg = load_trained(run)
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, init_joint_noise=0.0))
    env = build_env(cfg, num_envs=episodes, seed=TWIN_SEED)
    try:
        sim = run_episodes(env, inference_actor(load_policy(state, cfg, env)))["metrics"]["success"]
    finally:
        env.close()
    t0 = time.perf_counter()
    outcomes = [twin_episode(out, layout, cfg) for layout in twin_layouts(cfg, episodes)]
    twin = float(np.mean([ok for ok, _ in outcomes]))
    faults = Counter(fault for _, fault in outcomes if fault is not None)
    print(f"deployed ({run.name}, {out.name}): success {sim:.3f} in simulation, {twin:.3f} on the twin through the "
          f"deploy core ({episodes} layouts; stopped by a safety fault: {dict(faults) or 'none'}; the twin's "
          f"episodes in {time.perf_counter() - t0:.0f} s)", flush=True)
    return sim, twin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demos", type=int, default=200, help="expert episodes")
    parser.add_argument("--noise", type=float, default=0.2, help="DART noise on the executed expert actions")
    parser.add_argument("--sft-minutes", type=float, default=20.0)
    parser.add_argument("--rl-minutes", type=float, default=60.0, help="training time per RL method")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--episodes", type=int, default=64, help="evaluation episodes per phrasing group")
    parser.add_argument("--seed", type=int, default=0, help="training seed of the SFT")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds of each RL method, run one "
                        "after the other from the same SFT run; their spread is reported (IQM from 5 on)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="", help="keep the runs here (default: a temporary folder); an RL run "
                        "already there is evaluated again, not trained again")
    parser.add_argument("--sft-run", default="", help="start from this vla-sft run (e.g. one trained for hours, "
                        "resumed across sessions) instead of recording and SFT here")
    parser.add_argument("--twin-episodes", type=int, default=32, help="episodes of the exported best run on the "
                        "twin through the deploy core, and in simulation from the same layouts (0: none)")
    parser.add_argument("--rl-set", action="append", default=[], metavar="KEY=VALUE", help="a setting of every RL "
                        "run on top of the preset's and the method's (e.g. policy.value_input=privileged); repeatable")
    args = parser.parse_args()
    if args.smoke:
        args.demos, args.episodes, args.methods, args.twin_episodes = 1, 2, list(METHODS), 1
        torch.set_num_threads(1)
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_vla_"))
    common = ["--set", f"runner.log_dir={root}", "--set", "runner.eval_episodes=0", "--set",
              "runner.progress_bar=false", *(sets(SMOKE) if args.smoke else [])]

    sft = Path(args.sft_run) if args.sft_run else root / "sft"
    if not args.sft_run:
        t0 = time.perf_counter()
        run_cli(["record", "--task", TASK, "--expert", "--cameras", "scene", "--episodes", str(args.demos),
                 "--noise", str(args.noise), "--num-envs", str(min(args.demos, 16)), "--out", str(root / "demos")])
        print(f"recording: {time.perf_counter() - t0:.0f} s", flush=True)
        run_cli(["train", "--config", SFT_PRESET, "--dataset", str(root / "demos"), "--max-time",
                 str(args.sft_minutes * 60), *common, "--seed", str(args.seed),
                 *(sets(SMOKE_SFT) if args.smoke else []), "--run-name", "sft"])
    _, state, _ = load_trained(sft)
    print(f"SFT: {int(state['iteration'])} iterations in {float(state['train_time']):.0f} s ({sft})", flush=True)
    execution = rl_execution()  # the SFT chain run as the RL runs run theirs
    sft_train, sft_held = evaluate(f"SFT ({', '.join(f'{k} {v}' for k, v in execution.items())})", sft,
                                   args.episodes, execution)

    results: dict[str, list[tuple[float, float]]] = {}  # method -> (train, held-out) success per seed
    for method in args.methods:
        for seed in args.seeds:
            name = f"rl_{method}_seed{seed}"
            smoke = (*SMOKE, *SMOKE_RL) if args.smoke else ()
            if args.out and (root / name / "config.yaml").is_file():
                print(f"{root / name}: kept from an earlier run of this benchmark (--out), not trained again")
            else:
                run_cli(["train", "--config", RL_PRESET, "--set", f"algo.pretrained={sft}", "--max-time",
                         str(args.rl_minutes * 60), *common, "--seed", str(seed),
                         *(sets(SMOKE_RL) if args.smoke else []), *sets(sft_policy_overrides(sft)),
                         *sets(method_overrides(method, smoke)), *sets(args.rl_set), "--run-name", name])
            _, state, _ = load_trained(root / name)
            print(f"{METHODS[method]}, seed {seed}: {int(state['iteration'])} iterations in "
                  f"{float(state['train_time']):.0f} s", flush=True)
            results.setdefault(method, []).append(evaluate(f"{METHODS[method]}, seed {seed}", root / name,
                                                           args.episodes))

    twin = None
    if args.twin_episodes:
        runs = [(sft_train, sft), *((train, root / f"rl_{m}_seed{seed}") for m, per_seed in results.items()
                                    for seed, (train, _) in zip(args.seeds, per_seed, strict=True))]
        best = max(runs, key=lambda r: r[0])[1]  # the SFT on a tie
        twin = twin_against_sim(best, args.twin_episodes, root / "deployed.onnx")

    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"runs in {root}; peak memory {peak_gb:.2f} GB")
    print(f"TARGET vla_heldout_gap_points_sft measured={100 * abs(sft_train - sft_held):.1f} goal=<=10 "
          f"{'PASS' if abs(sft_train - sft_held) <= 0.1 else 'FAIL'}")
    for method, runs in results.items():
        gains = summarize([train - sft_train for train, _ in runs])  # judged on the IQM from 5 seeds, else the mean
        success = summarize([train for train, _ in runs])
        gaps = summarize([abs(train - held) for train, held in runs])
        print(f"{METHODS[method]}: success gain (points) over {gains.describe(scale=100)}")
        key = method.replace("-", "_")
        ok = 100 * gains.central >= 20.0 or success.central >= 0.9
        print(f"TARGET vla_{key}_success_gain_points measured={100 * gains.central:.1f} goal=>=20 "
              f"{'PASS' if ok else 'FAIL'}")
        print(f"TARGET vla_heldout_gap_points_{key} measured={100 * gaps.central:.1f} goal=<=10 "
              f"{'PASS' if gaps.central <= 0.1 else 'FAIL'}")
    if twin is not None:
        gap = abs(twin[0] - twin[1])
        print(f"TARGET vla_twin_success_gap_points measured={100 * gap:.1f} goal=<=10 "
              f"{'PASS' if gap <= 0.1 else 'FAIL'}")
    print(f"TARGET vla_peak_memory_gb measured={peak_gb:.2f} goal=<=8 {'PASS' if peak_gb <= 8 else 'FAIL'}")


if __name__ == "__main__":
    main()
