"""A store on a full tmpfs: it must reopen (not die with SIGBUS), serve what it holds, refuse
writes with ENOSPC, and take writes again once retention frees space.

On tmpfs a read fault on a never-written page of a memory-mapped file allocates that page, and
on a full tmpfs the kernel answers the fault with SIGBUS. Recovery used to scan the unwritten
tail of the last segment through its mapping, so a store that had filled its tmpfs was killed
by its next open. The scenario runs in a child process inside its own user and mount
namespaces (``unshare``), on a 4 MiB tmpfs mounted there: nothing outside the child sees it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

#: Both children: take whatever space is left on the tmpfs (it allocates whole pages).
FILL_DISK = r"""
import errno


def fill_disk(path):
    with open(path, "wb", buffering=0) as f:
        for chunk in (4096, 1):
            try:
                while True:
                    f.write(b"b" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
"""

CHILD = (
    FILL_DISK
    + r"""
import errno, gc, json, os, sys
from rmq_ha._native import Store, decode_stored_record
from rmq_ha.errors import StoreIOError

root = os.path.join(sys.argv[1], "store")
out = {}
SEG = 1 << 20
BODY = b"m" * 1000

def open_store():
    return Store(root, segment_size=SEG, cq_units_per_file=1000, flush_interval_ms=5)

def fill(s):
    n = 0
    while True:
        try:
            s.append_bodies("T", 0, [BODY] * 10)
        except StoreIOError as e:
            return n, e.errno
        n += 10

s = open_store()
out["acked"], out["append_errno"] = fill(s)
s.flush()
# take whatever space is left (tmpfs allocates whole pages), so the next open has none
fill_disk(os.path.join(sys.argv[1], "ballast"))
s.close()
del s
gc.collect()
print("reopening", flush=True)
s = open_store()
rep = s.open_report
out["deferred"] = rep["checkpoint_deferred"]
out["cut_bytes"] = rep["cut_bytes"]
out["cut_offset"] = rep["cut_offset"]
out["missing_durable"] = rep["missing_durable"]
bodies = []
off = 0
while True:
    bufs, nxt, lo, hi = s.get_messages("T", 0, off, max_count=256)
    bodies += [bytes(b) for b in bufs]
    if nxt >= hi:
        break
    off = nxt
out["read"] = len(bodies)
out["read_max"] = hi
# still full (a failed append's torn bytes may have been cut, freeing a page): fill again
out["more"], out["append_when_full"] = fill(s)
# retention frees the oldest segment (its checkpoint update is written in place)
out["deleted"] = s.delete_expired(0, clean_immediately=True, max_files=1)
s.append_bodies("T", 0, [b"after"] * 3)
s.flush()
s.checkpoint()
out["min_after"] = s.queue_min_offset("T", 0)
out["max_after"] = s.queue_max_offset("T", 0)
s.close()
del s
gc.collect()
s = open_store()
out["deferred_again"] = s.open_report["checkpoint_deferred"]
out["max_reopened"] = s.queue_max_offset("T", 0)
bufs, _, _, _ = s.get_messages("T", 0, out["max_reopened"] - 3, max_count=3)
out["tail"] = [decode_stored_record(bytes(b))["body"].decode() for b in bufs]
s.close()
print(json.dumps(out), flush=True)
"""
)


def _unshare() -> list[str]:
    exe = shutil.which("unshare")
    if exe is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    probe = subprocess.run(
        [exe, "--user", "--map-root-user", "--mount", "true"],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot create a user+mount namespace: {probe.stderr.decode().strip()}")
    return [exe, "--user", "--map-root-user", "--mount"]


def _run_on_tmpfs(child: str, size: str) -> tuple[int, str, str]:
    cmd = _unshare()
    with tempfile.TemporaryDirectory(prefix="rmq-diskfull-") as d:
        mnt = Path(d) / "mnt"
        mnt.mkdir()
        script = Path(d) / "child.py"
        script.write_text(child)
        sh = f'mount -t tmpfs -o size={size} tmpfs "$1" && exec "$2" "$3" "$1"'
        proc = subprocess.Popen(
            [*cmd, "sh", "-c", sh, "sh", str(mnt), sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=100)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, stdout, stderr


@pytest.mark.timeout(120)
def test_full_tmpfs_reopens_serves_and_resumes_after_retention() -> None:
    rc, stdout, stderr = _run_on_tmpfs(CHILD, "4m")
    assert rc != -signal.SIGBUS, f"killed by SIGBUS:\n{stdout}\n{stderr}"
    assert rc == 0, f"rc {rc}:\n{stdout}\n{stderr}"
    out = json.loads(stdout.strip().splitlines()[-1])
    import errno

    assert out["append_errno"] == errno.ENOSPC
    assert out["acked"] > 1000  # three 1 MiB segments' worth, less the ballast
    # nothing durable lost by the open on a full disk (it may cut the torn bytes of the append
    # that failed, which was never acknowledged)
    assert out["missing_durable"] is None
    assert out["cut_bytes"] < 10 * 1200
    assert out["read"] == out["acked"] == out["read_max"]
    # the open could not write its checkpoint: deferred, not fatal
    assert out["deferred"] and "No space left" in out["deferred"]
    assert out["append_when_full"] == errno.ENOSPC
    assert len(out["deleted"]) == 1
    assert out["min_after"] > 0
    total = out["acked"] + out["more"]
    assert out["max_after"] == total + 3
    assert out["deferred_again"] is None
    assert out["max_reopened"] == total + 3
    assert out["tail"] == ["after"] * 3


def test_store_health_text_names_a_deferred_checkpoint_and_the_incidents() -> None:
    """What `rmq-ha admin store-health` prints for a store on a full disk with a loss on
    record (render_health is the text form of the RMQHA_STORE_HEALTH answer)."""
    from rmq_ha.storeadmin import render_health

    text = render_health(
        {
            "status": {"checkpoint_error": "I/O error on cqmanifest.tmp: No space left"},
            "broker": {},
            "open": {},
            "incidents": ["2026-11-27T21:33:16Z the commitlog ends at 10 but ..."],
        }
    )
    assert "checkpoint not written (disk full): I/O error on cqmanifest.tmp" in text
    assert "incidents on record: 1" in text and "2026-11-27T21:33:16Z" in text
    assert "checkpoint not written" not in render_health({"status": {}, "broker": {}, "open": {}})


CHILD_CQ = (
    FILL_DISK
    + r"""
import errno, gc, json, os, sys, time
from rmq_ha._native import Store
from rmq_ha.errors import StoreIOError

mnt = sys.argv[1]
out = {}
BODY = b"q" * 100

def open_store(name, **kw):
    return Store(os.path.join(mnt, name), segment_size=1 << 20, cq_units_per_file=1000,
                 flush_interval_ms=5, checkpoint_interval_ms=3_600_000, **kw)

def count(s):
    n, off = 0, 0
    while True:
        bufs, nxt, lo, hi = s.get_messages("T", 0, off, max_count=256)
        n += len(bufs)
        if nxt >= hi or not bufs:
            return n
        off = nxt

def errtext(f):
    try:
        f()
        return None
    except StoreIOError as e:
        return f"errno {e.errno}: {e}"

# A: a replica's store; its consume queues follow the confirm offset, none dispatched yet
a = open_store("a", confirm_follows_max=False)
a.append_bodies("T", 0, [BODY] * 300)
a.flush()
# C: 204 units only in memory (4,080 bytes, just under the write-behind buffer's 4,096) and
# the commitlog's last page with room for one more record
c = open_store("c")
c.append_bodies("T", 0, [BODY] * 202)
before = c.max_offset
c.append_bodies("T", 0, [BODY])
overhead = c.max_offset - before - len(BODY)
pad = (100 - c.max_offset - overhead) % 4096 or 4096
c.append_bodies("T", 0, [b"p" * pad])
assert c.max_offset % 4096 == 100, c.max_offset
c.flush()
# B: units 0..99 written to the queue file (its first page); 100..249 only in memory, and
# they reach the file's second page, which was never written
b = open_store("b")
b.append_bodies("T", 0, [BODY] * 100)
b.checkpoint()
b.append_bodies("T", 0, [BODY] * 150)
b.flush()
ballast = os.path.join(mnt, "ballast")
fill_disk(ballast)
# an append on the full disk: its record fits the commitlog's last page, its unit fills the
# queue's buffer, whose write needs a page the disk no longer has
out["append_error"] = errtext(lambda: c.append_bodies("T", 0, [BODY]))
out["c_read"] = count(c)
out["c_dispatch_error"] = c.status().get("dispatch_error")
# the confirm offset moves on a full disk: the records are in the log, the queue files
# cannot take their units
out["confirm_error"] = errtext(lambda: a.set_confirm_offset(a.max_offset))
out["a_read"] = count(a)
out["a_dispatch_error"] = a.status().get("dispatch_error")
# B is closed on the full disk (its checkpoint cannot be written) and opened again: the open
# must redispatch units 100..249 and has no space for them
b.close()
del b
gc.collect()
try:
    b = open_store("b")
    out["reopen_error"] = None
except StoreIOError as e:
    out["reopen_error"] = f"errno {e.errno}: {e}"
    print(json.dumps(out), flush=True)
    sys.exit(0)
out["b_read"] = count(b)
out["b_deferred"] = b.open_report["checkpoint_deferred"]
out["b_dispatch_error"] = b.status().get("dispatch_error")
os.unlink(ballast)
deadline = time.monotonic() + 30
def held():
    return any(x.status().get("dispatch_error") for x in (a, b, c))
while held() and time.monotonic() < deadline:
    time.sleep(0.01)
out["a_dispatch_error_after"] = a.status().get("dispatch_error")
out["b_dispatch_error_after"] = b.status().get("dispatch_error")
out["a_dispatched"] = a.status()["dispatched_offset"] == a.max_offset
b.checkpoint()
b.close()
del b
gc.collect()
b = open_store("b")
out["b_deferred_again"] = b.open_report["checkpoint_deferred"]
out["b_read_again"] = count(b)
out["c_dispatch_error_after"] = c.status().get("dispatch_error")
c.checkpoint()
c.close()
c = open_store("c")
out["c_read_again"] = count(c)
c.close()
b.close()
a.close()
print(json.dumps(out), flush=True)
"""
)


@pytest.mark.timeout(120)
def test_consume_queue_units_that_cannot_be_written_wait_for_space() -> None:
    """Records in the log whose consume-queue units cannot be written (the disk filled while
    they were only in memory) neither fail the confirm that dispatches them nor the next open:
    the units are served from memory and written once space is free. Before, a confirm offset
    moved on a full disk raised ENOSPC, and a store closed with such units could not open."""
    rc, stdout, stderr = _run_on_tmpfs(CHILD_CQ, "4m")
    assert rc == 0, f"rc {rc}:\\n{stdout}\\n{stderr}"
    out = json.loads(stdout.strip().splitlines()[-1])
    # the append's record is in the log: answered as written, served, kept
    assert out["append_error"] is None
    assert out["c_read"] == 205 and out["c_read_again"] == 205
    assert out["c_dispatch_error"] and "No space left" in out["c_dispatch_error"]
    assert out["c_dispatch_error_after"] is None
    assert out["confirm_error"] is None
    assert out["reopen_error"] is None
    assert out["a_read"] == 300
    assert out["a_dispatch_error"] and "No space left" in out["a_dispatch_error"]
    assert out["b_read"] == 250
    assert out["b_deferred"]
    assert out["b_dispatch_error"] and "No space left" in out["b_dispatch_error"]
    # space freed: the flush thread finishes both dispatches on its own
    assert out["a_dispatch_error_after"] is None and out["a_dispatched"]
    assert out["b_dispatch_error_after"] is None
    assert out["b_deferred_again"] is None
    assert out["b_read_again"] == 250
