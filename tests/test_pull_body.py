"""Issue 16: a pull's body is built by one native call (Store.read_queue_body): the records
read_queue serves, back to back, each as clients are served it (without the store's
whole-record CRC trailer: client_record), for any start, count and byte limits and tag filter, also
around a quarantined record; and the pull handler's cut of such a body below a damaged record
(_records_below)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rmq_ha._native import Message, Store, client_record
from rmq_ha.broker.core.storage import record_queue_offset
from rmq_ha.broker.handlers.pull import _records_below
from rmq_ha.protocol.message import java_hash
from storeutil import StoreFactory, read_file, segment_path, write_at

pytestmark = pytest.mark.timeout(120)

TOPIC = "PullBody"
QUEUES = 3
TAGS = ["a", "b", "c"]


def write(s: Store, n: int) -> list[tuple[int, int, int]]:
    """`n` messages on 3 queues with tags a/b/c and bodies of varied size; (offset, size,
    queue id) of each."""
    rng = random.Random(16)
    msgs = []
    for i in range(n):
        props = f"TAGS\x01{TAGS[i % 3]}\x02".encode()
        body = (b"%06d|" % i).ljust(rng.randrange(8, 3000), b"x")
        msgs.append(Message(TOPIC, (i // 2) % QUEUES, body, properties=props))
    placed = s.append_batch(msgs)
    return [(off, size, (i // 2) % QUEUES) for i, (off, size, _, _) in enumerate(placed)]


def both(s: Store, q: int, off: int, count: int, max_bytes: int, tags: list[int] | None) -> None:
    bufs, nxt, lo, hi, skipped = s.read_queue(TOPIC, q, off, count, max_bytes, tags)
    body, n, nxt2, lo2, hi2, skipped2 = s.read_queue_body(TOPIC, q, off, count, max_bytes, tags)
    assert body == b"".join(client_record(b.tobytes()) for b in bufs)
    assert len(body) == sum(len(b) for b in bufs) - 20 * len(bufs)
    assert isinstance(body, bytes) and n == len(bufs)
    assert (nxt2, lo2, hi2, skipped2) == (nxt, lo, hi, skipped)


def test_body_equals_the_joined_records(open_native: StoreFactory) -> None:
    s = open_native(segment_size=256 * 1024)
    write(s, 600)
    rng = random.Random(1)
    for _ in range(300):
        q = rng.randrange(QUEUES)
        hi = s.queue_max_offset(TOPIC, q)
        tags = rng.choice([None, [java_hash("a")], [java_hash("b"), java_hash("c")], [1]])
        both(s, q, rng.randrange(hi), rng.randrange(1, 40), rng.randrange(1, 80_000), tags)
    # a body far over the GIL-release threshold (64 KiB)
    body, n, *_ = s.read_queue_body(TOPIC, 0, 0, 200, 4 << 20)
    assert n == 200 and len(body) > 64 * 1024
    both(s, 0, 0, 200, 4 << 20, None)


def test_body_reads_around_a_quarantined_record(open_native: StoreFactory, tmp_path: Path) -> None:
    root = tmp_path / "store"
    s = open_native(root, segment_size=1 << 30)
    placed = write(s, 60)
    s.close()
    bad_off, _, bad_q = placed[20]
    path = segment_path(root, 0)
    data = read_file(path)[bad_off + 100 : bad_off + 104]
    write_at(path, bad_off + 100, bytes(b ^ 0xFF for b in data))
    s = open_native(root, segment_size=1 << 30)
    body, n, nxt, _, _, skipped = s.read_queue_body(TOPIC, bad_q, 0, 64, 4 << 20)
    assert len(skipped) == 1 and skipped[0][1] == bad_off
    assert (n, nxt) == (19, 20)  # 20 records on that queue, the damaged one not served
    both(s, bad_q, 0, 64, 4 << 20, None)
    # the handler's cut below the damaged record keeps exactly the records before it
    below = skipped[0][0]
    cut, k = _records_below(body, below)
    assert k == below
    bufs, *_ = s.read_queue(TOPIC, bad_q, 0, 64, 4 << 20)
    assert cut == b"".join(
        client_record(b.tobytes()) for b in bufs if record_queue_offset(b) < below
    )


def test_records_below_walks_record_sizes(open_native: StoreFactory) -> None:
    s = open_native()
    write(s, 30)
    body, n, *_ = s.read_queue_body(TOPIC, 1, 0, 32, 4 << 20)
    assert n == 10
    assert _records_below(body, 0) == (b"", 0)
    assert _records_below(body, 100) == (body, n)
    cut, k = _records_below(body, 4)
    assert k == 4 and body.startswith(cut)
    assert record_queue_offset(body[len(cut) :]) == 4
    assert _records_below(b"", 5) == (b"", 0)
