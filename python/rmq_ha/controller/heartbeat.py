"""Each controller node's own broker liveness table (RocketMQ's DefaultBrokerHeartbeatManager).

Brokers send BROKER_HEARTBEAT (904) to every controller, so every node, and hence a newly
elected leader, already knows who is alive. An entry is alive while `now - last <= timeout`
(the timeout comes with each heartbeat, default 10 s). The (epoch, maxOffset, confirmOffset)
triple only moves forward: it is replaced when the heartbeat's epoch is larger, or equal with a
larger maxOffset, on one connection; a heartbeat on a new connection (a restarted broker, whose
log may now be shorter) replaces it, since the old values describe a log that may no longer
exist. The catch-up position (issue 13) and whether the broker hears this controller (`hears`,
see elect.py) always come from the latest heartbeat. Not-alive entries are dropped by `expire`
(the periodic scan) and when the broker's connection closes (`drop_connection`, RocketMQ's
BrokerHousekeepingService), unless the broker heartbeats again on a new connection within
`closed_grace_ms` (ours: RocketMQ drops it at once).

Time this node did not run (paused, starved) does not count against the brokers when a
`StallCredit` is given (`rmq_ha.clock`): the controller node passes one and looks at the
clock every `STALL_TICK_S` (`tick`), so on resume the brokers whose heartbeats waited in the
socket buffers are not expired, and their groups not failed over, before those heartbeats are
read. RocketMQ's manager has no such credit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rmq_ha.clock import StallCredit
from rmq_ha.controller.elect import DEFAULT_ELECTION_PRIORITY, BrokerKey, BrokerLiveInfo
from rmq_ha.protocol.headers import BrokerHeartbeatRequestHeader

#: BrokerHeartbeatManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME
DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000
#: The longest a broker whose heartbeat connection closed is kept while it may reconnect.
CLOSED_GRACE_MAX_MS = 2_000


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class LiveEntry:
    broker_addr: str
    last_update_ms: int
    timeout_ms: int
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    #: The connection the last heartbeat came on (any object with identity), or None.
    conn: object | None = None
    catch_up_offset: int | None = None
    catch_up_epoch: int = 0
    #: How long this controller had not answered the broker when it sent the last heartbeat.
    unanswered_ms: int | None = None

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.last_update_ms <= self.timeout_ms

    def info(self, now_ms: int) -> BrokerLiveInfo:
        return BrokerLiveInfo(
            alive=True,
            epoch=self.epoch,
            max_offset=self.max_offset,
            confirm_offset=self.confirm_offset,
            election_priority=self.election_priority,
            last_heartbeat_ms=self.last_update_ms,
            catch_up_offset=self.catch_up_offset,
            catch_up_epoch=self.catch_up_epoch,
            hears_controller=hears(
                self.unanswered_ms, now_ms - self.last_update_ms, self.timeout_ms
            ),
        )


def hears(unanswered_ms: int | None, age_ms: int, timeout_ms: int) -> bool:
    """Whether a broker can be shown to talk with this controller both ways: its last
    heartbeat says this controller answered it within half its heartbeat timeout (None, a
    broker that does not say: yes), and that heartbeat is itself at most half the timeout old
    (a broker whose heartbeats stopped arriving, this controller's side of a one-way cut, is
    alive until it expires, but was elected in that time and never learnt it: fault probe,
    session 17). Half the timeout, so a broker that stopped hearing is known before its
    master's heartbeats would expire, and a heartbeat lost now and then is not enough."""
    half = timeout_ms // 2
    return (unanswered_ms is None or unanswered_ms <= half) and age_ms <= half


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


