"""Isaac Lab and mjlab environments behind our VecEnv contract: task names `isaaclab:<id>` and `mjlab:<id>`.

Three parts: `bootstrap` finds and launches a framework and makes its env, `adapter` presents that env as our
VecEnv (and registers the task name prefixes), `contract_translation` reads the deploy contract from its
managers.

Both frameworks share one manager-based API (mjlab is the Isaac Lab API on MuJoCo Warp), so one adapter
serves both, duck-typed: it calls the env's methods and reads its managers, and never imports their classes
outside `make_framework_env`.

- **Creation** through each framework's own registry, with N worlds, the device and the seed:
  mjlab's `load_env_cfg(id)` and `ManagerBasedRlEnv`; Isaac Lab's `parse_env_cfg` and `gymnasium.make`
  (with Isaac Sim started headless first, as its scripts do).
- **Observations:** group `policy` (Isaac Lab) or `actor` (mjlab) becomes our "policy", `critic` our
  "critic" (the policy group when there is none); other groups are not passed on. The framework's tensors
  are passed through as they are: the adapter adds no copy.
- **Steps:** actions are clipped to +-`env.action_clip` (0: the framework's own `clip_actions`, usually
  none). `truncated` is a time-out that is not also a termination; a finite-horizon task's time-outs are
  terminations. Neither framework returns the observation before an auto-reset, so `info["final_obs"]` is
  the post-reset observation (a warning says so once): time-out bootstrapping then uses the value of the
  next episode's first state. With `env.terminal_obs` (mjlab only) the env steps without auto-reset and
  the adapter resets the ended worlds itself after reading their last observation: exact bootstrapping.
- **Logs:** the framework's `extras["log"]` (episode reward sums, metrics) goes to `info["log"]`, with our
  Episode/return, Episode/length and Episode/terminated when episodes end.
- **Deploy contract** (`contract`), read from the managers: joint names and default pose of the entity
  `robot`, the joint-position action terms' scale and offset, the policy group's terms mapped onto our
  observation term registry (`robo_rl.terms.OBSERVATION_TERMS`) with their dims, scales, clips and history, step and
  physics dt, PD gains and torque limits of the actuators, the velocity-command ranges. A task with a term
  our deploy side cannot compute trains but cannot be exported (one-line error naming the term).
- **Checkpoints:** neither framework can save its simulator state, so a resumed run starts new episodes
  in every world (as `gym:<id>` tasks do); networks, optimisers and our RNGs resume exactly.
"""
