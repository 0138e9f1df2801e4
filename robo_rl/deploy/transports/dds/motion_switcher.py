"""Unitree's motion switcher over DDS: release the onboard sport-mode controller before low-level control.

A Go2 powers on with its own locomotion controller ("sport mode") driving the motors. Low-level commands on
`rt/lowcmd` sent beside it fight that controller, so the vendor's low-level examples first ask the motion
switcher service to release it (and select it again when they are done). The service is one of Unitree's RPC
services over DDS: `unitree_api::msg::dds_::Request_` on `rt/api/motion_switcher/request`, answered with a
`Response_` on `rt/api/motion_switcher/response` carrying the request's id, a status code and JSON data.

- `MotionSwitcherClient` / `release_sport_mode`: the robot side (`robo-rl deploy` with the `unitree` profile).
- `MotionSwitcherService`: the twin side (`robo-rl twin --sport-mode ...`), which answers as the robot does.

The request bytes equal those of the unitree-sdk2 package's own client (tests/deploy/test_dds_unitree.py).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy.transports.dds import dds_types as dt
from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint

SERVICE = "motion_switcher"
REQUEST_TOPIC = f"rt/api/{SERVICE}/request"
RESPONSE_TOPIC = f"rt/api/{SERVICE}/response"
API_CHECK_MODE = 1001
API_SELECT_MODE = 1002
API_RELEASE_MODE = 1003
OK = 0
ERR_UNSUPPORTED_MODE = 7004
ERR_RELEASE = 7008
ERR_API_NOT_IMPLEMENTED = 3203
RESEND_S = 0.5
"""An unanswered request is sent again after this long (an answer can be lost while discovery completes)."""
SPORT_MODES = ("normal", "ai", "advanced")
"""The Go2's sport-mode controllers (CheckMode reports one of these, or "" once released)."""


def request_message(api_id: int, parameter: dict, request_id: int) -> dt.Request_:
    """A Request_ as the SDK's client sends it: identity (id, api_id), lease 0, priority 0, a reply wanted."""
    msg = dt.Request_(parameter=json.dumps(parameter))
    msg.header.identity.id, msg.header.identity.api_id = int(request_id), int(api_id)
    return msg


