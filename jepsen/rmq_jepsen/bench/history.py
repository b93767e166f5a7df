"""`rmq-ha bench history`: can the bench keep up? Two figures, each with its baseline:

* recorder ops/s: `Recorder.invoke`/`complete` (schema-checked `Op`s, JSONL) against a raw
  `json.dumps` + write of the same dictionaries to the same file, same run (goal >= 50k ops/s);
* bring-up: seconds to create 5 local hosts (namespaces + sshd) and to start a controller-mode
  cluster on them until every group has a master (goal <= 30 s). Without root the hosts are
  loopback processes, and the output says so.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from rmq_ha.history import Read, Value
from rmq_jepsen.recorder import Recorder


def _mix(i: int) -> tuple[str, str, Value]:
    """A realistic op mix: send invoke/ok pairs, and every tenth a poll with 3 messages."""
    if i % 10 == 9:
        msgs = [Read("T", j % 8, i + j, i + j, None, "broker-a") for j in range(3)]
        return "ok", "poll", Value(topic="T", group="g", messages=msgs)
    if i % 2 == 0:
        return "invoke", "send", Value(topic="T", value=i)
    return (
        "ok",
        "send",
        Value(
            topic="T",
            value=i - 1,
            queue_id=i % 8,
            queue_offset=i,
            broker="broker-a",
            status="SEND_OK",
        ),
    )


def recorder_rate(n: int, path: Path) -> float:
    values = [_mix(i) for i in range(n)]
    t0 = time.perf_counter()
    with Recorder(path) as rec:
        for i, (type_, f, v) in enumerate(values):
            rec.record(i % 10, type_, f, v)
    return n / (time.perf_counter() - t0)


def baseline_rate(n: int, path: Path) -> float:
    """The same lines without the recorder: prebuilt dicts, json.dumps, write."""
    dicts = []
    for i in range(n):
        type_, f, v = _mix(i)
        dicts.append(
            {
                "index": i,
                "time_ns": i,
                "process": i % 10,
                "node": None,
                "type": type_,
                "f": f,
                "value": v.to_json(),
                "error": None,
                "definite": None,
            }
        )
    t0 = time.perf_counter()
    with open(path, "w", buffering=1 << 20) as out:
        for d in dicts:
            out.write(json.dumps(d, separators=(",", ":")))
            out.write("\n")
    return n / (time.perf_counter() - t0)


async def bringup(n: int, state_root: Path) -> dict[str, Any]:
    from rmq_jepsen import hosts as hostmod
    from rmq_jepsen.control import ActionLog, Control
    from rmq_jepsen.db import DB, TOPOLOGIES, ClusterView
    from rmq_jepsen.state import StateDir

    state = StateDir(state_root)
    out: dict[str, Any] = {"nodes": n}
    t0 = time.monotonic()
    if hostmod.is_root():
        hostmod.ensure_packages()
        t0 = time.monotonic()
        hosts = hostmod.local_up(n, state, subnet="198.18.7.0/24", prefix="rmqjb")
        out["provider"] = "local"
        client_ip = state.hosts()["gateway"]  # type: ignore[index]
    else:
        hosts = hostmod.loopback_hosts(n, state)
        out["provider"] = "loopback (not root: no namespaces)"
        client_ip = "127.0.0.1"
    out["hosts_up_s"] = round(time.monotonic() - t0, 3)
    control = Control(hosts, ActionLog(None))
    db = DB(control, TOPOLOGIES["controller"], state=state)
    try:
        await db.install()
        await db.setup()
        await db.start_all()
        masters = await ClusterView(db, client_ip=client_ip).wait_masters(30)
        out["cluster_up_s"] = round(time.monotonic() - t0, 3)
        out["masters"] = {g: (r.name if r else None) for g, r in masters.items()}
    finally:
        with trio.CancelScope(shield=True):
            await db.stop_all()
            control.close()
            if hostmod.is_root():
                hostmod.local_down(state, log=lambda s: None)
    return out


def run(ops: int = 300_000, hosts: int = 5, skip_hosts: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rmqj-bench-") as d:
        path = Path(d) / "history.jsonl"
        rates, bases = [], []
        for _ in range(3):
            rates.append(recorder_rate(ops, path))
            bases.append(baseline_rate(ops, path))
        rec, base = max(rates), max(bases)
        out: dict[str, Any] = {
            "benchmark": "history",
            "ops": ops,
            "recorder_ops_per_s": round(rec),
            "baseline_ops_per_s": round(base),
            "ratio": round(rec / base, 3),
            "goal_recorder_ops_per_s": 50_000,
            "recorder_goal_met": rec >= 50_000,
            "cpus": os.cpu_count(),
        }
        if not skip_hosts:
            b = trio.run(bringup, hosts, Path(d) / "state")
            out["bringup"] = b
            out["goal_bringup_s"] = 30
            out["bringup_goal_met"] = b.get("cluster_up_s", 1e9) <= 30
        return out
