"""SimRobot: a MuJoCo twin of the training model behind the RobotInterface; the `sim` transport.

The one deploy module that imports mujoco. It emulates a robot's motor drivers: each command's
kp, kd and position target are loaded into the model's position actuators (the same actuators,
torque limits and integrator as in training), so a policy rehearsed here sees training physics.
Configurable command latency and sensor noise; two ways to run:

- `realtime=False` (default, for tests and rehearsal as fast as possible): `send_command` applies
  the command and advances the physics by one control period; the state's clock is sim time.
- `realtime=True`: a background thread steps the physics at wall-clock pace; `read_state` returns
  the newest state and `send_command` takes effect after the latency, like a real robot.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import queue
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.core.headless_gl import choose_headless_gl
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import TRANSPORTS, ConnectOptions, JointCommand, RobotState, Setpoints, Transport


class SimRobot:
    """MuJoCo twin implementing RobotInterface.

    A floating-base twin reports its accelerometer `imu_acc` (an `accelerometer` sensor of that name) and, for a
    hardware file with `feet`, each foot's contact force (the `touch` sensors `<foot>_foot_touch`, in `feet`
    order), when the model has them. It never reports its true base velocity (`base_lin_vel`): the deploy core's
    estimator fills that, as on the robot (`base_twist` is the ground truth, for evaluation).

    Args:
        model_path: MJCF of the robot (the training scene).
        hw: the hardware description: joint names (robot order) and quaternion order reported.
        control_dt: control period (s); in fast mode each command advances the sim by this much.
        keyframe: initial pose.
        latency_s: delay between `send_command` and the command taking effect (sim time).
        noise_std: standard deviation of Gaussian noise on q, dq and the gyro (same for all).
        realtime: step in a background thread at wall-clock pace.
        seed: noise seed.
        physics_dt: physics time step (s); the policy contract's `physics_dt`, which training used in place
            of the MJCF's timestep. None keeps the MJCF's. control_dt must be a whole number of steps.
        object_body: a free body of the model (e.g. the cube an arm manipulates) whose position the state
            reports as `object_pos`, as a perception system would; None reports none.
        cameras: (name, height, width) of each model camera whose RGB frames the state reports (`images`), drawn
            with `render` as training drew them (`TwinCameras`).
        render: drawing settings of the training's renderer (contract extra.render); None: MuJoCo's own.

    Raises:
        ValueError: the model lacks a joint or actuator, its base disagrees with `hw.kind` (a free joint
            on `kind: arm`, none on `kind: legged`), control_dt is not a whole number of physics steps, or
            object_body is not a body with a free joint.
    """

    def __init__(
        self,
        model_path: str | Path,
        hw: HardwareSpec,
        *,
        control_dt: float,
        keyframe: str | None = "home",
        latency_s: float = 0.0,
        noise_std: float = 0.0,
        realtime: bool = False,
        seed: int = 0,
        physics_dt: float | None = None,
        object_body: str | None = None,
        cameras: tuple[tuple[str, int, int], ...] = (),
        render: Mapping[str, object] | None = None,
    ):
        if cameras:
            choose_headless_gl()
        import mujoco  # optional dependency of the robot side: only the twin needs it

        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(model_path))
        self.data = mujoco.MjData(self.model)
        self.hw = hw
        self.control_dt = control_dt
        self.latency_s = latency_s
        self.noise_std = noise_std
        self.realtime = realtime
        self.rng = np.random.default_rng(seed)
        m = self.model
        if physics_dt is not None:
            if not (np.isfinite(physics_dt) and physics_dt > 0):
                raise ValueError(f"physics_dt = {physics_dt!r}: must be a finite number > 0 (s)")
            m.opt.timestep = physics_dt  # as in training (robo_rl.tasks.task_env overrides the MJCF's)
        steps = control_dt / m.opt.timestep
        if round(steps) < 1 or abs(steps - round(steps)) > 1e-6 * steps:
            raise ValueError(f"control_dt = {control_dt!r} is not a whole number of physics steps of "
                             f"{m.opt.timestep!r} s")
        self.substeps = round(steps)
        model_names = hw.model_names  # the model's names of the robot's joints (hardware model_joint_names)
        jid = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in model_names]
        missing = [n for n, i in zip(model_names, jid, strict=True) if i < 0]
        if missing:
            raise ValueError(f"sim model {model_path} has no joint(s) {', '.join(missing)}"
                             + ("" if hw.model_joint_names else " (does hardware model_joint_names map the robot's "
                                "names onto the model's?)"))
        self.qadr = np.array([m.jnt_qposadr[i] for i in jid])  # (J,) robot order
        self.dadr = np.array([m.jnt_dofadr[i] for i in jid])  # (J,)
        self.aid = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, n) for n in model_names])
        if (self.aid < 0).any():
            raise ValueError(f"sim model {model_path} needs a position actuator named after every joint")
        root = int(m.jnt_bodyid[jid[0]])  # the robot's root body (below the world), not a free object's
        while m.body_parentid[root] != 0:
            root = int(m.body_parentid[root])
        root_joints = range(m.body_jntadr[root], m.body_jntadr[root] + m.body_jntnum[root])
        self.floating = any(m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE for j in root_joints)
        if self.floating != (hw.kind == "legged"):
            base = "a free joint (floating base)" if self.floating else "no free joint (fixed base)"
            raise ValueError(f"sim model {model_path} has {base} but hardware {hw.robot!r} is kind {hw.kind!r}")
        ee = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, "ee_pos")
        self._ee = slice(m.sensor_adr[ee], m.sensor_adr[ee] + 3) if ee >= 0 else None
        self._acc = sensor_slice(m, "imu_acc", mujoco.mjtSensor.mjSENS_ACCELEROMETER) if self.floating else None
        self._feet = foot_touch_index(m, hw.feet) if self.floating and hw.feet else None
        self._object: tuple[int, int] | None = None  # (qpos, qvel) address of the object's free joint
        if object_body is not None:
            body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, object_body)
            jnt = int(m.body_jntadr[body]) if body >= 0 else -1
            if jnt < 0 or m.jnt_type[jnt] != mujoco.mjtJoint.mjJNT_FREE:
                raise ValueError(f"sim model {model_path} has no body {object_body!r} with a free joint (the object)")
            self._object = (int(m.jnt_qposadr[jnt]), int(m.jnt_dofadr[jnt]))
        self.cameras = TwinCameras(m, cameras, render) if cameras else None
        self._pending: collections.deque[tuple[float, JointCommand]] = collections.deque()
        # The setpoints being played (a command with `setpoints`): (start time, actuators, kp, kd, setpoints).
        self._playing: tuple[float, np.ndarray, np.ndarray, np.ndarray, Setpoints] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running = False
        self._step_wall = time.monotonic()  # wall time (monotonic) the present physics step is due at, in real time
        # The model's own servo (its position actuators' kp, kv): a robot whose controller tracks positions with its own
        # stiffness (hardware controller.gains: robot, a Franka) is emulated with the servo the policy trained on.
        self._own_gains = hw.controller.gains == "robot"
        self.servo_kp = m.actuator_gainprm[self.aid, 0].copy()  # (J,) the MJCF's position actuators' kp
        self.servo_kd = -m.actuator_biasprm[self.aid, 2].copy()  # (J,) and kv
        self.reset(keyframe)
        if realtime:
            self._running = True
            self._thread = threading.Thread(target=self._run_realtime, daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ RobotInterface
    def read_state(self) -> RobotState:
        with self._lock:
            d = self.data
            q = d.qpos[self.qadr].copy()
            dq = d.qvel[self.dadr].copy()
            if self.noise_std > 0:
                q += self.rng.normal(0.0, self.noise_std, q.shape)
                dq += self.rng.normal(0.0, self.noise_std, dq.shape)
            quat = gyro = None
            if self.floating:
                quat = d.qpos[3:7].copy()  # (w, x, y, z)
                if self.hw.quaternion_order == "xyzw":
                    quat = np.array([quat[1], quat[2], quat[3], quat[0]])
                gyro = d.qvel[3:6].copy()  # base frame
                if self.noise_std > 0:
                    gyro += self.rng.normal(0.0, self.noise_std, 3)
            return RobotState(
                stamp=float(d.time),
                received=time.monotonic() if self.realtime else float(d.time),
                joint_names=self.hw.joint_names,
                q=q,
                dq=dq,
                tau=d.actuator_force[self.aid].copy(),
                imu_quat=quat,
                imu_gyro=gyro,
                imu_acc=d.sensordata[self._acc].copy() if self._acc is not None else None,
                foot_force=d.sensordata[self._feet].copy() if self._feet is not None else None,
                ee_pos=d.sensordata[self._ee].copy() if self._ee is not None else None,
                object_pos=d.qpos[self._object[0]:self._object[0] + 3].copy() if self._object else None,
                images=self.cameras.frames(d) if self.cameras is not None else {},
            )

    def send_command(self, command: JointCommand) -> None:
        """Queue `command` to take effect latency_s after it arrives: in real time, at the sim time of its arrival on
        the wall clock (`_behind`), so that commands that arrive while the physics thread is late (a stalled process
        on a loaded host) take effect as far apart as they arrived, not all at once when it catches up."""
        arrived = time.monotonic()
        with self._lock:
            behind = self._behind(arrived) if self.realtime else 0.0
            self._pending.append((float(self.data.time) + behind + self.latency_s, command))
        if not self.realtime:
            self.advance(self.substeps)

    def close(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.cameras is not None:
            self.cameras.close()

    # ------------------------------------------------------------------ simulation
    def reset(self, keyframe: str | None = "home", qpos: np.ndarray | None = None) -> None:
        mj, m, d = self._mj, self.model, self.data
        with self._lock:
            if keyframe is not None:
                mj.mj_resetDataKeyframe(m, d, mj.mj_name2id(m, mj.mjtObj.mjOBJ_KEY, keyframe))
            else:
                mj.mj_resetData(m, d)
            if qpos is not None:
                d.qpos[:] = qpos
            self._pending.clear()
            self._playing = None
            # Until a command arrives the drivers are passive (zero gains), like a powered-on robot.
            m.actuator_gainprm[self.aid, 0] = 0.0
            m.actuator_biasprm[self.aid, 1] = 0.0
            m.actuator_biasprm[self.aid, 2] = 0.0
            mj.mj_forward(m, d)

    def place_object(self, pos: np.ndarray) -> None:
        """Put the object at rest at `pos` (3,), upright (world frame: the base frame of a fixed arm)."""
        if self._object is None:
            raise ValueError("this twin models no object (hardware transport.sim.object)")
        qadr, dadr = self._object
        with self._lock:
            self.data.qpos[qadr:qadr + 7] = [*np.asarray(pos, dtype=np.float64), 1.0, 0.0, 0.0, 0.0]
            self.data.qvel[dadr:dadr + 6] = 0.0
            self._mj.mj_forward(self.model, self.data)

    def advance(self, steps: int) -> None:
        """Step the physics `steps` times, applying commands whose latency has elapsed."""
        mj, m, d = self._mj, self.model, self.data
        with self._lock:
            for _ in range(steps):
                while self._pending and self._pending[0][0] <= d.time + 1e-12:
                    self._apply(self._pending.popleft()[1])
                if self._playing is not None:
                    self._play(float(d.time))
                mj.mj_step(m, d)

    def _apply(self, cmd: JointCommand) -> None:
        """Load a command into the actuators: force = kp (q* - q) - kd dq, clipped to the torque limits; with the
        robot's own gains (hardware controller.gains: robot) the model's servo gains instead of the command's, since
        such a robot ignores them (and holds every position it is sent). A command with setpoints replaces the ones
        being played: they are played from now on, one per period (`_play`); a command without, for some joints (a
        gripper's), stops the playing of those joints only."""
        m, d = self.model, self.data
        idx = self._command_index(cmd.joint_names)
        a = self.aid[idx]
        if self._own_gains:
            cmd = dataclasses.replace(cmd, kp=self.servo_kp[idx], kd=self.servo_kd[idx])
        m.actuator_gainprm[a, 0] = cmd.kp
        m.actuator_biasprm[a, 1] = -cmd.kp
        m.actuator_biasprm[a, 2] = -cmd.kd
        if cmd.setpoints is not None:
            self._playing = (float(d.time), a, np.asarray(cmd.kp), np.asarray(cmd.kd), cmd.setpoints)
            d.qfrc_applied[self.dadr[idx]] = cmd.tau
            return
        self._stop_playing(a)
        d.ctrl[a] = cmd.q
        d.qfrc_applied[self.dadr[idx]] = cmd.tau + cmd.kd * cmd.dq  # feed-forward and velocity target

    def _play(self, now: float) -> None:
        """Load the setpoint due at `now` (the last one reached; the first from the start; the last one held after the
        end): position target and velocity feed-forward, as a trajectory controller samples its trajectory (the
        physics step subsamples the setpoints)."""
        start, actuators, kp, kd, points = self._playing
        i = min(max(int((now - start) / points.period + 1e-9), 1), len(points.q)) - 1
        # The velocity target goes into the servo, kp q* + kd dq* = kp (q* + kd / kp dq*), so that the actuator's
        # force limit bounds it as it bounds the rest (a feed-forward force would bypass it).
        with np.errstate(divide="ignore", invalid="ignore"):
            lead = np.where(kp > 0, kd / kp, 0.0) * points.dq[i]
        self.data.ctrl[actuators] = points.q[i] + lead

    def _stop_playing(self, actuators: np.ndarray) -> None:
        """Stop playing setpoints on `actuators` (a command of their own replaces them); the others play on."""
        if self._playing is None:
            return
        start, playing, kp, kd, points = self._playing
        keep = ~np.isin(playing, actuators)  # (P,)
        if not keep.any():
            self._playing = None
        elif not keep.all():
            kept = Setpoints(period=points.period, q=points.q[:, keep], dq=points.dq[:, keep], ddq=points.ddq[:, keep])
            self._playing = (start, playing[keep], kp[keep], kd[keep], kept)

    def _command_index(self, names: tuple[str, ...]) -> np.ndarray:
        return self.hw.index_of(names)  # the robot's names (or the model's)

    def _run_realtime(self) -> None:
        dt = self.model.opt.timestep
        start = time.monotonic()
        k = 0
        self._step_wall = start
        while self._running:
            self.advance(1)
            k += 1
            self._step_wall = start + k * dt
            delay = self._step_wall - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def _behind(self, wall: float) -> float:
        """How far (s) the physics, whose present step is due at wall-clock `_step_wall`, is behind wall time `wall`
        (0 when on time; a late thread catches up by stepping without sleeping)."""
        return max(0.0, wall - self._step_wall)

    @property
    def time(self) -> float:
        return float(self.data.time)

    def __str__(self) -> str:
        return f"the MuJoCo twin of {self.hw.robot}"

    def base_twist(self) -> tuple[np.ndarray, np.ndarray]:
        """Ground-truth base velocity (linear (3,), angular (3,)) in the base frame; floating-base twins only.

        For evaluation (the twin publishes it beside the robot's topics); a real robot has no such reading.
        """
        if not self.floating:
            raise ValueError("base_twist: this twin has a fixed base")
        with self._lock:
            quat = self.data.qpos[3:7].copy()
            lin_w = self.data.qvel[0:3].copy()  # world frame for a free joint
            ang_b = self.data.qvel[3:6].copy()  # base frame
        rot = np.empty(9)
        self._mj.mju_quat2Mat(rot, quat)
        return rot.reshape(3, 3).T @ lin_w, ang_b


def sensor_slice(model, name: str, kind) -> slice | None:
    """Where sensor `name` of type `kind` (an mjtSensor) lies in sensordata; None when the model has none such."""
    import mujoco

    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
    if i < 0 or model.sensor_type[i] != kind:
        return None
    return slice(int(model.sensor_adr[i]), int(model.sensor_adr[i] + model.sensor_dim[i]))


def foot_touch_index(model, feet: tuple[str, ...]) -> np.ndarray | None:
    """(F,) sensordata index of the touch sensor `<foot>_foot_touch` of each foot, in `feet` order (the robot's
    foot_force order); None unless the model has all of them."""
    import mujoco

    found = [sensor_slice(model, f"{foot}_foot_touch", mujoco.mjtSensor.mjSENS_TOUCH) for foot in feet]
    if any(s is None for s in found):
        return None
    return np.array([s.start for s in found], dtype=np.int64)


class TwinCameras:
    """RGB frames of the twin's cameras, drawn as the training's renderer drew the policy's images.

    An OpenGL context is current in one thread at a time, and the twin's state is read from whichever thread runs
    the controller: one thread of its own owns the context and draws every frame (`render` waits for it). A state's
    frames are drawn when first looked at (`frames`: the pose is kept, the drawing waits), so a policy that looks
    every E-th tick (action chunks) costs one drawing per look, not one per tick.

    Args:
        model: the twin's model (a copy takes the drawing settings; the model itself is untouched).
        cameras: (name, height, width) of each camera.
        render: {num_slices, num_stacks, shadows, reflections, skybox, multisamples} as training drew (the contract's
            extra.render); None keeps the model's own look.

    Raises:
        ValueError: a camera the model lacks (one line, listing the model's cameras).
    """

    def __init__(self, model, cameras: tuple[tuple[str, int, int], ...], render: Mapping[str, object] | None):
        import mujoco

        known = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
        for name, _, _ in cameras:
            if name not in known:
                raise ValueError(f"the twin's model has no camera {name!r} (cameras: {', '.join(known) or 'none'}; "
                                 "is --scene the policy's?)")
        look = copy.copy(model)
        if render is not None:  # what robo_rl.sim.render.render_model and CameraRenderer set
            look.vis.quality.offsamples = int(render["multisamples"])
            if not render["shadows"]:
                look.vis.quality.shadowsize = 0
            look.vis.quality.numslices = int(render["num_slices"])
            look.vis.quality.numstacks = int(render["num_stacks"])
        look.vis.global_.offwidth = max(look.vis.global_.offwidth, *(w for _, _, w in cameras))
        look.vis.global_.offheight = max(look.vis.global_.offheight, *(h for _, h, _ in cameras))
        self.names = tuple(name for name, _, _ in cameras)
        self._requests: queue.Queue = queue.Queue()
        started: Future = Future()
        self._thread = threading.Thread(target=self._serve, args=(look, cameras, render, started), daemon=True,
                                        name="robo_rl-twin-cameras")
        self._thread.start()
        started.result()  # raises what creating the renderers raised

    def _serve(self, look, cameras, render, started: Future) -> None:
        import mujoco

        try:
            renderers = {}
            for name, height, width in cameras:
                renderer = mujoco.Renderer(look, height=height, width=width)
                if render is not None:
                    flags = renderer.scene.flags
                    flags[mujoco.mjtRndFlag.mjRND_SHADOW] = bool(render["shadows"])
                    flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = bool(render["reflections"])
                    flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = bool(render["skybox"])
                renderers[name] = renderer
        except Exception as exc:  # no OpenGL: reported by the constructor
            started.set_exception(exc)
            return
        started.set_result(None)
        scratch = mujoco.MjData(look)
        while (request := self._requests.get()) is not None:
            (qpos, mocap_pos), result = request
            try:
                scratch.qpos[:], scratch.mocap_pos[:] = qpos, mocap_pos
                mujoco.mj_kinematics(look, scratch)
                mujoco.mj_camlight(look, scratch)
                frames = {}
                for name, renderer in renderers.items():
                    renderer.update_scene(scratch, camera=name)
                    frames[name] = renderer.render().copy()
                result.set_result(frames)
            except Exception as exc:
                result.set_exception(exc)
        for renderer in renderers.values():
            renderer.close()

    def render(self, pose: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
        """{camera: (H, W, 3) uint8 RGB, rows top-down} of the pose (qpos (nq,), mocap_pos (nmocap, 3))."""
        result: Future = Future()
        self._requests.put((pose, result))
        return result.result()

    def frames(self, data) -> Mapping[str, np.ndarray]:
        """The frames of the twin's current pose, drawn when first looked at (`LazyFrames`)."""
        return LazyFrames(self, (data.qpos.copy(), data.mocap_pos.copy()), self.names)

    def close(self) -> None:
        if self._thread.is_alive():
            self._requests.put(None)
            self._thread.join(timeout=5.0)


class LazyFrames(Mapping):
    """{camera: (H, W, 3) uint8} of one kept pose, all drawn at the first look (a RobotState's `images`)."""

    def __init__(self, cameras: TwinCameras, pose: tuple[np.ndarray, np.ndarray], names: tuple[str, ...]):
        self._cameras, self._pose, self._names = cameras, pose, names
        self._frames: dict[str, np.ndarray] | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        if self._frames is None:
            self._frames = self._cameras.render(self._pose)
        return self._frames[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def connect_twin(hw: HardwareSpec, options: ConnectOptions) -> SimRobot:
    """The twin of `hw` (its `transport.sim` section: model, keyframe, object; `options.scene` replaces the model and
    its object), rendering `options.cameras`; ValueError (one line) without a model."""
    sim = hw.transport.get("sim") or {}
    if "model" not in sim and not options.scene:
        raise ValueError(f"hardware {hw.robot!r} has no transport.sim.model (the MJCF of its twin)")
    scene = options.scene or sim["model"]
    model = find_asset(scene, what=f"sim twin model of {hw.robot!r}")
    return SimRobot(model, hw, control_dt=options.control_dt, keyframe=sim.get("keyframe"), latency_s=options.latency_s,
                    noise_std=options.noise_std, realtime=options.realtime, seed=options.seed,
                    physics_dt=options.physics_dt, object_body=None if options.scene else sim.get("object"),
                    cameras=options.cameras, render=options.render)


TRANSPORTS.register("sim", Transport(connect=connect_twin, rehearsal=True,
                                     options=frozenset({"latency_s", "noise_std", "seed", "scene", "cameras",
                                                        "render"}),
                                     help="the MuJoCo twin, in-process (real time, or fast-forward in tests)"))
