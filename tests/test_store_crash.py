"""Crash tests with real processes: a child process writes, the parent SIGKILLs it by pid (or it
exits without closing the store), then the parent reopens the store and checks what survived."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rmq_ha._native import Message
from rmq_ha.errors import OffsetOutOfRangeError
from storeutil import SEG, StoreFactory, decode, scan_log


def body(i: int) -> bytes:
    return b"%08d|" % i + bytes([65 + i % 26]) * (i * 37 % 1500)


CHILD_PRELUDE = f"""
import json, os, shutil, sys, time
from rmq_ha._native import Message, Store
SEG = {SEG}
def body(i):
    return b"%08d|" % i + bytes([65 + i % 26]) * (i * 37 % 1500)
"""

APPEND_FOREVER = (
    CHILD_PRELUDE
    + """
root = sys.argv[1]
s = Store(root, segment_size=SEG, flush_interval_ms=5)
i = 0
batch_no = 0
while True:
    n = 1 + batch_no % 13
    placed = s.append_batch([Message("Crash", (i + j) % 4, body(i + j)) for j in range(n)])
    i += n
    end = placed[-1][0] + placed[-1][1]
    if batch_no % 2 == 0:  # odd batches are in flight, never acknowledged
        if s.wait_flushed(end, 10.0) >= end:
            print(f"ack {i} {end}", flush=True)
    batch_no += 1
"""
)

TRUNCATE_THEN_DIE = (
    CHILD_PRELUDE
    + """
root, k, ending = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = Store(root, segment_size=SEG)
offsets = []
for start in range(0, 200, 17):
    placed = s.append_batch(
        [Message("Crash", i % 4, body(i)) for i in range(start, min(start + 17, 200))]
    )
    offsets += [p[0] for p in placed]
s.flush()
s.checkpoint()
shutil.copy(os.path.join(root, "checkpoint"), root + ".checkpoint-before-truncate")
x = offsets[k]
print(json.dumps({"offsets": offsets, "x": x}), flush=True)
s.truncate_to(x)
print("truncated", flush=True)
if ending == "exit":
    os._exit(0)
