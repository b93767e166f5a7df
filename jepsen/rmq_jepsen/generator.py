"""Pure generators: the fault schedule, unique values, key ownership, and a rate limiter.

Nothing here touches a socket or a clock it was not given, so the schedule of a campaign is a
function of its options and seed, and unit tests check it exactly.

A schedule alternates *fault windows* and *recovery periods* (YugabyteDB #8636: kill, partition
and pause back to back left no time to recover, so no operation ever succeeded). Within a
window up to `overlap` faults of *different* families are in force at once (OpenChaos #22: one
fault type per run), started `stagger_s` apart and all stopped before the recovery period
begins. Families take turns, so a short run still sees each of them.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

#: Every fault the bench can inject, by family. The family is the history's `fault` kind.
FAULTS: dict[str, tuple[str, ...]] = {
    "partition": (
        "partition-halves",
        "partition-one",
        "partition-master",
        "partition-leader",
        "partition-ring",
        "partition-bridge",
        "partition-oneway",
    ),
    "kill": ("kill-one", "kill-minority", "kill-majority", "kill-master", "kill-leader"),
    "pause": ("pause-one", "pause-minority", "pause-master", "pause-leader"),
    "clock": ("clock-bump", "clock-strobe"),
    "netem": ("netem-delay", "netem-loss"),
    "file": ("file-truncate", "file-bitflip", "file-truncate-master", "file-bitflip-master"),
}

VARIANT_FAMILY: dict[str, str] = {v: fam for fam, vs in FAULTS.items() for v in vs}


def parse_nemesis(spec: str) -> list[str]:
    """ "partition,kill-master" -> every partition variant plus kill-master. "none" or ""
    -> []. Raises ValueError naming an unknown entry."""
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item or item == "none":
            continue
        if item in FAULTS:
            out.extend(v for v in FAULTS[item] if v not in out)
        elif item in VARIANT_FAMILY:
            if item not in out:
                out.append(item)
        else:
            known = ", ".join([*FAULTS, *VARIANT_FAMILY])
            raise ValueError(f"unknown nemesis {item!r}; known: {known}")
    return out


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """Start `variant` at `start_s` and stop it at `stop_s` (seconds from the run start)."""

    fault_id: int
    variant: str
    start_s: float
    stop_s: float

    @property
    def family(self) -> str:
        return VARIANT_FAMILY[self.variant]


@dataclass(frozen=True, slots=True)
class ScheduleOptions:
    time_limit_s: float
    fault_s: float = 10.0
    recovery_s: float = 10.0
    first_fault_s: float = 5.0
    overlap: int = 1
    stagger_s: float = 1.0
    seed: int = 0
    #: Variants that need more nodes than the cluster has are dropped by the caller.
    variants: tuple[str, ...] = field(default_factory=tuple)


def schedule(opts: ScheduleOptions) -> list[FaultEvent]:
    """The whole fault schedule. Every fault stops by `time_limit_s`; windows never overlap
    each other's recovery periods; at most `overlap` faults (of distinct families) at once."""
    if not opts.variants:
        return []
    if opts.fault_s <= 0 or opts.recovery_s < 0 or opts.overlap < 1:
        raise ValueError("fault_s must be > 0, recovery_s >= 0, overlap >= 1")
    rng = random.Random(opts.seed)
    by_family: dict[str, list[str]] = {}
    for v in opts.variants:
        by_family.setdefault(VARIANT_FAMILY[v], []).append(v)
    families = list(by_family)
    rng.shuffle(families)
    turn = itertools.cycle(families)
    events: list[FaultEvent] = []
    t = opts.first_fault_s
    ids = itertools.count(1)
    while True:
        k = min(opts.overlap, len(families))
        window_end = t + opts.fault_s + opts.stagger_s * (k - 1)
        if window_end > opts.time_limit_s:
            break
        chosen: list[str] = []
        while len(chosen) < k:
            fam = next(turn)
            if fam not in chosen:
                chosen.append(fam)
        for i, fam in enumerate(chosen):
            start = t + i * opts.stagger_s
            events.append(FaultEvent(next(ids), rng.choice(by_family[fam]), start, window_end))
        t = window_end + opts.recovery_s
    return events


def in_force(events: Sequence[FaultEvent], t: float) -> list[FaultEvent]:
    return [e for e in events if e.start_s <= t < e.stop_s]


# ---- targets ----------------------------------------------------------------------------------


