"""Export a trained policy to a self-describing ONNX file.

The graph holds the observation normaliser, the algorithm's deterministic actor (`inference_policy()`:
PPO's Gaussian mean, SAC's bound * tanh(mean)) and the action post-processing (clip, and the
stateless joint-space action terms):

    inputs:  obs            (B, O) float32, terms in contract order
             noise          (B, D) float32, a flow policy's x_0 (contract extra.flow.noise_input_dim; absent: 0)
             image:<camera> (B, 3, H, W) uint8 RGB, a VLA's camera frames (contract inputs)
             instruction    (B, E) float32, a VLA's instruction embedding (contract inputs), computed by the
                            instruction encoder written beside the policy: <name>.instruction.onnx and
                            <name>.instruction.tokenizer.json (`robo_rl.export.instruction_export`)
    outputs: actions        (B, A) float32, the clipped policy action (what `last_action` observes)
             joint_targets  (B, J) float32, contract joint order: offset + scale * a for the action terms
                            whose record gives a `graph_affine` (joint_position_offset: the default pose;
                            joint_position: params.offset); NaN for the joints of terms that need the
                            robot's state (ee_delta: the measured joints; gripper: the previous target)

The deploy side computes every joint target itself from `actions` and the measured state
(`robo_rl.deploy.actions`); `joint_targets` serves consumers of joint-space policies that run the
graph alone (and version-1 readers), and NaN makes a misuse fail safe (the safety filter damps on NaN).

The deploy contract is written into the ONNX `metadata_props` (key `robo_rl.core.contract`) and beside
the file as `<name>.json`. Before anything is written, onnxruntime and torch are compared on
observations recorded from the task; on a mismatch nothing is written.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from robo_rl.core.contract import INSTRUCTION, DeployContract, ObsTerm, image_input
from robo_rl.core.files import write_with_companion
from robo_rl.deploy.instruction import MAX_TOKENS, tokenizer_path
from robo_rl.deploy.policy import CONTRACT_KEY, INPUT_NAME, OUTPUT_NAMES, graph_input_names
from robo_rl.export import OPSET
from robo_rl.export.instruction_export import export_instruction_encoder
from robo_rl.learn.builders import build_env, load_policy, load_trained
from robo_rl.learn.checkpoint import check_output_file
from robo_rl.learn.evaluation import inference_actor, rollout, run_episodes
from robo_rl.learn.networks.text_encoder import MINILM_NAME
from robo_rl.learn.run_folder import read_provenance
from robo_rl.sim.render import RenderSettings
from robo_rl.terms import ACTION_TERMS, validate_contract

PARITY_TOLERANCE = 1e-5
VLA_PARITY_TOLERANCE = 1e-4
"""A VLA's graph (an image encoder, transformers and K unrolled steps) is compared to this (float32)."""


