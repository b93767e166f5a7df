"""Delayed and timer messages (RocketMQ's ScheduleMessageService), and GET_ALL_DELAY_OFFSET.

A message with DELAY = level (1..n of messageDelayLevel; larger levels are clamped to n) is
stored on SCHEDULE_TOPIC_XXXX, queue level-1, with its real topic and queue in REAL_TOPIC /
REAL_QID (see `Peers.route`). One scanner per level reads its queue from the level's
offset: all messages of a level wait the same time, so they come due in store order and the
head of the queue is always the next one due (store time + level delay; RocketMQ keeps the
same value in the consume-queue tag code). A due message goes to its real topic through the
escape, without DELAY; then the level's offset moves past it. A level with nothing due sleeps
until its head is due, or until a message arrives (the send path wakes it like a parked pull).

Progress is delayOffset.json, `{"offsetTable": {level: offset}, "dataVersion": {...}}`,
written atomically every flushDelayOffsetInterval and when the service stops. Its DataVersion
moves once every delayOffsetUpdateVersionStep offset updates, so a returning master can tell
whether a slave that acted for it got further (pre-online).

Timer messages (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) ride the same levels
instead of a timing wheel: a timer is stored on the largest level that does not pass its
delivery time (the smallest level when even that one does), and each time it comes due the
scanner routes it again with the time left, until none is left. A timer is therefore late by
less than the smallest level (1 s with the default levels; RocketMQ's timerPrecisionMs is
1 s too), and costs one write per level hop (a few for minutes, about 12 per day beyond 2 h).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Final

import trio

from rmq_ha.broker.ports import Ports
from rmq_ha.broker.special.base import (
    InnerMessage,
    Peers,
    SpecialService,
    real_destination,
)
from rmq_ha.broker.special.records import progress_within, read_queue
from rmq_ha.clock import wall_ms
from rmq_ha.durable import (
    persist_or_log,
    read_with_backup,
    require_keys,
    write_with_backup,
)
from rmq_ha.errors import ConfigError
from rmq_ha.net.connection import Connection
from rmq_ha.net.dispatch import Dispatcher
from rmq_ha.protocol import json_compat
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Resp
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_WAIT,
    TIMER_PROPERTIES,
)
from rmq_ha.protocol.models import DataVersion

log = logging.getLogger(__name__)

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
_UNITS_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: Messages one scanner reads per look.
BATCH: Final = 32
#: How long a level waits after a refused write before it tries the same message again.
RETRY_AFTER_FAILURE_S: Final = 1.0
#: A level with nothing to do looks again at least this often (a wake-up can be missed when
#: a message is written by another path than the send path, e.g. replication).
IDLE_RECHECK_S: Final = 1.0
#: A timer this close to its delivery time is delivered rather than parked again (a hop for a
#: few milliseconds would make it late by a whole level).
TIMER_TOLERANCE_MS: Final = 50


def timer_deliver_ms(props: dict[str, str], now_ms: int) -> int:
    """When a timer message is due: TIMER_DELIVER_MS, else now plus TIMER_DELAY_SEC or
    TIMER_DELAY_MS (a value that is not a number: now)."""
    try:
        if PROPERTY_TIMER_DELIVER_MS in props:
            return int(props[PROPERTY_TIMER_DELIVER_MS])
        if PROPERTY_TIMER_DELAY_SEC in props:
            return now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
        return now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
    except ValueError:
        return now_ms


def parse_delay_levels(text: str) -> list[int]:
    """messageDelayLevel ("1s 5s 10s ...") as milliseconds per level (level 1 first)."""
    out: list[int] = []
    for item in text.split():
        unit = "ms" if item.endswith("ms") else item[-1:]
        num = item[: -len(unit)] if unit else item
        if unit not in _UNITS_MS or not num.isdigit() or int(num) <= 0:
            raise ConfigError(
                f"bad config messageDelayLevel: {item!r} is not <positive number><ms|s|m|h|d>",
                "messageDelayLevel",
            )
        out.append(int(num) * _UNITS_MS[unit])
    if not out:
        raise ConfigError("bad config messageDelayLevel: no level", "messageDelayLevel")
    return out


def _parse_offsets(raw: bytes) -> tuple[dict[int, int], DataVersion | None]:
    # Lenient: RocketMQ's own body (fastjson) writes the Integer level keys unquoted.
    doc = json_compat.loads(raw)
    table = {int(k): int(v) for k, v in (doc.get("offsetTable") or {}).items()}
    dv = doc.get("dataVersion")
    return table, (DataVersion.from_json(json.dumps(dv).encode()) if dv is not None else None)


def deliver_at(store_ts: int, delay_ms: int, now: int) -> int:
    """When a message of a delay level is due: its store time plus the level's delay, or now
    when that is further ahead than the delay itself (a store time ahead of the clock, after
    the clock stepped back: RocketMQ's correctDeliverTimestamp). Capping it at now + delay
    instead, as before, moved the due time on with every look: the message, and every one
    behind it on its level, was never delivered while the store time stayed ahead."""
    due = store_ts + delay_ms
    return now if due > now + delay_ms else due


class DelayOffsets:
    """The per-level progress (delayOffset.json) and its DataVersion."""

    def __init__(self, path: Path, version_step: int) -> None:
        self.path = path
        self.version_step = max(1, version_step)
        self.table: dict[int, int] = {}
        self.data_version = DataVersion.initial(wall_ms())
        #: Used as DataVersion.stateVersion (the master epoch, once the HA work sets it).
        self.state_version = 0
        self._updates = 0
        self.dirty = False
        #: Progress was made here since the master's was last adopted (while acting).
        self._local = False
        self._load()

    def _load(self) -> None:
        read_with_backup(self.path, self._adopt, "delay offsets")

    def load_json(self, raw: bytes) -> None:
        """The progress as `persist` wrote it."""
        self._adopt(raw)

    def _adopt(self, raw: bytes) -> None:
        require_keys(json_compat.loads(raw), "offsetTable")
        table, dv = _parse_offsets(raw)
        local = bool(json_compat.loads(raw).get("localUpdates", False))
        self.table = table
        if dv is not None:
            self.data_version = dv
        self._local = local

    def get(self, level: int) -> int:
        return self.table.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        self.table[level] = offset
        self.dirty = True
        self._local = True
        self._updates += 1
        if self._updates >= self.version_step:
            self._updates = 0
            self.data_version = self.data_version.next_version(wall_ms(), self.state_version)

    def to_json(self, *, for_file: bool = False) -> bytes:
        """The GET_ALL_DELAY_OFFSET body; the file adds `localUpdates` when progress was made
        here since the master's was last adopted."""
        doc: dict[str, object] = {
            "offsetTable": {str(k): v for k, v in sorted(self.table.items())},
            "dataVersion": json.loads(self.data_version.to_json()),
        }
        if for_file and self._local:
            doc["localUpdates"] = True
        return json.dumps(doc).encode()

    def merge_newer(self, raw: bytes) -> bool:
        """Pre-online (reverse sync): takes back the progress another replica made beyond
        ours (GET_ALL_DELAY_OFFSET body), the larger offset of each level (progress never
        goes back), whatever the two DataVersions say; the version moves on to theirs when it
        is newer. True when anything was taken.

        RocketMQ takes the other table only when its version is not older (local <= remote),
        but the versions of tables that diverged are not comparable (a master restarted from
        its file and a slave that acted from its last copy each moved theirs on): a slave that
        acted with fewer version bumps looked older and the master delivered its messages
        again (found by the acting-master simulator, issue 14, as for consumer offsets)."""
        table, dv = _parse_offsets(raw)
        changed = False
        for level, off in table.items():
            if off > self.table.get(level, -1):
                self.table[level] = off
                changed = True
        if dv is not None and dv.compare(self.data_version) > 0:
            self.data_version = dv
            changed = True
        if changed:
            self.dirty = True
        return changed

    def arm_version_bump(self) -> None:
        """The next update moves the version on (a slave starts acting for its master)."""
        self._updates = self.version_step - 1

    def adopt(self, raw: bytes) -> None:
        """A slave copies its master's progress and version (the periodic slave sync); the
        next update after that moves the version on, so progress made while acting for a
        dead master is always newer than the master's. Progress made here since the last
        copy (while acting) is kept while it is ahead of the master's, and so is this table's
        version, until the master has pulled it back: copying the master's older table first
        delivered those messages again (found by the acting-master simulator, issue 14, as
        for consumer offsets)."""
        table, dv = _parse_offsets(raw)
        if self._local and any(off > table.get(lv, -1) for lv, off in self.table.items()):
            for level, off in table.items():
                if off > self.table.get(level, -1):
                    self.table[level] = off
                    self.dirty = True
            return
        self._local = False
        if table != self.table or (dv is not None and dv != self.data_version):
            self.table = table
            if dv is not None:
                self.data_version = dv
            self.dirty = True
        self._updates = self.version_step - 1

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_with_backup(self.path, self.to_json(for_file=True))
        self.dirty = False


class DelayService(SpecialService):
    name = "schedule"

    def __init__(self, ports: Ports, special: Peers) -> None:
        super().__init__()
        self.ports = ports
        self.special = special
        self.levels_ms = parse_delay_levels(ports.cfg.message_delay_level)
        self.offsets = DelayOffsets(
            ports.cfg.store_root / "config" / "delayOffset.json",
            ports.cfg.delay_offset_update_version_step,
        )
        #: Messages delivered to their real topic (or routed on, for timers) since start.
        self.delivered = 0
        #: Looks taken at each level (level -> count): progress a test or a metric can follow.
        self.scans: dict[int, int] = {}
        #: Due messages whose delivery the escape refused (they are tried again).
        self.refused = 0

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def system_topics(self) -> dict[str, int]:
        return {SCHEDULE_TOPIC: self.max_level}

    def register(self, d: Dispatcher) -> None:
        d.register(RC.GET_ALL_DELAY_OFFSET, self.get_all_delay_offset)

    async def get_all_delay_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(Resp.SUCCESS, None, None, self.offsets.to_json())

    # ---- routing (called through Peers.route) --------------------------------------

    def to_schedule(self, msg: InnerMessage) -> InnerMessage:
        try:
            level = int(msg.properties[PROPERTY_DELAY])
        except ValueError:
            level = 0
        if level <= 0:
            msg.properties.pop(PROPERTY_DELAY, None)
            return msg
        level = min(level, self.max_level)
        msg.properties[PROPERTY_DELAY] = str(level)
        return self._park(msg, level)

    def to_timer(self, msg: InnerMessage, now_ms: int) -> InnerMessage:
        props = msg.properties
        deliver = timer_deliver_ms(props, now_ms)
        # One absolute time from here on, so every hop measures the same target.
        props.pop(PROPERTY_TIMER_DELAY_SEC, None)
        props.pop(PROPERTY_TIMER_DELAY_MS, None)
        left = deliver - now_ms
        if left <= TIMER_TOLERANCE_MS:
            props.pop(PROPERTY_TIMER_DELIVER_MS, None)
            return msg
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver)
        levels = self.levels_ms
        fitting = [i for i, ms in enumerate(levels) if ms <= left]
        if fitting:
            index = max(fitting, key=levels.__getitem__)
        else:
            index = min(range(len(levels)), key=levels.__getitem__)
        return self._park(msg, index + 1)

    def timer_refusal(self, props: dict[str, str], now_ms: int) -> str | None:
        """Why a timer message is refused at send (None: taken): due further ahead than
        timerMaxDelaySec, as RocketMQ's transformTimerMessage refuses it."""
        if not any(k in props for k in TIMER_PROPERTIES):
            return None
        limit_ms = self.ports.cfg.timer_max_delay_sec * 1000
        why = (
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{limit_ms}ms"
        )
        # the property that decides (as timer_deliver_ms reads them) must be a number:
        # RocketMQ's parseLong fails and the send is refused, not delivered at once
        decides = next(k for k in TIMER_PROPERTIES if k in props)
        try:
            int(props[decides])
        except ValueError:
            return f"{why}: {decides} {props[decides]!r} is not a number"
        if timer_deliver_ms(props, now_ms) - now_ms <= limit_ms:
            return None
        return why

    def _park(self, msg: InnerMessage, level: int) -> InnerMessage:
        msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
        msg.properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        return msg

    # ---- the scanners ------------------------------------------------------------------------

    async def run(self, nursery: trio.Nursery) -> None:
        for level in range(1, self.max_level + 1):
            nursery.start_soon(self._level_loop, level)
        nursery.start_soon(self._flush_loop)

    async def save(self) -> None:
        if self.offsets.dirty:
            await trio.to_thread.run_sync(persist_or_log, "delay offsets", self.offsets.persist)

    async def _flush_loop(self) -> None:
        while True:
            await trio.sleep(self.ports.cfg.flush_delay_offset_interval_ms / 1000)
            await self.save()

    async def _level_loop(self, level: int) -> None:
        while True:
            await self.scan_level(level)

    async def scan_level(self, level: int) -> None:
        """One look at a level: delivers what is due, then waits (until the head is due, a
        message arrives, or IDLE_RECHECK_S)."""
        store = self.ports.store.native
        qid = level - 1
        self.scans[level] = self.scans.get(level, 0) + 1
        delay_ms = self.levels_ms[qid]
        offset = self.offsets.get(level)
        fixed = progress_within(store, SCHEDULE_TOPIC, qid, offset, f"delay level {level}")
        if fixed != offset:
            self.offsets.update(level, fixed)
            offset = fixed
        recs, nxt = read_queue(
            store, SCHEDULE_TOPIC, qid, offset, BATCH, storage=self.ports.storage
        )
        if not recs:
            if nxt != offset:  # retention cut the queue below our offset: skip the gap
                self.offsets.update(level, nxt)
                return
            await self.ports.hold.wait(SCHEDULE_TOPIC, qid, offset, IDLE_RECHECK_S)
            return
        for rec in recs:
            now = wall_ms()
            store_ts = _int(rec["store_timestamp"])
            due = deliver_at(store_ts, delay_ms, now)
            if due > now:
                await trio.sleep(min((due - now) / 1000, IDLE_RECHECK_S))
                return
            if not await self._deliver(rec):
                await trio.sleep(RETRY_AFTER_FAILURE_S)
                return
            self.offsets.update(level, _int(rec["queue_offset"]) + 1)

    async def _deliver(self, rec: dict[str, object]) -> bool:
        """Writes a due message to its real topic (or, for a timer not yet due, to its next
        level). False when the write was refused (tried again later)."""
        msg = InnerMessage.from_record(rec)
        dest = real_destination(msg.properties)
        if dest is None:
            log.warning(
                "delayed message at %s has no real topic; dropped", rec.get("physical_offset")
            )
            return True
        msg.topic, msg.queue_id = dest
        msg.properties.pop(PROPERTY_DELAY, None)
        # RocketMQ does not wait for the store on these (messageTimeup sets WAIT=false).
        msg.properties[PROPERTY_WAIT] = "false"
        if self.ports.topics.get(msg.topic) is None and not msg.topic.startswith("%"):
            log.warning("delayed message for unknown topic %s delivered anyway", msg.topic)
        msg = self.special.route(msg)
        r = await self.special.escape.put([msg])
        if not r.ok:
            self.refused += 1
            log.warning("delayed message to %s refused (%s %s)", msg.topic, r.code, r.remark)
            return False
        self.delivered += 1
        return True


def _int(v: object) -> int:
    assert isinstance(v, int)
    return v
