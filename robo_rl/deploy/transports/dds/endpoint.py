"""DdsEndpoint: one Cyclone DDS participant and the readers and writers made on it (QoS as ROS 2's rmw)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cyclonedds.core import Listener
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from robo_rl.deploy.dds_settings import check_domain_id
from robo_rl.deploy.ros_interface import QosSpec


def _qos(spec: QosSpec) -> Qos:
    reliability = (Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100)) if spec.reliable
                   else Policy.Reliability.BestEffort)
    # XCDR1 (plain CDR) only: what ROS 2's rmw layers send and expect.
    return Qos(reliability, Policy.History.KeepLast(spec.depth),
               Policy.DataRepresentation(use_cdrv0_representation=True, use_xcdrv2_representation=False))


class DdsEndpoint:
    """One DomainParticipant and the readers and writers made on it; `close` deletes them all.

    Readers deliver every sample to a callback from Cyclone DDS's listener thread, with the receive time
    (time.monotonic()) taken as the sample is taken.
    """

    def __init__(self, domain_id: int = 0):
        self.domain_id = check_domain_id(domain_id)
        self._participant: DomainParticipant | None = DomainParticipant(domain_id)
        self._topics: dict[str, Topic] = {}
        self._entities: list[Any] = []
        self._latest: list[LatestSample] = []
        self._slots: list[list[Callable[[Any, float], None]]] = []
        self.callback_errors = 0
        self.last_callback_error: str | None = None

    def _topic(self, name: str, struct: type) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = Topic(self._participant, name, struct)
        elif topic.data_type is not struct:
            raise ValueError(f"DDS topic {name!r} already carries {topic.data_type.__name__}, not {struct.__name__}")
        return topic

    def writer(self, name: str, struct: type, qos: QosSpec) -> DataWriter:
        w = DataWriter(self._participant, self._topic(name, struct), qos=_qos(qos))
        self._entities.append(w)
        return w

    def reader(self, name: str, struct: type, qos: QosSpec, on_sample: Callable[[Any, float], None]) -> DataReader:
        """A reader calling on_sample(sample, received) for every sample, from the listener thread."""

        slot = [on_sample]  # emptied by close(): see there

        def on_data_available(reader: DataReader) -> None:
            for sample in reader.take(N=64):
                if not slot:
                    return
                try:
                    slot[0](sample, time.monotonic())
                except Exception as exc:  # a bad sample must not kill the listener thread; counted instead
                    self.callback_errors += 1
                    self.last_callback_error = f"{name}: {type(exc).__name__}: {exc}"

        self._slots.append(slot)
        listener = Listener(on_data_available=on_data_available)
        r = DataReader(self._participant, self._topic(name, struct), qos=_qos(qos), listener=listener)
        self._entities.append((r, listener))
        return r

    def latest_reader(self, name: str, struct: type, qos: QosSpec) -> LatestSample:
        """A reader whose newest sample is taken (and deserialized) only when asked for: `LatestSample.take`.

        Its listener only notes the arrival time, so a robot publishing at 500 Hz costs the control process
        one deserialization per control tick instead of one per message.
        """
        latest = LatestSample()
        listener = Listener(on_data_available=lambda reader: latest.arrived(time.monotonic()))
        latest.reader = DataReader(self._participant, self._topic(name, struct), qos=_qos(qos), listener=listener)
        self._entities.append((latest.reader, listener))
        self._latest.append(latest)
        return latest

    def close(self) -> None:
        """Delete the participant and everything on it (idempotent).

        By reference counting, readers and writers first, the participant last. Nothing holding an entity
        may stay reachable only through a reference cycle (cyclonedds's Listener is one): the garbage
        collector clears the weak registry entries of such objects before their finaliser runs, and
        cyclonedds's finaliser then skips the DDS delete, leaving the participant and its threads running.
        So the callbacks are taken out of the listeners here, and the objects using this endpoint
        (DdsRobot, DdsOperatorLink, DdsTwinServer) must be dropped by the caller too.
        """
        for slot in self._slots:
            slot.clear()  # the callbacks (and what they hold: writers, the participant) leave the listeners
        self._slots.clear()
        for latest in self._latest:
            latest.reader = None  # breaks reader -> listener -> latest -> reader
        self._latest.clear()
        self._entities.clear()
        self._topics.clear()
        self._participant = None


class LatestSample:
    """The newest sample of a keep-last-1 reader and when it arrived (see DdsEndpoint.latest_reader)."""

    def __init__(self):
        self.reader: DataReader | None = None
        self._arrived = 0.0
        self.count = 0

    def arrived(self, when: float) -> None:
        self._arrived = when
        self.count += 1

    def take(self) -> tuple[Any, float] | None:
        """(newest sample, its arrival time on time.monotonic()) if one came since the last take, else None."""
        reader = self.reader
        if reader is None:  # the endpoint was closed
            return None
        samples = reader.take(N=1)
        if not samples:
            return None
        return samples[-1], self._arrived