class ExportedPolicy(nn.Module):
    """Normaliser + actor + action post-processing, as one graph.

    Args:
        policy: a trained policy module; its `inference_policy()` gives (deterministic actor, normaliser):
            the Gaussian mean MLP for PPO, bound * tanh(mean) for SAC, the unrolled chain of a flow policy
            (whose output is the chunk of E actions (B, E, A) it executes when E > 1: outputs gain that axis).
        contract: the deploy contract (default pose, action scale and clip).
    """

    def __init__(self, policy: nn.Module, contract: DeployContract):
        super().__init__()
        actor, normalizer = policy.inference_policy()
        self.normalizer = copy.deepcopy(normalizer)
        self.actor = copy.deepcopy(actor)
        self.noise_dim = int(getattr(policy, "noise_input_dim", 0))
        """Size of the second input `noise` (a flow policy's x_0), 0 when the graph takes no noise."""
        self.input_names = graph_input_names(contract, self.noise_dim)
        """The graph's inputs in order: obs, [noise,] then the contract's input terms (a VLA's image, instruction)."""
        self.clip = float(contract.action.clip) if contract.action.clip is not None else None
        index = {n: i for i, n in enumerate(contract.joint_names)}
        default = contract.default_joint_pos
        self.terms: list[tuple[bool, slice]] = []  # (affine in the graph, action columns); buffers term<i>_*
        order: list[int] = []
        start = 0
        for i, spec in enumerate(contract.action.terms):
            joints = [index[j] for j in spec.joints]
            order += joints
            affine = ACTION_TERMS.get(spec.kind).graph_affine
            self.terms.append((affine is not None, slice(start, start + spec.dim)))
            start += spec.dim
            if affine is None:  # the term needs the robot's state: NaN in the graph
                self.register_buffer(f"term{i}_nan", torch.full((len(joints),), float("nan")))
                continue
            offset, scale = affine(spec, [default[j] for j in joints])
            self.register_buffer(f"term{i}_offset", torch.tensor(offset, dtype=torch.float32))
            self.register_buffer(f"term{i}_scale", torch.tensor(scale, dtype=torch.float32))
        # (J,) the terms' targets, concatenated in term order, back into contract joint order
        self.reorder = None if order == list(range(len(order))) else torch.argsort(torch.tensor(order)).tolist()

    def forward(self, obs: Tensor, *inputs: Tensor) -> tuple[Tensor, Tensor]:
        """obs (B, O) and the further inputs of `input_names` -> (actions, joint_targets)."""
        obs_n = self.normalizer(obs)
        actions = self.actor(obs_n, *inputs)  # (B, A) or chunks (B, E, A)
        if self.clip is not None:
            actions = actions.clamp(-self.clip, self.clip)
        parts = []
        for i, (in_graph, cols) in enumerate(self.terms):
            if in_graph:
                parts.append(getattr(self, f"term{i}_offset") + getattr(self, f"term{i}_scale") * actions[..., cols])
            else:
                nan = getattr(self, f"term{i}_nan")
                parts.append(nan.expand(*actions.shape[:-1], nan.shape[0]))
        targets = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)  # (B, [E,] J) term order
        if self.reorder is not None:
            targets = targets[..., self.reorder]
        return actions, targets  # (B, A), (B, J); chunks (B, E, A), (B, E, J)


def graph_inputs(module: nn.Module, obs: Tensor, inputs: tuple[Tensor, ...], noise: Tensor | None = None
                 ) -> tuple[Tensor, ...]:
    """The graph's inputs in `module.input_names` order: obs (B, O), a flow policy's noise (B, D) (`noise`, else
    standard normal drawn with seed 0) and the further `inputs` (a VLA's image and instruction embedding)."""
    noise_dim = getattr(module, "noise_dim", 0)
    if noise_dim and noise is None:
        noise = torch.randn(obs.shape[0], noise_dim, generator=torch.Generator().manual_seed(0))
    return (obs, *([noise] if noise_dim else []), *inputs)


def onnx_bytes(module: nn.Module, example: Tensor, *inputs: Tensor) -> bytes:
    """Serialise `module` to ONNX (pinned opset, dynamic batch dimension; inputs `obs`, for a flow policy that
    samples its x_0 `noise`, and the contract's input terms `inputs`, e.g. a VLA's image and instruction)."""
    module.eval()
    batch = torch.export.Dim("batch")
    examples = graph_inputs(module, example, inputs, torch.zeros(example.shape[0], getattr(module, "noise_dim", 0)))
    program = torch.onnx.export(
        module,
        examples,
        None,
        input_names=list(getattr(module, "input_names", [INPUT_NAME])),
        output_names=list(OUTPUT_NAMES),
        opset_version=OPSET,
        # forward(obs, *inputs): torch.export sees the varargs as one tuple, and none when they are empty
        dynamic_shapes=({0: batch}, *([tuple({0: batch} for _ in examples[1:])] if len(examples) > 1 else [])),
        dynamo=True,
        verbose=False,
    )
    return program.model_proto.SerializeToString()