def minority(n: int) -> int:
    """OpenChaos's minor-: floor((n-1)/2), at least 1."""
    return max(1, (n - 1) // 2)


def majority(n: int) -> int:
    return n // 2 + 1


def halves(nodes: Sequence[str], rng: random.Random) -> tuple[list[str], list[str]]:
    """A random split into a smaller and a larger side (Jepsen's partition-random-halves)."""
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    k = len(shuffled) // 2
    return sorted(shuffled[:k]), sorted(shuffled[k:])


Grudge = dict[str, set[str]]
"""node -> the nodes whose packets it drops."""


def complete_grudge(sides: Sequence[Sequence[str]]) -> Grudge:
    """Every node drops packets from every node not on its side."""
    out: Grudge = {}
    for side in sides:
        others = {n for s in sides if s is not side for n in s}
        for n in side:
            out[n] = set(others)
    return out


def ring_grudge(nodes: Sequence[str]) -> Grudge:
    """Majorities ring (Jepsen, exact for 5 nodes): each node sees itself and its two ring
    neighbours, so every node is in a majority, and no two majorities agree."""
    n = len(nodes)
    if n < 4:
        raise ValueError("a majorities ring needs at least 4 nodes")
    out: Grudge = {}
    for i, node in enumerate(nodes):
        friends = {nodes[(i - 1) % n], nodes[(i + 1) % n], node}
        out[node] = {m for m in nodes if m not in friends}
    return out


def bridge_grudge(nodes: Sequence[str]) -> Grudge:
    """Two halves that cannot talk, joined by one bridge node that sees both."""
    n = len(nodes)
    if n < 3:
        raise ValueError("a bridge needs at least 3 nodes")
    mid = n // 2
    left, bridge, right = list(nodes[:mid]), nodes[mid], list(nodes[mid + 1 :])
    out: Grudge = {node: set(right) for node in left}
    out.update({node: set(left) for node in right})
    out[bridge] = set()
    return out


def oneway_grudge(receivers: Sequence[str], senders: Sequence[str]) -> Grudge:
    """`receivers` drop what `senders` send; the other direction is left alone."""
    return {r: set(senders) for r in receivers}


def isolate_grudge(nodes: Sequence[str], isolated: Sequence[str]) -> Grudge:
    rest = [n for n in nodes if n not in isolated]
    return complete_grudge([list(isolated), rest])


# ---- client values ----------------------------------------------------------------------------


class Values:
    """Unique integer message values for the whole run (OpenChaos's global AtomicLong)."""

    def __init__(self, start: int = 0) -> None:
        self._next = start

    def __next__(self) -> int:
        v = self._next
        self._next += 1
        return v

    def __iter__(self) -> Iterator[int]:
        return self


def key_owners(workers: int, keys_per_worker: int = 2) -> dict[int, list[str]]:
    """Ordered workload: keys `k0..` split so that every key has exactly one producer."""
    return {
        w: [f"k{w * keys_per_worker + i}" for i in range(keys_per_worker)] for w in range(workers)
    }


class ProcessIds:
    """Jepsen's process model: after an indeterminate (info) outcome a worker's logical
    process counts as crashed, and it continues under a fresh id."""

    def __init__(self, first_free: int) -> None:
        self._next = first_free

    def fresh(self) -> int:
        p = self._next
        self._next += 1
        return p


class TokenBucket:
    """A rate limiter over a given clock (seconds): `delay(now)` says how long to wait before
    the next op so that the long-run rate is `rate` ops/s across every worker."""

    def __init__(self, rate: float, burst: float = 1.0) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.interval = 1.0 / rate
        self.burst = max(1.0, burst)
        self._next: float | None = None

    def delay(self, now: float) -> float:
        if self._next is None or self._next < now - self.burst * self.interval:
            self._next = now
        wait = max(0.0, self._next - now)
        self._next += self.interval
        return wait


# ---- special messages -------------------------------------------------------------------------

#: A transaction's plan by value, out of 20: 11 commit, 3 rollback, 4 left unknown by the local
#: transaction and committed by the check, 2 left unknown and rolled back by the check.
TXN_PLAN_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("commit", 11),
    ("rollback", 3),
    ("unknown-commit", 4),
    ("unknown-rollback", 2),
)


def txn_plan(value: int) -> str:
    """The transaction plan of a value (rmq_ha.history.TXN_STATES), a pure function of it, so
    the check listener answers for a message from its key alone, after any crash."""
    total = sum(w for _, w in TXN_PLAN_WEIGHTS)
    x = (value * 2654435761 + 0x9E37) % (1 << 32) % total
    for plan, w in TXN_PLAN_WEIGHTS:
        if x < w:
            return plan
        x -= w
    raise AssertionError("unreachable")


def txn_key(value: int) -> str:
    return f"tx{value}"


def txn_value_of_key(key: str | None) -> int | None:
    if key is None or not key.startswith("tx"):
        return None
    try:
        return int(key[2:])
    except ValueError:
        return None


#: What a pop consumer does with a popped message, with weights out of 20: ack it, leave it
#: (it comes back after its invisible time), change its invisible time and then ack it with
#: the new handle, or change its invisible time to a short lease and leave it.
POP_ACTION_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("ack", 15),
    ("skip", 2),
    ("change-ack", 2),
    ("change-skip", 1),
)


def pop_action(rng: random.Random) -> str:
    names = [a for a, _ in POP_ACTION_WEIGHTS]
    weights = [w for _, w in POP_ACTION_WEIGHTS]
    return rng.choices(names, weights)[0]
