"""The actor of learning on a robot: a `RobotEnv` driven at its control rate by the learner's newest policy.

One control period per `RobotActor.step`: the policy (`robo_rl.deploy.actor_weights`, numpy on the CPU) samples an
action from the observation, `RobotEnv.step` sends it through the safety filter on the control grid, and the
transition goes to the learner's send queue (`robo_rl.deploy.learner_client.TransitionSender`) and to the local
record. Learning never runs here: parameters arrive on the `ParameterFeed` thread, transitions leave on the
sender's, and neither can block a tick.

Stale parameters. Before every action the actor asks how long ago the learner last vouched for its weights; older
than `max_param_age_s` (the learner died, stalled or is cut off), it does not act on them: the episode is interrupted
within that control period (`on_stale`: `hold` leaves POLICY for READY, which holds the last commanded pose through
the safety filter; `damp` goes to DAMP), it says so once, and it idles on the control grid until fresh weights come
(a restarted learner's, or the same learner's once it answers again); then it resets the robot and starts a new
episode. So stale weights never drive the robot longer than `max_param_age_s` plus one control period.
"""

from __future__ import annotations

import gc
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from robo_rl.adapters.robot_env import RobotEnv
from robo_rl.core.config import _f
from robo_rl.deploy.actor_weights import ActorWeights
from robo_rl.deploy.controller import REALTIME_PRIORITY, enter_realtime, timing_summary
from robo_rl.deploy.learner_wire import DEFAULT_ADDRESS, parse_address

MAX_RESET_FAILURES = 3
"""Resets in a row that may fail (a fault on the way) before the actor gives up."""
STALE_ACTIONS = ("hold", "damp")
"""What the actor does with the robot when its parameters go stale (see the module docstring)."""


@dataclass(frozen=True, kw_only=True)
class ActorConfig:
    """The actor process's link to the learner and what it does when the link fails."""

    learner_address: str = DEFAULT_ADDRESS
    """The learner's `host:port`."""
    max_param_age_s: float = _f(1.0, gt=0.0)
    """Parameters the learner has not vouched for within this many seconds are stale: the actor stops acting on them
    (`on_stale`) within one control period."""
    on_stale: str = _f("hold", choices=STALE_ACTIONS)
    """hold: READY holds the last commanded pose through the safety filter; damp: DAMP (damping only)."""
    param_poll_s: float = _f(0.1, gt=0.0)
    """Seconds between parameter requests (must be well under max_param_age_s)."""
    send_interval_s: float = _f(0.1, gt=0.0)
    """Seconds between transition sends."""
    send_queue_rows: int = _f(100_000, ge=1)
    """Transitions kept for the learner while it is away; beyond this the oldest are dropped (and counted)."""
    rpc_timeout_s: float = _f(0.5, gt=0.0)
    """Deadline of one parameter request (a send gets four times this)."""
    connect_timeout_s: float = _f(5.0, gt=0.0)
    """At start, the learner must answer within this long, or nothing is sent to the robot."""
    seed: int = _f(0, ge=0)
    """Seeds the exploration noise."""
    realtime_priority: int = _f(REALTIME_PRIORITY, ge=0, le=99)
    """SCHED_FIFO priority of the control loop's thread on a real-time robot (0: normal scheduling; refused without
    permission, with one line), as `robo-rl deploy`'s."""

    def validate(self) -> None:
        parse_address(self.learner_address)
        if not self.param_poll_s < self.max_param_age_s:
            raise ValueError(f"param_poll_s = {self.param_poll_s!r}: must be < max_param_age_s = "
                             f"{self.max_param_age_s!r} (parameters would go stale between two polls)")


class TransitionLog(Protocol):
    """Where the actor keeps its own record of transitions (a dataset writer that never blocks)."""

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float, terminated: bool, truncated: bool, *,
            intervention: bool = False) -> None: ...

    def end_episode(self) -> None: ...


class WeightsSource(Protocol):
    """`learner_client.ParameterFeed`: (newest weights or None, when the learner last vouched for them)."""

    current: tuple[ActorWeights | None, float]


class TransitionSink(Protocol):
    """`learner_client.TransitionSender`."""

    def put(self, row: dict[str, Any]) -> None: ...