def embed_contract(model: bytes, contract: DeployContract) -> bytes:
    """Add the contract JSON to the model's metadata_props."""
    import onnx

    proto = onnx.load_from_string(model)
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = CONTRACT_KEY, contract.to_json()
    proto.producer_name = "robo_rl"
    return proto.SerializeToString()


def parity_error(model: bytes, module: nn.Module, obs: Tensor, *inputs: Tensor) -> float:
    """Max |onnxruntime - torch| over both outputs for observations (B, O) and the further `inputs` (B, ...) (with
    a `noise` input, standard normal noise); NaN entries must be NaN in both."""
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    args = graph_inputs(module, obs, inputs)
    names = list(getattr(module, "input_names", [INPUT_NAME]))
    feed = {name: x.numpy() for name, x in zip(names, args, strict=True)}
    got = session.run(list(OUTPUT_NAMES), feed)
    with torch.no_grad():
        want = module(*args)
    errors = []
    for g, w in zip(got, want, strict=True):
        w = w.numpy()
        if g.shape != w.shape or not np.array_equal(np.isnan(g), np.isnan(w)):
            return float("inf")
        errors.append(float(np.abs(np.nan_to_num(g) - np.nan_to_num(w)).max()))
    return max(errors)


def record_observations(env: Any, policy: nn.Module, steps: int) -> dict[str, Tensor]:
    """Observation groups ({group: (steps * N, ...)}) visited by the deterministic policy, for the parity check."""
    visited = [step.obs for step in itertools.islice(rollout(env, inference_actor(policy), random_start=True), steps)]
    return {key: torch.cat([obs[key] for obs in visited]) for key in visited[0]}


def vla_contract(contract: DeployContract, policy: nn.Module, camera: str, image_size: int, out: Path
                 ) -> DeployContract:
    """A VLA's contract: the observation pruned to the state terms it reads (the graph's `obs`), its camera and
    instruction as input terms (the encoder graph `<out stem>.instruction.onnx` beside the policy).

    Raises:
        ValueError: the state columns the policy reads are not whole contract terms (one line).
    """
    wanted = tuple(policy.config.state_terms)
    observation = tuple(t for t in contract.observation if not wanted or t.name in wanted)
    if sum(t.dim * t.history for t in observation) != policy.state_dim:
        raise ValueError(f"the VLA reads {policy.state_dim} state columns, but its terms {list(wanted)} give "
                         f"{sum(t.dim * t.history for t in observation)} in the contract")
    instruction = ObsTerm(name=INSTRUCTION, dim=policy.instruction_dim,
                          params={"encoder": instruction_graph_path(out).name, "model": MINILM_NAME,
                                  "max_length": MAX_TOKENS})
    render = dataclasses.asdict(RenderSettings())  # how training drew the images: a twin draws them alike
    return dataclasses.replace(contract, observation=observation,
                               inputs=(image_input(camera, image_size, image_size), instruction),
                               extra={**contract.extra, "render": render})


def instruction_graph_path(policy_path: Path) -> Path:
    """The instruction encoder written beside a VLA policy: `<name>.onnx` -> `<name>.instruction.onnx`."""
    return policy_path.with_suffix(".instruction.onnx")


