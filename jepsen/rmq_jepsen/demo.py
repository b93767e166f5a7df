"""`rmq-ha demo store`: something real to watch before the cluster exists.

1. Write a million messages through the store in batches, and read every one back.
2. Start a child process that appends in a loop and reports each batch it saw become durable;
   kill it with SIGKILL mid-run.
3. Tear the tail as a power loss would (the page cache survives a SIGKILL, a power cut does
   not): overwrite the last bytes of the log with garbage.
4. Reopen: recovery validates the tail, cuts the torn part, and reports what it cut; every
   batch the child saw durable is still there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rmq_ha._native import Message, Store, decode_stored_record
from rmq_jepsen.launch import Proc

TOPIC = "DemoTopic"
QUEUES = 8

CHILD = r"""
import sys
from rmq_ha._native import Store, Message
root = sys.argv[1]
s = Store(root, segment_size=int(sys.argv[2]), flush_interval_ms=50)
i = 0
while True:
    batch = [Message("DemoCrash", j % 4, b"crash-%09d" % (i + j) * 8) for j in range(64)]
    placed = s.append_batch(batch)
    s.wait_flushed(placed.end_offset, 10.0)
    print(placed.end_offset, flush=True)
    i += 64
"""


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def write_and_read(
    root: Path, total: int, size: int, batch: int, console: Console
) -> dict[str, Any]:
    store = Store(root, segment_size=64 << 20)
    bodies = [bytes((i * 13 + k) % 251 for k in range(size)) for i in range(QUEUES)]
    msgs = [
        Message(TOPIC, i % QUEUES, bodies[i % QUEUES], b"TAGS\x01demo\x02") for i in range(batch)
    ]
    with _progress(console) as p:
        task = p.add_task("write", total=total)
        t0 = time.perf_counter()
        written = 0
        while written < total:
            n = min(batch, total - written)
            store.append_batch(msgs[:n])
            written += n
            p.update(task, completed=written)
        store.flush()
        write_s = time.perf_counter() - t0
    log_bytes = store.max_offset
    with _progress(console) as p:
        task = p.add_task("read ", total=total)
        t0 = time.perf_counter()
        read = 0
        for q in range(QUEUES):
            off = store.queue_min_offset(TOPIC, q)
            end = store.queue_max_offset(TOPIC, q)
            while off < end:
                bufs, off, _, _ = store.get_messages(TOPIC, q, off, 1024, 8 << 20)
                for b in bufs:
                    if len(memoryview(b)) <= size:
                        raise SystemExit(f"record shorter than its body at queue {q}")
                read += len(bufs)
                p.update(task, completed=read)
        # Spot-check whole decoding on a sample of every queue.
        for q in range(QUEUES):
            bufs, _, _, _ = store.get_messages(TOPIC, q, 0, 4)
            for b in bufs:
                if decode_stored_record(b.tobytes())["body"] != bodies[q]:
                    raise SystemExit(f"queue {q}: a body came back different")
        read_s = time.perf_counter() - t0
    store.close()
    if read != total:
        raise SystemExit(f"wrote {total} messages but read back {read}")
    return {
        "messages": total,
        "log_bytes": log_bytes,
        "write_s": write_s,
        "read_s": read_s,
        "write_msgs_per_s": total / write_s,
        "write_mb_per_s": log_bytes / 1e6 / write_s,
        "read_msgs_per_s": total / read_s,
    }


def crash_and_recover(root: Path, seconds: float, console: Console) -> dict[str, Any]:
    seg = 1 << 20
    child = Proc(
        "demo writer",
        [sys.executable, "-c", CHILD, str(root), str(seg)],
        root.parent / f"{root.name}-writer.log",
        stdout="pipe",
    ).start()
    durable: list[int] = []
    try:
        assert child.popen is not None and child.popen.stdout is not None
        t0 = time.monotonic()
        with console.status("child process appending; SIGKILL coming..."):
            for line in child.popen.stdout:
                durable.append(int(line))
                if time.monotonic() - t0 >= seconds:
                    break
    finally:
        child.kill()
    last_durable = durable[-1] if durable else 0

    # What the log held at the kill (appends after the last report may be there too).
    seg_files = sorted((root / "commitlog").iterdir())
    last = seg_files[-1]
    data = last.read_bytes()
    end_in_last = len(data.rstrip(b"\0"))
    # Tear the tail as a power loss would: only bytes never made durable can be lost, so the
    # garbage goes over (at most 3000 of) the bytes written after the last durable report, or
    # past the end when there are none (a write that was half done).
    seg_start = int(last.name)
    tear_from = max(end_in_last - 3000, last_durable - seg_start, 0)
    tear_to = end_in_last if end_in_last > tear_from else tear_from + 500
    with open(last, "r+b") as f:
        f.seek(tear_from)
        f.write(os.urandom(tear_to - tear_from))
    torn_at = seg_start + tear_from

    store = Store(root, segment_size=seg)
    report = dict(store.open_report)
    # Everything up to the recovered end reads back with valid CRCs, and that end is at or
    # past every offset the child saw durable.
    off = 0
    while off < store.max_offset:
        off = store.read_range(off, 1 << 20).end_offset
    # One more append after recovery survives a reopen.
    placed = store.append_batch([Message("DemoCrash", 0, b"after recovery")])
    store.close()
    store = Store(root, segment_size=seg)
    after_ok = decode_stored_record(store.read_record(placed[0][0]).tobytes())["body"]
    store.close()
    return {
        "durable_batches_reported": len(durable),
        "last_durable_offset": last_durable,
        "torn_from_offset": torn_at,
        "recovered_end": report["valid_end"],
        "cut_offset": report["cut_offset"],
        "cut_reason": report["cut_reason"],
        "cut_bytes": report["cut_bytes"],
        "records_validated": report["records_scanned"],
        "append_after_recovery": after_ok == b"after recovery",
    }


def run(args: argparse.Namespace) -> int:
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="rmq-demo-", dir=args.dir))
    try:
        console.rule("[bold]1. a million messages through the store")
        wr = write_and_read(root / "bulk", args.messages, args.size, args.batch, console)
        t = Table(show_header=False)
        t.add_row("messages", f"{wr['messages']:,}")
        t.add_row("commitlog bytes", f"{wr['log_bytes']:,}")
        t.add_row(
            "write (incl. final fdatasync)",
            f"{wr['write_msgs_per_s']:,.0f} msgs/s, {wr['write_mb_per_s']:,.0f} MB/s",
        )
        t.add_row("read back (every message)", f"{wr['read_msgs_per_s']:,.0f} msgs/s")
        console.print(t)

        console.rule("[bold]2-4. kill -9 a writer, tear the tail, recover")
        cr = crash_and_recover(root / "crash", args.crash_seconds, console)
        t = Table(show_header=False)
        t.add_row("batches the child saw durable", f"{cr['durable_batches_reported']:,}")
        t.add_row("last durable offset reported", f"{cr['last_durable_offset']:,}")
        t.add_row("torn (garbage written) from", f"{cr['torn_from_offset']:,}")
        t.add_row("recovery validated", f"{cr['records_validated']:,} records")
        t.add_row("recovery cut at", f"{cr['cut_offset']}")
        t.add_row("why", f"{cr['cut_reason']}")
        t.add_row("non-zero bytes cut", f"{cr['cut_bytes']:,}")
        t.add_row("recovered end of log", f"{cr['recovered_end']:,}")
        t.add_row("append after recovery survives reopen", str(cr["append_after_recovery"]))
        console.print(t)
        ok = (
            cr["append_after_recovery"]
            and cr["last_durable_offset"] <= cr["recovered_end"] <= cr["torn_from_offset"]
            and (cr["cut_offset"] is not None)
        )
        if ok:
            console.print(
                "[green]recovery kept every durable record, cut the torn bytes, and the log"
                " takes appends again[/]"
            )
        else:
            console.print("[red]recovery did not behave as expected[/]")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            console.print(f"data kept in {root}")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("store", help="write/read a million messages, crash a writer, recover")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=256, help="body bytes")
    p.add_argument("--batch", type=int, default=256, help="messages per append call")
    p.add_argument("--crash-seconds", type=float, default=1.5, help="child runs this long")
    p.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the data directory")
    p.set_defaults(func=run)