class HeartbeatTable:
    def __init__(
        self, now_ms: Callable[[], int] = monotonic_ms, stalls: StallCredit | None = None
    ) -> None:
        self.now_ms = now_ms
        self.entries: dict[BrokerKey, LiveEntry] = {}
        self.stalls = stalls

    def now(self) -> int:
        """The clock, after a stall of this process (if any) was credited to every entry."""
        now = self.now_ms()
        if self.stalls is not None:
            lost = self.stalls.observe(now)
            if lost:
                for e in self.entries.values():
                    e.last_update_ms = min(now, e.last_update_ms + lost)
        return now

    def tick(self) -> int:
        """A look at the clock (the watchdog's): the stall credited by it (ms), or 0."""
        before = self.stalls.stalls if self.stalls is not None else 0
        self.now()
        if self.stalls is None or self.stalls.stalls == before:
            return 0
        return self.stalls.last_ms

    def on_heartbeat(self, h: BrokerHeartbeatRequestHeader, conn: object | None = None) -> bool:
        """Records one heartbeat (brokerId must be set); True when the broker is new."""
        assert h.broker_id is not None
        key = BrokerKey(h.cluster_name, h.broker_name, h.broker_id)
        now = self.now()
        epoch, max_offset = _or(h.epoch, -1), _or(h.max_offset, -1)
        timeout = _or(h.heartbeat_timeout_mills, DEFAULT_HEARTBEAT_TIMEOUT_MS)
        priority = _or(h.election_priority, DEFAULT_ELECTION_PRIORITY)
        prev = self.entries.get(key)
        if prev is None:
            self.entries[key] = LiveEntry(
                h.broker_addr,
                now,
                timeout,
                epoch,
                max_offset,
                _or(h.confirm_offset, -1),
                priority,
                conn,
                h.catch_up_offset,
                _or(h.catch_up_epoch, 0),
                h.unanswered_ms,
            )
            return True
        same_conn = conn is None or prev.conn is conn
        prev.broker_addr, prev.last_update_ms, prev.timeout_ms = h.broker_addr, now, timeout
        prev.election_priority, prev.conn = priority, conn
        prev.catch_up_offset, prev.catch_up_epoch = h.catch_up_offset, _or(h.catch_up_epoch, 0)
        prev.unanswered_ms = h.unanswered_ms
        forward = epoch > prev.epoch or (epoch == prev.epoch and max_offset > prev.max_offset)
        if forward or not same_conn:
            prev.epoch, prev.max_offset = epoch, max_offset
            prev.confirm_offset = _or(h.confirm_offset, -1)
        return False

    def is_alive(self, key: BrokerKey) -> bool:
        entry = self.entries.get(key)
        return entry is not None and entry.alive(self.now())

    def view(self) -> dict[BrokerKey, BrokerLiveInfo]:
        """The live entries, as the state machine's election policy reads them."""
        now = self.now()
        return {k: e.info(now) for k, e in self.entries.items() if e.alive(now)}

    def expire(self) -> list[BrokerKey]:
        """Drops and returns the entries whose heartbeat timed out."""
        now = self.now()
        dead = [k for k, e in self.entries.items() if not e.alive(now)]
        for key in dead:
            del self.entries[key]
        return dead

    def keys_on(self, conn: object) -> list[BrokerKey]:
        """The brokers whose last heartbeat came on `conn`."""
        return [k for k, e in self.entries.items() if e.conn is conn]

    def closed_grace_ms(self, conn: object) -> int:
        """How long a broker whose heartbeat connection `conn` closed has to heartbeat again
        on a new one before `drop_connection` drops it: half its heartbeat timeout, at most
        `CLOSED_GRACE_MAX_MS` (0 when no entry came on `conn`). A broker that is gone does
        not come back in that time; one whose connection alone was lost does."""
        return max(
            (
                min(e.timeout_ms // 2, CLOSED_GRACE_MAX_MS)
                for e in self.entries.values()
                if e.conn is conn
            ),
            default=0,
        )

    def drop_connection(self, conn: object) -> list[BrokerKey]:
        """Drops and returns the entries whose last heartbeat came on `conn` (it closed)."""
        gone = self.keys_on(conn)
        for key in gone:
            del self.entries[key]
        return gone
