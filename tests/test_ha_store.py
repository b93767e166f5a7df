"""Self-repair and the way out of "no consistent point" in replicated groups of real processes
(issue 15): a damaged record on a slave (found at recovery) is repaired from the master; a
record damaged on a running master (found by a consumer's pull) is repaired from an in-sync
replica and the consumer receives every message; a slave whose epochs share no history with
the master's refuses to sync (SUSPEND) until `rmq-ha admin reset-replica --confirm` moves its
log away, after which it syncs the master's log."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from hautil import Acked, HaCluster, send_values
from rmq_ha._native import EpochFile
from rmq_ha.client import Admin, ClientConfig, MessageQueue, PullConsumer
from rmq_ha.client.api import PullStatus
from storeutil_broker import store_health

pytestmark = pytest.mark.timeout(240)

TOPIC = "TopicStoreHA"
CC = ClientConfig(client_ip="127.0.0.1")


@asynccontextmanager
async def started(c: HaCluster) -> AsyncIterator[HaCluster]:
    try:
        await c.start()
        yield c
    finally:
        c.stop()


def record_offsets(commitlog_dir: Path, count: int) -> list[int]:
    """Physical offsets of the first `count` records of a one-segment commitlog."""
    (seg,) = sorted(commitlog_dir.iterdir())
    out, pos = [], 0
    with open(seg, "rb") as f:
        while len(out) < count:
            f.seek(pos)
            size = int.from_bytes(f.read(4), "big")
            if size <= 0:
                break
            out.append(pos)
            pos += size
    return out


def flip_body_byte(commitlog_dir: Path, phys: int) -> None:
    (seg,) = sorted(commitlog_dir.iterdir())
    with open(seg, "r+b") as f:
        f.seek(phys + 100)  # inside the body of a value-sized record
        b = f.read(1)
        f.seek(phys + 100)
        f.write(bytes([b[0] ^ 0x5A]))


async def wait_health(addr: str, pred: Any, timeout_s: float = 30) -> dict[str, Any]:
    with trio.move_on_after(timeout_s):
        while True:
            try:
                h = await store_health(addr)
            except Exception:  # not up yet
                h = None
            if h is not None and pred(h):
                return h
            await trio.sleep(0.1)
    raise AssertionError(f"store health of {addr} never matched: {h}")


async def read_everything(namesrv: str, topic: str, timeout_s: float) -> list[str]:
    """Every message of every queue, from min to max, pulling again where a pull holds
    (a damaged record waiting for its repair) until the queue's max is reached."""
    out: list[str] = []
    with trio.fail_after(timeout_s):
        async with (
            Admin(namesrv, config=CC) as admin,
            PullConsumer("st-drain", namesrv, config=CC) as pc,
        ):
            route = await admin.route(topic)
            for qd in route.queue_datas:
                for q in range(qd.read_queue_nums):
                    mq = MessageQueue(topic=topic, broker_name=qd.broker_name, queue_id=q)
                    off = await admin.min_offset(mq)
                    hi = await admin.max_offset(mq)
                    while off < hi:
                        res = await pc.pull(mq, "*", off, 32, block=True, timeout_s=6.0)
                        out += [m.body.decode() for m in res.messages]
                        if res.status is PullStatus.FOUND or res.next_begin_offset > off:
                            off = res.next_begin_offset
    return out


def values(n: int) -> list[str]:
    return [f"value-{i:05d}-" + "x" * 150 for i in range(n)]


async def test_a_slave_repairs_a_damaged_record_from_its_master(tmp_path: Path) -> None:
    """Issue 15: a flipped bit in a record below a slave's durable point is quarantined at
    its restart (no record after it lost) and repaired with the master's bytes, checked by the
    store (CRC, position, size, queue): store-health shows it repaired and nothing
    quarantined."""
    c = HaCluster(tmp_path, broker={"storeRepairInterval": 200})
    async with started(c):
        m = await c.master()
        await c.wait_sync_state_set(m, 3)
        acked = Acked()
        assert await send_values(c.ns_addrs[0], TOPIC, values(300), acked) == []
        s = next(i for i in range(3) if i != m)
        master_max = (await c.status(m) or {})["maxOffset"]
        with trio.fail_after(20):
            while (await c.status(s) or {}).get("maxOffset") != master_max:
                await trio.sleep(0.1)
        c.brokers[s].stop()  # SIGTERM: a clean checkpoint, so the damage is below it
        root = tmp_path / f"broker-{s}"
        phys = record_offsets(root / "commitlog", 150)[-1]
        flip_body_byte(root / "commitlog", phys)
        c.brokers[s].start()
        await c.brokers[s].wait_ready()
        h = await wait_health(c.broker_addr(s), lambda h: h["broker"]["repaired"] >= 1)
        assert h["quarantined"] == []
        assert any(e["offset"] == phys for e in h["open"]["quarantined"])
        assert h["status"]["max_offset"] >= master_max


def first_segment_record(commitlog_dir: Path, nth: int) -> tuple[Path, int]:
    """The first segment of a commitlog and the position of its `nth` record in it."""
    seg = sorted(commitlog_dir.iterdir())[0]
    pos = 0
    with open(seg, "rb") as f:
        for _ in range(nth):
            f.seek(pos)
            size = int.from_bytes(f.read(4), "big")
            assert size > 0, "fewer records in the first segment"
            pos += size
    return seg, pos


