"""The domain randomisation and event bookkeeping of TaskEnv: which per-world samples exist, when they are drawn,
and how they are written into the backend's per-world model fields.

A mixin of `robo_rl.tasks.task_env.TaskEnv` (split out by concern); the maths is in the pure functions of
`robo_rl.tasks.events`. It uses the env's resolved joints (`_act_columns`, `dq_idx`, nominal gains), its
generator, backend and `rand` (the task's DomainRandConfig).
"""

from __future__ import annotations

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError
from robo_rl.tasks import events


class DomainRandomization:
    """Physics randomisation, action latency and pushes for a TaskEnv (see the module docstring)."""

    def _setup_randomization(self) -> None:
        """Resolve what the randomisation touches, allocate the action queue and push timers, sample startup values."""
        r, n, m = self.rand, self.num_envs, self.backend.model
        self.randomization: dict[str, Tensor] = {}  # name -> per-world samples (N, ...) float64
        self._dr_log: dict[str, float] = {}
        self._physics_rand = [k for k in ("friction_scale", "mass_scale", "kp_scale", "kd_scale", "motor_strength",
                                          "damping_add", "armature_add") if r.enabled(k)]
        if r.com_offset > 0:
            self._physics_rand.append("com_offset")
        self._dofs = torch.arange(m.nv)[self.dq_idx]  # (J,) dof address of each policy joint
        unknown = sorted(set(r.obs_noise) - {t.name for t in self.policy_terms})
        if unknown:
            raise ConfigError(f"config error: env.randomization.obs_noise.{unknown[0]}: not a policy observation "
                              f"term; terms: {', '.join(t.name for t in self.policy_terms)}")
        lo, hi = r.action_latency_steps
        self.action_delay = torch.full((n,), lo, dtype=torch.long)  # (N,) control steps
        self._action_queue = torch.zeros(n, hi + 1, self.action_dim) if hi > 0 else None  # (N, L, A)
        self._push_steps = max(1, round(r.push_interval_s / self.dt))  # control steps between pushes
        self._push_timer = torch.zeros(n, dtype=torch.long)  # (N,) control steps until the next push
        self._pushes = r.push_interval_s > 0 and r.push_velocity > 0
        if self._pushes and self.base_joint is None:
            raise ConfigError(f"config error: env.randomization.push_interval_s = {r.push_interval_s}: this task has "
                              "no floating base to push")
        if self._pushes:
            self._push_timer.fill_(self._push_steps)
        if self._physics_rand:
            self._randomize_physics(torch.arange(n))

    def _randomize_physics(self, ids: Tensor) -> None:
        """Draw new physics parameters for worlds `ids` (K,) and write them into their models."""
        r, g, k, m = self.rand, self.generator, ids.numel(), self.backend.model
        j = len(self.joint_names)
        shapes = {"friction_scale": (k,), "mass_scale": (k, m.nbody), "com_offset": (k, m.nbody, 3),
                  "kp_scale": (k, j), "kd_scale": (k, j), "motor_strength": (k, j), "damping_add": (k, j),
                  "armature_add": (k, j)}
        for name in self._physics_rand:
            lo, hi = (-r.com_offset, r.com_offset) if name == "com_offset" else getattr(r, name)
            sample = events.uniform(g, shapes[name], lo, hi)
            if name not in self.randomization:
                self.randomization[name] = torch.zeros((self.num_envs, *shapes[name][1:]), dtype=torch.float64)
            self.randomization[name][ids] = sample
        self._write_physics(ids)

    def _write_physics(self, ids: Tensor) -> None:
        """Write the stored samples of worlds `ids` into their model fields (from the nominal values)."""
        b, m, k = self.backend, self.backend.model, ids.numel()
        s = {name: v[ids] for name, v in self.randomization.items()}

        def nominal(field: str) -> Tensor:
            return torch.tensor(getattr(m, field), dtype=torch.float64).expand(k, *getattr(m, field).shape)

        if "friction_scale" in s:
            b.set_model_field("geom_friction", ids, events.randomize_friction(nominal("geom_friction"),
                                                                              s["friction_scale"]))
        if "mass_scale" in s:
            b.set_model_field("body_mass", ids, events.randomize_mass(nominal("body_mass"), s["mass_scale"]))
        if "com_offset" in s:
            b.set_model_field("body_ipos", ids, events.randomize_com(nominal("body_ipos"), s["com_offset"]))
        act = self._act_columns
        if "kp_scale" in s or "kd_scale" in s:
            ones = torch.ones(k, len(self.joint_names), dtype=torch.float64)
            kp_s, kd_s = s.get("kp_scale", ones), s.get("kd_scale", ones)
            gain, bias = events.randomize_pd_gains(nominal("actuator_gainprm"), nominal("actuator_biasprm"), act,
                                                   kp_s, kd_s)
            b.set_model_field("actuator_gainprm", ids, gain)
            b.set_model_field("actuator_biasprm", ids, bias)
            self.kp = _per_world(self.kp, self.num_envs)
            self.kd = _per_world(self.kd, self.num_envs)
            self.kp[ids] = (self._kp_nominal * kp_s).to(torch.float32)
            self.kd[ids] = (self._kd_nominal * kd_s).to(torch.float32)
        if "motor_strength" in s:
            b.set_model_field("actuator_forcerange", ids,
                              events.randomize_motor_strength(nominal("actuator_forcerange"), act, s["motor_strength"]))
            self.torque_limit = _per_world(self.torque_limit, self.num_envs)
            self.torque_limit[ids] = (self._torque_limit_nominal * s["motor_strength"]).to(torch.float32)
        for name, field in (("damping_add", "dof_damping"), ("armature_add", "dof_armature")):
            if name in s:
                b.set_model_field(field, ids, events.add_to_dofs(nominal(field), self._dofs, s[name]))
        self._dr_log = {f"Randomization/{name}": float(v.mean()) for name, v in self.randomization.items()}

    def _reset_events(self, ids: Tensor) -> None:
        """Reset-time events of worlds `ids`: physics resampling (mode reset), action delays, queue, push timers."""
        if self._physics_rand and self.rand.mode == "reset":
            self._randomize_physics(ids)
        lo, hi = self.rand.action_latency_steps
        if hi > lo:
            self.action_delay[ids] = torch.randint(lo, hi + 1, (ids.numel(),), generator=self.generator)
        self._clear_events(ids)

    def _clear_events(self, ids: Tensor) -> None:
        """Reset-time event state of worlds `ids` that is set, not drawn: an empty action queue, full push timers."""
        if self._action_queue is not None:
            self._action_queue[ids] = 0.0  # a reset world holds its reset pose until its first action arrives
        if self._pushes:
            self._push_timer[ids] = self._push_steps

    def _interval_events(self) -> None:
        """Pushes of worlds whose push timer ran out (before the physics of this step)."""
        self._push_timer -= 1
        due = (self._push_timer <= 0).nonzero().squeeze(-1)  # (K,)
        if due.numel() == 0:
            return
        v = self.rand.push_velocity
        push = events.uniform(self.generator, (due.numel(), 2), -v, v)
        adr = self._base_dof
        qvel = self.backend.qvel[due]  # (K, nv) a copy
        qvel[:, adr : adr + 6] = events.push_base(qvel[:, adr : adr + 6], push)
        self.backend.qvel[due] = qvel
        self._push_timer[due] = self._push_steps


def _per_world(x: Tensor, n: int) -> Tensor:
    """(J,) -> (N, J) copy (a nominal per-joint value becomes per world); (N, J) is returned unchanged."""
    return x if x.dim() == 2 else x.expand(n, -1).clone()