def parameters_fresh(confirmed_at: float, now: float, max_age_s: float) -> bool:
    """Whether parameters last vouched for at `confirmed_at` may still act at `now`."""
    return now - confirmed_at <= max_age_s


class RobotActor:
    """Runs `env` with the learner's newest policy; see the module docstring.

    Args:
        env: the robot (its episodes: reset module, reward modules, time limit).
        cfg: the actor's settings (max_param_age_s, on_stale, seed).
        feed: the newest weights and when the learner last vouched for them.
        sender: takes each transition for the learner.
        record: keeps the actor's own record of transitions (None: none).
        log: receives one line per event (learner lost, learner back) and the periodic status.
        clock: the time parameters age in (s; monotonic wall time, as the feed's).
        status_interval_s: seconds between status lines (0: none).
    """

    def __init__(self, env: RobotEnv, cfg: ActorConfig, feed: WeightsSource, sender: TransitionSink, *,
                 record: TransitionLog | None = None, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic, status_interval_s: float = 10.0):
        self.env, self.cfg, self.feed, self.sender, self.record = env, cfg, feed, sender, record
        self.log, self.clock, self.status_interval_s = log, clock, status_interval_s
        self.actor_id = secrets.token_hex(6)
        self.control_period = env.runtime.controller.period
        self.rng = np.random.default_rng(cfg.seed)
        self.obs: np.ndarray | None = None
        self.acting = False
        """An episode is open and the policy drives the robot."""
        self.lost = False
        """The parameters are stale (reported once, until fresh ones come)."""
        self.seq = 0
        self.episodes = 0
        self.stale_events = 0
        self.last_action_age = math.nan
        """How old the parameters were when the newest action was chosen (s; <= max_param_age_s)."""
        self.in_use: tuple[str, int] | None = None
        """(learner_id, version) of the weights that chose the last action."""
        self.returns: list[float] = []
        self._return = 0.0
        self._episode_start = False
        self.reset_failures = 0
        """Resets in a row that failed."""
        self._periods = np.zeros(100_000)  # ring of seconds between consecutive ticks
        self._n_periods = 0
        self._last_tick: float | None = None
        self._next_status = 0.0

    # ------------------------------------------------------------------ one control period
    def step(self) -> str:
        """One control period: "act" (a policy step), "reset" (a new episode started), "idle" (a safe tick without
        fresh parameters) or "stale" (this tick interrupted the episode)."""
        weights, confirmed_at = self.feed.current
        now = self.clock()
        fresh = weights is not None and parameters_fresh(confirmed_at, now, self.cfg.max_param_age_s)
        if not fresh:
            what = "idle"
            if not self.lost and (self.acting or weights is not None):
                self._say_lost(weights, now - confirmed_at, interrupting=self.acting)
            if self.acting:
                self.env.interrupt(self.cfg.on_stale)
                self.acting = False
                self.stale_events += 1
                if self.record is not None:
                    self.record.end_episode()
                what = "stale"
            self.env.idle_step()
            self._ticked()
            return what
        if self.lost:
            self.lost = False
            self.log(f"actor: learner back (parameters version {weights.version} of learner {weights.learner_id}); "
                     "resuming with a new episode")
        if not self.acting:
            self._reset()
            return "reset"
        self._act(weights, now - confirmed_at)
        return "act"

    def _reset(self) -> None:
        """A new episode (ramp from DAMP, the reset module, POLICY); a reset that fails (a fault on the way: the robot
        is damped) is tried again on the next step, up to `MAX_RESET_FAILURES` in a row; a latched e-stop ends the
        run (RuntimeError)."""
        try:
            self.obs, _ = self.env.reset()
        except RuntimeError as exc:
            self.reset_failures += 1
            if self.reset_failures >= MAX_RESET_FAILURES or "e-stop" in str(exc):
                raise
            self.log(f"actor: {exc}; trying again ({self.reset_failures}/{MAX_RESET_FAILURES})")
            return
        finally:
            self._last_tick = None  # the reset's ticks are not control periods of the policy
        self.reset_failures = 0
        self.acting, self._episode_start, self._return = True, True, 0.0

    def _act(self, weights: ActorWeights, age: float) -> None:
        obs = self.obs
        self.last_action_age = age
        action = weights.sample(obs[None], self.rng)[0]  # (A,)
        self.in_use = (weights.learner_id, weights.version)
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        self._ticked()
        executed, takeover = info["action"], bool(info["intervention"])  # an operator's takeover replaces `action`
        self.sender.put({"obs": obs, "action": executed, "reward": reward, "terminated": terminated,
                         "truncated": truncated, "next_obs": next_obs, "episode_start": self._episode_start,
                         "intervention": takeover, "seq": self.seq})
        if self.record is not None:
            self.record.add(obs, executed, reward, terminated, truncated, intervention=takeover)
        self.seq += 1
        self._return += reward
        self.obs, self._episode_start = next_obs, False
        if terminated or truncated:
            self.acting = False
            self.episodes += 1
            self.returns.append(self._return)
            if self.record is not None:
                self.record.end_episode()

    def _say_lost(self, weights: ActorWeights | None, age: float, interrupting: bool) -> None:
        self.lost = True
        why = "no parameters yet" if weights is None else (
            f"parameters {age:.2f} s old > max_param_age_s {self.cfg.max_param_age_s:g}, the last action taken on "
            f"parameters {self.last_action_age:.2f} s old")
        error = getattr(self.feed, "last_error", None)
        self.log(f"actor: learner lost ({why}{'; ' + error if error else ''}): "
                 f"{'holding the last pose (READY)' if self.cfg.on_stale == 'hold' else 'damping (DAMP)'} until it "
                 f"is back; {'the episode is interrupted' if interrupting else 'between episodes'}, "
                 "recording continues")

    def _ticked(self) -> None:
        now = self.env.last_tick_at if self.env.realtime else time.monotonic()
        if self._last_tick is not None:
            self._periods[self._n_periods % len(self._periods)] = now - self._last_tick
            self._n_periods += 1
        self._last_tick = now

    # ------------------------------------------------------------------ loop
    def run(self, duration_s: float | None = None, should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Step until `duration_s` (wall time) has passed or `should_stop()`; returns `report()`."""
        end = math.inf if duration_s is None else time.monotonic() + duration_s
        self._next_status = time.monotonic() + self.status_interval_s
        gc.collect()
        gc.freeze()  # what start-up made (torch, grpc, the twin) is never traversed again by a collection mid-tick
        leave_realtime, note = enter_realtime(self.cfg.realtime_priority if self.env.realtime else 0)
        if note is not None:
            self.log(f"actor: {note}")
        try:
            while time.monotonic() < end and not (should_stop is not None and should_stop()):
                self.step()
                if self.status_interval_s > 0 and time.monotonic() >= self._next_status:
                    self._next_status += self.status_interval_s
                    self.log(self.status_line())
        finally:
            leave_realtime()
        return self.report()

    def periods(self) -> np.ndarray:
        """Seconds between the starts of consecutive control ticks of the actor's own (policy steps and idle ticks; not
        across a reset, whose ramp and reset motion are ticked inside `RobotEnv.reset`): the newest up to 100,000."""
        return self._periods[: min(self._n_periods, len(self._periods))].copy()

    def report(self) -> dict[str, Any]:
        """Steps, episodes, stale events, the weights in use, what the sender sent and dropped, tick periods and their
        jitter (|period - control period|)."""
        out: dict[str, Any] = {"steps": self.seq, "episodes": self.episodes, "stale_events": self.stale_events,
                               "weights": self.in_use, "mean_return": float(np.mean(self.returns[-20:])) if
                               self.returns else math.nan}
        for key in ("sent", "dropped", "failures"):
            out[key] = getattr(self.sender, key, 0)
        out["received_weights"] = getattr(self.feed, "received", 0)
        periods = self.periods()
        out["period_count"] = len(periods)
        out.update(timing_summary(periods, "period"))
        out.update(timing_summary(np.abs(periods - self.control_period), "jitter"))
        return out

    def status_line(self) -> str:
        r = self.report()
        version = "none" if r["weights"] is None else f"v{r['weights'][1]}"
        p99 = r["jitter_p99"]
        return (f"actor: {r['steps']} steps, {r['episodes']} episodes, return {r['mean_return']:.3f}, parameters "
                f"{version}, sent {r['sent']}, dropped {r['dropped']}, jitter p99 "
                f"{'-' if math.isnan(p99) else f'{p99 * 1e3:.3f} ms'}")