async def test_the_scrub_finds_damage_in_an_old_segment_of_a_slave_and_it_is_repaired(
    tmp_path: Path,
) -> None:
    """Damage in a segment nobody reads (a slave's first segment, the broker running, no
    restart, no consumer) is found by the background scrub (storeScrubBytesPerSecond,
    storeScrubPassInterval) and repaired from the master. Before the scrub it stayed there
    until the slave, promoted, served a reader, or the master that held the good copy was
    gone (docs/store.md "Not done")."""
    seg = 64 * 1024
    c = HaCluster(
        tmp_path,
        broker={
            "storeRepairInterval": 200,
            "mappedFileSizeCommitLog": seg,
            "storeScrubBytesPerSecond": 64 << 20,
            "storeScrubPassInterval": 300,
        },
    )
    async with started(c):
        m = await c.master()
        await c.wait_sync_state_set(m, 3)
        acked = Acked()
        assert await send_values(c.ns_addrs[0], TOPIC, values(900), acked) == []
        s = next(i for i in range(3) if i != m)
        master_max = (await c.status(m) or {})["maxOffset"]
        assert master_max > 3 * seg
        with trio.fail_after(20):
            while (await c.status(s) or {}).get("maxOffset") != master_max:
                await trio.sleep(0.1)
        path, phys = first_segment_record(tmp_path / f"broker-{s}" / "commitlog", 100)
        good = path.read_bytes()
        with open(path, "r+b") as f:  # under the running slave's mapping
            f.seek(phys + 100)
            b = f.read(1)
            f.seek(phys + 100)
            f.write(bytes([b[0] ^ 0x5A]))
        h = await wait_health(
            c.broker_addr(s),
            lambda h: (
                h["broker"]["scrubFound"] >= 1
                and h["broker"]["repaired"] >= 1
                and h["quarantined"] == []
            ),
            timeout_s=60,
        )
        assert h["status"]["quarantined_at_runtime"] >= 1
        assert path.read_bytes() == good, "the master's bytes are back"


async def test_a_record_damaged_on_the_master_is_repaired_and_the_consumer_gets_everything(
    tmp_path: Path,
) -> None:
    """Issue 15, done means: a flipped bit in an old record of a 3-replica group's master
    loses no other record; the master finds it on a consumer's pull, holds that queue (the
    records before it are served), repairs it from an in-sync replica, and the consumer
    receives every acknowledged message. damagedRecordWaitMs is long, so only a repair lets
    the consumer past it."""
    c = HaCluster(tmp_path, broker={"storeRepairInterval": 200, "damagedRecordWaitMs": 600_000})
    async with started(c):
        m = await c.master()
        await c.wait_sync_state_set(m, 3)
        acked = Acked()
        assert await send_values(c.ns_addrs[0], TOPIC, values(400), acked) == []
        root = tmp_path / f"broker-{m}"
        # The 100th record of the log: a message (the first records may be system topics').
        phys = record_offsets(root / "commitlog", 100)[-1]
        flip_body_byte(root / "commitlog", phys)  # under the running master's mapping
        got = await read_everything(c.ns_addrs[0], TOPIC, timeout_s=90)
        assert sorted(got) == sorted(acked.values), "every acknowledged message, once"
        h = await store_health(c.broker_addr(m))
        assert h["broker"]["repaired"] >= 1 and h["quarantined"] == []
        assert h["broker"]["skippedDamaged"] == 0


async def test_no_consistent_point_suspends_the_slave_until_an_operator_resets_it(
    tmp_path: Path,
) -> None:
    """Issue 15 / seed 002: two replicas with divergent epochs (the slave's only epoch is one
    the master never had) — the slave refuses to sync (slaveState SUSPEND, the reason shown)
    and never wipes anything itself. `rmq-ha admin reset-replica` refuses without --confirm;
    with it the slave's log moves to a backup directory, and started again the slave syncs
    the master's whole log."""
    c = HaCluster(tmp_path, replicas=2, controller_mode=False)
    async with started(c):
        acked = Acked()
        with trio.fail_after(30):
            while not (await c.status(1) or {}).get("slaveState") == "TRANSFER":
                await trio.sleep(0.1)
        assert await send_values(c.ns_addrs[0], TOPIC, values(50), acked) == []
        master_max = (await c.status(0) or {})["maxOffset"]
        with trio.fail_after(20):
            while (await c.status(1) or {}).get("maxOffset") != master_max:
                await trio.sleep(0.1)
        c.brokers[1].stop()
        root = tmp_path / "broker-1"
        epochs = EpochFile(root / "epochFileCheckpoint")
        epochs.truncate_suffix_by_epoch(0)
        epochs.append(7, 0)  # a history the master never had (it led epoch 7 elsewhere)
        del epochs
        c.brokers[1].start()
        await c.brokers[1].wait_ready()
        with trio.fail_after(20):
            while (st := await c.status(1) or {}).get("slaveState") != "SUSPEND":
                await trio.sleep(0.1)
        assert "no epoch" in str(st["refused"])
        c.brokers[1].stop()
        conf = tmp_path / "broker-1.conf"
        cli = [sys.executable, "-m", "rmq_ha.cli", "admin", "reset-replica", "-c", str(conf)]
        r = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 1 and "--confirm" in r.stderr
        assert (root / "commitlog").is_dir(), "nothing moved without --confirm"
        r = subprocess.run(
            [*cli, "--confirm"], capture_output=True, text=True, timeout=60, check=False
        )
        assert r.returncode == 0, r.stderr
        (backup,) = root.glob("backup-*")
        assert (backup / "commitlog").is_dir() and (backup / "epochFileCheckpoint").exists()
        c.brokers[1].start()
        await c.brokers[1].wait_ready()
        with trio.fail_after(30):
            while True:
                st = await c.status(1) or {}
                if st.get("slaveState") == "TRANSFER" and st.get("maxOffset") == master_max:
                    break
                await trio.sleep(0.1)