def export_policy(
    run_or_checkpoint: str | Path,
    out: str | Path,
    *,
    parity_envs: int = 32,
    parity_steps: int = 20,
    evaluate: bool = True,
) -> DeployContract:
    """Export the policy of a run (its latest checkpoint) or of a checkpoint file to `out` (.onnx).

    The contract's `extra["train_eval"]` records the policy's task metrics in simulation (one
    deterministic episode in each of `parity_envs` worlds), for comparison on the robot.
    `extra["commit"]` (and `commit_dirty`) name the commit the run was started from, when its run
    folder recorded one (`robo_rl.learn.run_folder`). Returns the contract written. Raises ValueError (one
    line) for bad input, a contract the term registry refuses (`robo_rl.terms.validate_contract`) or a failed
    parity check; in each case no file is left at `out` or beside it.
    """
    out = Path(out)
    if out.suffix != ".onnx":
        raise ValueError(f"output {str(out)!r} must end in .onnx")
    check_output_file(out, "--out")
    check_output_file(out.with_suffix(".json"), "--out (its contract .json)")
    ckpt_path, state, cfg = load_trained(run_or_checkpoint)
    env = build_env(cfg, num_envs=parity_envs, seed=cfg.seed + 777)
    try:
        contract = env.contract  # first: a task without a contract (gym:<id>) is refused before any rollout
        policy = load_policy(state, cfg, env)
        reads_groups = bool(getattr(policy, "reads_observation_groups", False))
        if reads_groups:  # a VLA: its state terms, camera and instruction (checked before any rollout)
            for path, what in ((instruction_graph_path(out), "its instruction encoder"),
                               (tokenizer_path(instruction_graph_path(out)), "its instruction tokenizer")):
                check_output_file(path, f"--out ({what})")
            contract = vla_contract(contract, policy, env.camera, cfg.env.image_size, out)
        observed = record_observations(env, policy, parity_steps)  # {group: (B, ...)}
        inputs = policy.graph_inputs(observed) if reads_groups else (observed["policy"],)  # (obs, *input terms)
        # one deterministic episode per world: the task metric in training, recorded in the contract
        evaluation = run_episodes(env, inference_actor(policy)) if evaluate else None
        contract = contract.with_run(
            run_id=ckpt_path.parent.name,
            config_hash=state["config_hash"],
            obs_normalization=not isinstance(policy.inference_policy()[1], nn.Identity),
        )
        instructions = list(env.instruction_set.texts) if reads_groups else []
    finally:
        env.close()
    if evaluation is not None:
        extra = dict(contract.extra)
        extra["train_eval"] = {"episodes": evaluation["episodes"], "mean_return": evaluation["mean_return"],
                               **evaluation["metrics"]}
        extra["task"] = cfg.task
        extra["iteration"] = int(state["iteration"])
        contract = dataclasses.replace(contract, extra=extra)
    git = (read_provenance(ckpt_path.parent) or {}).get("git") or {}
    if git.get("commit"):  # the code that trained it (robo_rl.learn.run_folder); "dirty": uncommitted changes
        contract = dataclasses.replace(contract, extra={**contract.extra, "commit": git["commit"],
                                                        "commit_dirty": bool(git.get("dirty"))})
    if hasattr(policy, "deploy_extra"):  # what the graph computes beyond an MLP (a flow policy's chain)
        contract = dataclasses.replace(contract, extra={**contract.extra, **policy.deploy_extra()})
    chunk = int(getattr(policy, "execute_steps", 1))  # actions per inference, run open-loop on the robot
    if chunk != contract.action.chunk:
        contract = dataclasses.replace(contract, action=dataclasses.replace(contract.action, chunk=chunk))

    validate_contract(contract)  # the robot refuses what the registry does not know: refuse it before writing
    module = ExportedPolicy(policy, contract)
    model = embed_contract(onnx_bytes(module, *(x[:4] for x in inputs)), contract)
    error = parity_error(model, module, *inputs)
    tolerance = VLA_PARITY_TOLERANCE if reads_groups else PARITY_TOLERANCE
    if not error <= tolerance:
        raise ValueError(f"parity check failed: onnxruntime and torch differ by {error:.2e} (> {tolerance})")

    json_path = out.with_suffix(".json")
    if not reads_groups:
        write_with_companion(out, model, json_path, contract.to_json().encode())
        return contract
    encoder = instruction_graph_path(out)
    # its own parity check; both files or none
    export_instruction_encoder(encoder, parity_texts=instructions, pool=policy.instruction_pool)
    try:
        write_with_companion(out, model, json_path, contract.to_json().encode())
    except BaseException:
        for path in (encoder, tokenizer_path(encoder)):
            path.unlink(missing_ok=True)
        raise
    return contract

