"""A damaged record in an old commitlog segment and the real Java push consumer (issue 15, row 3
of its table): before, every pull batch that contained the bad record failed with SYSTEM_ERROR,
so a DefaultMQPushConsumer stopped at that queue for ever and the messages behind it were never
delivered. Now the broker quarantines the record at recovery, holds pulls at it for
damagedRecordWaitMs (a replica could repair it) and then skips it: the consumer gets every
other message. rmq_ha only (the damage and the answer are ours)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import Cluster, cluster_brokers, run_client, start_rmq_ha
from rmq_jepsen.launch import wait_until

pytestmark = [
    pytest.mark.skipif(
        shutil.which("java") is None or shutil.which("mvn") is None,
        reason="needs java and mvn (the real rocketmq-client CLI)",
    ),
    pytest.mark.skipif(
        os.environ.get("RMQ_INTEROP_IMPL", "both").strip().lower() == "real",
        reason="store damage handling is rmq_ha's (RMQ_INTEROP_IMPL=real)",
    ),
    pytest.mark.timeout(300),
]

SEG = 64 * 1024
COUNT = 1000
TOPIC = "DamagedOldSegment"
GROUP = "G_DamagedOldSegment"
#: Inside the body (the fixed fields before it take 96 bytes with IPv4 hosts).
BODY_BYTE = 120


def flip_body_byte(store: Path, phys: int) -> None:
    seg = phys - phys % SEG
    with open(store / "commitlog" / f"{seg:020d}", "r+b") as f:
        f.seek(phys - seg + BODY_BYTE)
        b = f.read(1)
        f.seek(phys - seg + BODY_BYTE)
        f.write(bytes([b[0] ^ 0x5A]))


def restart_broker(c: Cluster, while_stopped: Callable[[], None]) -> None:
    broker = c.procs[1]
    assert broker.stop(grace_s=15.0) == 0, broker.tail()  # SIGTERM: everything flushed
    while_stopped()
    (c.workdir / "broker.ready").unlink(missing_ok=True)
    broker.start()
    broker.wait_ready_sync(30)
    wait_until(
        "broker registered again",
        lambda: cluster_brokers(c.namesrv).get("broker-a", {}).get("0"),
        30,
        c.procs,
    )


def test_java_push_consumer_gets_every_message_around_a_damaged_old_record(
    tmp_path: Path, java_cli: Path
) -> None:
    c = start_rmq_ha(
        tmp_path / "cluster",
        broker_conf=[f"mappedFileSizeCommitLog={SEG}", "damagedRecordWaitMs=1000"],
    )
    try:
        sent = run_client(
            "java",
            "send-sync",
            c,
            tmp_path / "send",
            topic=TOPIC,
            group=GROUP,
            count=COUNT,
            serialize="JSON",
            extra=["--body-size", "200"],
        ).sent
        assert len(sent) == COUNT
        # A record of the first segment, not its first: an old segment, records on both sides.
        phys = {s["body"]: int(s["offsetMsgId"][-16:], 16) for s in sent}
        first_seg = sorted(b for b, off in phys.items() if 0 < off < SEG - 1024)
        assert len(first_seg) > 20 and max(phys.values()) > 3 * SEG
        victim = first_seg[len(first_seg) // 2]
        restart_broker(c, lambda: flip_body_byte(c.workdir / "store", phys[victim]))
        got = run_client(
            "java",
            "consume-push-concurrent",
            c,
            tmp_path / "consume",
            topic=TOPIC,
            group=GROUP,
            count=COUNT - 1,
            serialize="JSON",
            timeout=120,
        ).received
        bodies = {r["body"] for r in got}
        assert victim not in bodies, "a damaged record was served"
        assert bodies == set(phys) - {victim}
        assert all(r["bodyOk"] for r in got)
        log = (c.workdir / "broker.log").read_text(errors="replace")
        assert "skipping damaged record" in log and f"{phys[victim]}" in log, log[-3000:]
    finally:
        c.stop()
