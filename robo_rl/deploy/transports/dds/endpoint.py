"""DdsEndpoint: one Cyclone DDS participant and the readers and writers made on it (QoS as ROS 2's rmw)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cyclonedds.core import DDSException, Entity, Listener
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


class CallbackErrors:
    """How many samples a reader's callback raised on, and the last such error (shared by an endpoint's readers)."""

    def __init__(self):
        self.count = 0
        self.last: str | None = None


class DdsEndpoint:
    """One DomainParticipant and the readers and writers made on it; `close` deletes them all, at once.

    Readers deliver every sample to a callback from Cyclone DDS's listener thread, with the receive time
    (time.monotonic()) taken as the sample is taken. Call `close`: an endpoint left to the garbage collector
    keeps its participant (see there).
    """

    def __init__(self, domain_id: int = 0):
        self.domain_id = check_domain_id(domain_id)
        self._participant: DomainParticipant | None = DomainParticipant(domain_id)
        self._topics: dict[str, Topic] = {}
        self._writers: list[DataWriter] = []
        self._readers: list[tuple[DataReader, Listener]] = []
        self._latest: list[LatestSample] = []
        self._slots: list[list[Callable[[Any, float], None]]] = []
        self._errors = CallbackErrors()

    @property
    def callback_errors(self) -> int:
        """Samples a reader's callback raised on (counted, not raised: the listener thread must go on)."""
        return self._errors.count

    @property
    def last_callback_error(self) -> str | None:
        return self._errors.last

    @property
    def closed(self) -> bool:
        return self._participant is None

    def _topic(self, name: str, struct: type) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = Topic(self._participant, name, struct)
        elif topic.data_type is not struct:
            raise ValueError(f"DDS topic {name!r} already carries {topic.data_type.__name__}, not {struct.__name__}")
        return topic

    def writer(self, name: str, struct: type, qos: QosSpec) -> DataWriter:
        w = DataWriter(self._participant, self._topic(name, struct), qos=_qos(qos))
        self._writers.append(w)
        return w

    def reader(self, name: str, struct: type, qos: QosSpec, on_sample: Callable[[Any, float], None]) -> DataReader:
        """A reader calling on_sample(sample, received) for every sample, from the listener thread."""

        slot = [on_sample]  # emptied by close(): see there
        errors = self._errors

        def on_data_available(reader: DataReader | None) -> None:
            if reader is None or not slot:  # being deleted (cyclonedds passes None then) or closed
                return
            for sample in reader.take(N=64):
                if not slot:
                    return
                try:
                    slot[0](sample, time.monotonic())
                except Exception as exc:  # a bad sample must not kill the listener thread; counted instead
                    errors.count += 1
                    errors.last = f"{name}: {type(exc).__name__}: {exc}"

        self._slots.append(slot)
        listener = Listener(on_data_available=on_data_available)
        r = DataReader(self._participant, self._topic(name, struct), qos=_qos(qos), listener=listener)
        self._readers.append((r, listener))
        return r

    def latest_reader(self, name: str, struct: type, qos: QosSpec) -> LatestSample:
        """A reader whose newest sample is taken (and deserialized) only when asked for: `LatestSample.take`.

        Its listener only notes the arrival time, so a robot publishing at 500 Hz costs the control process
        one deserialization per control tick instead of one per message.
        """
        arrivals = Arrivals()  # what the listener touches: not the LatestSample, which holds the reader
        listener = Listener(on_data_available=lambda reader: arrivals.note(time.monotonic()))
        latest = LatestSample(arrivals)
        latest.reader = DataReader(self._participant, self._topic(name, struct), qos=_qos(qos), listener=listener)
        self._readers.append((latest.reader, listener))
        self._latest.append(latest)
        return latest

    def close(self) -> None:
        """Delete the participant and everything on it, now (idempotent); the objects that used this endpoint
        (DdsRobot, DdsOperatorLink, DdsTwinServer) may stay referenced: their readers are silent and a write on one
        of their writers raises (DdsOperatorLink's are skipped once closed).

        In this order: the callbacks leave the slots; each reader's listener is removed from it in Cyclone DDS
        (which waits for a callback in progress, with the GIL released, and invokes none after); then the
        participant is deleted, and with it in C every reader, writer and topic on it. Nothing is left to
        reference counting or the garbage collector: cyclonedds deletes an entity only in its finaliser, and skips
        the delete for one freed in a reference cycle (its registry's weak entry is cleared first), which left
        the participant's threads running, still calling the listeners of readers whose Python side was gone.
        """
        participant = self._participant
        if participant is None:
            return
        for slot in self._slots:
            slot.clear()  # the callbacks (and what they hold: writers, the owner) leave the listeners
        self._slots.clear()
        for latest in self._latest:
            latest.reader = None  # take() answers None from now on
        self._latest.clear()
        for reader, _listener in self._readers:  # the Listener objects stay referenced until the delete is done
            try:
                reader.set_listener(None)
            except DDSException:  # a reader already deleted calls nothing: the participant's delete goes on
                pass
        children = [*self._writers, *(r for r, _ in self._readers), *self._topics.values()]
        for entity in children:  # deleted with the participant: their finalisers must not delete the handle again
            Entity._entities.pop(entity._ref, None)
        self._participant = None
        participant.__del__()  # cyclonedds's delete (idempotent: it drops the entity from its registry first)
        self._readers.clear()
        self._writers.clear()
        self._topics.clear()


class Arrivals:
    """When the newest sample of a reader arrived (time.monotonic()) and how many did: set by its listener."""

    def __init__(self):
        self.last = 0.0
        self.count = 0

    def note(self, when: float) -> None:
        self.last = when
        self.count += 1


class LatestSample:
    """The newest sample of a keep-last-1 reader and when it arrived (see DdsEndpoint.latest_reader)."""

    def __init__(self, arrivals: Arrivals):
        self.reader: DataReader | None = None
        self.arrivals = arrivals  # noted by the reader's listener

    @property
    def count(self) -> int:
        """Samples that arrived (each noted by the listener as it came)."""
        return self.arrivals.count

    def take(self) -> tuple[Any, float] | None:
        """(newest sample, its arrival time on time.monotonic()) if one came since the last take, else None."""
        reader = self.reader
        if reader is None:  # the endpoint was closed
            return None
        samples = reader.take(N=1)
        if not samples:
            return None
        return samples[-1], self.arrivals.last