time.sleep(600)
"""
)


@contextmanager
def child(script_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], queue.Queue]]:
    """Runs a child python; yields it and a queue of its stdout lines; SIGKILLs it on exit."""
    proc = subprocess.Popen(
        [sys.executable, str(script_path), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=script_path.parent,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        t.join(timeout=10)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def next_line(proc: subprocess.Popen[str], lines: queue.Queue, timeout: float = 20.0) -> str:
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail("child produced no output in time")
    if line is None:
        err = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"child exited early (rc={proc.wait()}): {err}")
    return line


@pytest.mark.timeout(60)
@pytest.mark.parametrize("acks_before_kill", [5, 40])
def test_sigkill_mid_run_keeps_every_durably_acknowledged_record(
    open_native: StoreFactory, tmp_path: Path, acks_before_kill: int
) -> None:
    script = tmp_path / "append_forever.py"
    script.write_text(APPEND_FOREVER)
    root = tmp_path / "store"
    acked_count, acked_end = 0, 0
    with child(script, str(root)) as (proc, lines):
        for _ in range(acks_before_kill):
            _, count, end = next_line(proc, lines).split()
            assert int(end) > acked_end
            acked_count, acked_end = int(count), int(end)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        while (line := lines.get(timeout=10)) is not None:  # acks printed before the kill
            _, count, end = line.split()
            acked_count, acked_end = int(count), int(end)

    s = open_native(root)
    report = s.open_report
    cut = report["cut_offset"]
    assert cut is None or cut >= acked_end, f"recovery cut acknowledged data: {report}"
    assert s.max_offset >= acked_end
    records = scan_log(s)
    assert len(records) >= acked_count
    for i, rec in enumerate(records):
        assert rec["body"] == body(i), "records are exactly the appended sequence, no gaps"
        assert rec["queue_id"] == i % 4
        assert rec["queue_offset"] == i // 4
    for q in range(4):
        n = s.queue_max_offset("Crash", q)
        assert n == sum(1 for i in range(len(records)) if i % 4 == q)
        bufs, _, _, _ = s.get_messages("Crash", q, max(0, n - 3), max_count=3)
        for b in bufs:
            assert decode(b)["queue_id"] == q
    n = len(records)
    (off, _, qo, _), *_ = s.append_batch([Message("Crash", n % 4, body(n))])
    assert off >= acked_end and qo == n // 4, "appends continue the recovered sequence"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stale_checkpoint", [False, True], ids=["checkpoint", "stale-ckpt"])
@pytest.mark.parametrize("ending", ["sigkill", "exit"])
@pytest.mark.parametrize("where", ["mid-segment", "segment-start", "zero"])
def test_crash_right_after_truncate_never_resurrects_cut_records_rocketmq_10666(
    open_native: StoreFactory, tmp_path: Path, where: str, ending: str, stale_checkpoint: bool
) -> None:
    script = tmp_path / "truncate_then_die.py"
    script.write_text(TRUNCATE_THEN_DIE)
    root = tmp_path / "store"
    # Record offsets are deterministic: find k for the wanted cut position first.
    sizes_probe = None
    k = {"zero": 0, "mid-segment": 120, "segment-start": -1}[where]
    if where == "segment-start":
        sizes_probe = _record_offsets(tmp_path / "probe", open_native)
        k = next(i for i, off in enumerate(sizes_probe) if off >= 2 * SEG)
        assert sizes_probe[k] == 2 * SEG
    with child(script, str(root), str(k), "exit" if ending == "exit" else "sleep") as (
        proc,
        lines,
    ):
        info = json.loads(next_line(proc, lines))
        assert next_line(proc, lines) == "truncated"
        if ending == "sigkill":
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        else:
            assert proc.wait(timeout=30) == 0
    offsets: list[int] = info["offsets"]
    x: int = info["x"]
    if sizes_probe is not None:
        assert offsets == sizes_probe
    if stale_checkpoint:  # a crash before the checkpoint was rewritten by truncate_to
        shutil.copy(str(root) + ".checkpoint-before-truncate", root / "checkpoint")

    s = open_native(root)
    assert s.open_report["cut_offset"] is None, "truncate_to left no bytes to cut"
    assert s.max_offset == x
    for i, off in enumerate(offsets):
        if off < x:
            assert decode(s.read_record(off))["body"] == body(i)
        else:
            with pytest.raises(OffsetOutOfRangeError):
                s.read_record(off)
    kept = [i for i, off in enumerate(offsets) if off < x]
    assert [r["body"] for r in scan_log(s)] == [body(i) for i in kept]
    for q in range(4):
        assert s.queue_max_offset("Crash", q) == sum(1 for i in kept if i % 4 == q)

    new = s.append_batch([Message("Crash", 0, b"new-%d" % i) for i in range(5)])
    assert new[0][0] == x or (x % SEG and new[0][0] == x - x % SEG + SEG)
    assert new[0][2] == sum(1 for i in kept if i % 4 == 0)
    s.close()

    s = open_native(root)
    assert s.open_report["cut_offset"] is None
    bodies = [r["body"] for r in scan_log(s)]
    assert bodies == [body(i) for i in kept] + [b"new-%d" % i for i in range(5)]
    assert s.max_offset == new[-1][0] + new[-1][1]


def _record_offsets(root: Path, open_native: StoreFactory) -> list[int]:
    """The offsets TRUNCATE_THEN_DIE's appends get (the layout is deterministic)."""
    s = open_native(root)
    offsets: list[int] = []
    for start in range(0, 200, 17):
        placed = s.append_batch(
            [Message("Crash", i % 4, body(i)) for i in range(start, min(start + 17, 200))]
        )
        offsets += [p[0] for p in placed]
    s.close()
    return offsets