class MotionSwitcherClient:
    """Calls the motion switcher service on an endpoint's participant.

    Args:
        endpoint: the participant (the robot's).
        timeout_s: how long one call waits for the service to be discovered and for its answer.
    """

    def __init__(self, endpoint: DdsEndpoint, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self._writer = endpoint.writer(REQUEST_TOPIC, dt.Request_, names.COMMAND_QOS)
        self._answers: dict[int, dt.Response_] = {}
        self._arrived = threading.Condition()
        self._reader = endpoint.reader(RESPONSE_TOPIC, dt.Response_, names.EVENT_QOS, self._on_response)

    def _on_response(self, msg: dt.Response_, received: float) -> None:
        with self._arrived:
            self._answers[int(msg.header.identity.id)] = msg
            self._arrived.notify_all()

    def call(self, api_id: int, parameter: dict | None = None) -> tuple[int, dict]:
        """(status code, JSON data) of one call; TimeoutError (one line) when the service does not answer."""
        end = time.monotonic() + self.timeout_s
        # A request sent before discovery is lost, and so is an answer sent before the service's answer writer
        # found our reader: wait for both directions.
        while not (self._writer.get_matched_subscriptions() and self._reader.get_matched_publications()):
            if time.monotonic() > end:
                raise TimeoutError(f"no motion switcher service on {REQUEST_TOPIC} within {self.timeout_s:g} s")
            time.sleep(0.02)
        with self._arrived:
            self._answers.clear()  # late duplicates of earlier calls' answers
        request_id = time.monotonic_ns()
        message = request_message(api_id, parameter or {}, request_id)
        answered = lambda: request_id in self._answers  # noqa: E731
        while True:  # the request is sent again every RESEND_S until answered (the calls are idempotent)
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the motion switcher did not answer request {api_id} within {self.timeout_s:g} s")
            self._writer.write(message)
            with self._arrived:
                if self._arrived.wait_for(answered, min(left, RESEND_S)):
                    answer = self._answers.pop(request_id)
                    break
        if int(answer.header.identity.api_id) != api_id:
            raise ValueError(f"the motion switcher answered api {answer.header.identity.api_id} to request {api_id}")
        return int(answer.header.status.code), (json.loads(answer.data) if answer.data else {})

    def check_mode(self) -> str:
        """The active sport mode's name; "" when released."""
        code, data = self.call(API_CHECK_MODE)
        if code != OK:
            raise ValueError(f"the motion switcher's CheckMode failed with code {code}")
        return str(data.get("name", ""))

    def release(self) -> int:
        return self.call(API_RELEASE_MODE)[0]

    def select(self, mode: str) -> int:
        return self.call(API_SELECT_MODE, {"name": mode})[0]


def release_sport_mode(client: MotionSwitcherClient, *, attempts: int = 3, settle_s: float = 0.5,
                       sleep: Callable[[float], None] = time.sleep) -> str:
    """Release the robot's sport mode; the mode that was active ("" when none was).

    Raises:
        ValueError: (one line) the service does not answer, or the mode is still active after `attempts` requests.
    """
    try:
        active = client.check_mode()
        if not active:
            return ""
        code = OK
        for _ in range(attempts):
            code = client.release()
            sleep(settle_s)
            if not client.check_mode():
                return active
    except TimeoutError as exc:
        raise ValueError(f"cannot release the robot's sport mode: {exc}; low-level control needs it released "
                         "(transport.dds.sport_mode: none for a robot without the service)") from None
    raise ValueError(f"the robot's sport mode {active!r} is still active after {attempts} release requests "
                     f"(motion switcher code {code}); nothing was sent: release it with the remote or the app")


def restore_sport_mode(client: MotionSwitcherClient, mode: str, who: str = "robo-rl") -> None:
    """Select the sport mode `mode` again (`sport_mode: restore` at exit); a refusal or silence is one line on stderr
    (the robot stays released: select it with the remote or the app), never an exception during a shutdown."""
    try:
        code = client.select(mode)
    except (TimeoutError, ValueError) as exc:
        code = str(exc)
    if code != 0:
        print(f"{who}: could not select the sport mode {mode!r} again ({code}); select it with the remote or the app",
              file=sys.stderr, flush=True)


class MotionSwitcherService:
    """The twin's motion switcher: answers CheckMode, SelectMode and ReleaseMode as the robot does.

    Args:
        endpoint: the twin's participant.
        mode: the sport mode active at start ("" when released).
        locked: refuse every release (code ERR_RELEASE), as a robot whose mode cannot be released.
    """

    def __init__(self, endpoint: DdsEndpoint, mode: str = "normal", locked: bool = False):
        if mode not in ("", *SPORT_MODES):
            raise ValueError(f"sport mode {mode!r}: allowed values are {', '.join(SPORT_MODES)} or '' (released)")
        self.mode = mode
        self.locked = locked
        self.requests = 0
        self._lock = threading.Lock()
        self._writer = endpoint.writer(RESPONSE_TOPIC, dt.Response_, names.EVENT_QOS)
        endpoint.reader(REQUEST_TOPIC, dt.Request_, names.COMMAND_QOS, self._on_request)

    @property
    def active(self) -> bool:
        """Whether a sport-mode controller drives the motors (the twin then ignores low-level commands)."""
        return bool(self.mode)

    def _on_request(self, msg: dt.Request_, received: float) -> None:
        api_id = int(msg.header.identity.api_id)
        with self._lock:
            self.requests += 1
            code, data = self._answer(api_id, json.loads(msg.parameter) if msg.parameter else {})
        if msg.header.policy.noreply:
            return
        reply = dt.Response_(data=json.dumps(data) if data else "")
        reply.header.identity.id, reply.header.identity.api_id = msg.header.identity.id, api_id
        reply.header.status.code = code
        self._writer.write(reply)

    def _answer(self, api_id: int, parameter: dict) -> tuple[int, dict]:
        if api_id == API_CHECK_MODE:
            return OK, {"form": "0", "name": self.mode}
        if api_id == API_RELEASE_MODE:
            if self.locked:
                return ERR_RELEASE, {}
            self.mode = ""
            return OK, {}
        if api_id == API_SELECT_MODE:
            name = str(parameter.get("name", ""))
            if name not in SPORT_MODES:
                return ERR_UNSUPPORTED_MODE, {}
            self.mode = name
            return OK, {}
        return ERR_API_NOT_IMPLEMENTED, {}
