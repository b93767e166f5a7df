"""Raft safety invariants, checked incrementally as the simulator runs.

* Election safety: at most one leader per term; and at the voter, at most one vote per term.
* Log matching: an (index, term) names one entry everywhere, with one previous term.
* Leader completeness: a new leader holds every entry committed in an earlier term. (A leader of
  an old term can still be elected late, DLedger lets a candidate revote in its term and a
  delayed ACCEPT can complete the round; it cannot commit, but it lacks newer commits.)
* Commit agreement: every node that commits an index commits the same entry there.
* State machine safety: every apply (and every restored snapshot) at an index has the same
  data, on every node and every incarnation.
* Durability: an acknowledged proposal stays at its index, through crashes, to the end.
"""

from __future__ import annotations

from rmq_ha.raft.log import RaftLog
from rmq_ha.raft.messages import Entry, EntryKind


class Violation(Exception):
    """A safety invariant failed."""


class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.votes: dict[tuple[str, int], str] = {}
        self.entries: dict[tuple[int, int], tuple[bytes, EntryKind, int | None]] = {}
        #: index -> (entry, lowest term in which a node saw it committed)
        self.committed: dict[int, tuple[Entry, int]] = {}
        self.max_committed = -1
        self.applied: dict[int, bytes] = {}
        self.acked: dict[bytes, int] = {}

    def leader(self, node: str, term: int, log: RaftLog) -> None:
        other = self.leaders.setdefault(term, node)
        if other != node:
            raise Violation(f"two leaders in term {term}: {other} and {node}")
        for index in range(max(log.start, 0), self.max_committed + 1):
            seen = self.committed.get(index)
            if seen is None or seen[1] >= term:
                continue
            e = seen[0]
            have = log.term_at(index)
            if have is None:
                raise Violation(
                    f"leader {node} (term {term}) ends at {log.last_index}, "
                    f"but {index} was committed in term {seen[1]}"
                )
            if have != e.term:
                raise Violation(
                    f"leader {node} (term {term}) has term {have} at {index}, "
                    f"committed was term {e.term} (in term {seen[1]})"
                )

    def vote(self, voter: str, term: int, candidate: str) -> None:
        other = self.votes.setdefault((voter, term), candidate)
        if other != candidate:
            raise Violation(f"{voter} voted for {other} and {candidate} in term {term}")

    def stored_entry(self, node: str, e: Entry, prev_term: int | None) -> None:
        seen = self.entries.get((e.index, e.term))
        if seen is None:
            self.entries[(e.index, e.term)] = (e.data, e.kind, prev_term)
            return
        data, kind, seen_prev = seen
        if data != e.data or kind != e.kind:
            raise Violation(f"{node} stores a different entry at index {e.index} term {e.term}")
        if prev_term is not None and seen_prev is not None and prev_term != seen_prev:
            raise Violation(
                f"log matching: {node} has term {prev_term} before ({e.index}, {e.term}), "
                f"elsewhere {seen_prev}"
            )

    def commit(self, node: str, term: int, log: RaftLog, old: int, new: int) -> None:
        """`node`, in `term`, learned that its entries (old, new] are committed."""
        for index in range(max(old + 1, log.start), new + 1):
            e = log.entry(index)
            seen = self.committed.get(index)
            if seen is None:
                self.committed[index] = (e, term)
                continue
            if seen[0].term != e.term or seen[0].data != e.data:
                raise Violation(
                    f"{node} commits term {e.term} at {index}, committed was term {seen[0].term}"
                )
            if term < seen[1]:
                self.committed[index] = (seen[0], term)
        self.max_committed = max(self.max_committed, new)

    def apply(self, node: str, index: int, data: bytes) -> None:
        seen = self.applied.setdefault(index, data)
        if seen != data:
            raise Violation(f"{node} applies {data!r} at {index}, elsewhere {seen!r}")

    def restore(self, node: str, items: list[tuple[int, bytes]]) -> None:
        for index, data in items:
            self.apply(node, index, data)

    def acknowledge(self, node: str, index: int, data: bytes) -> None:
        """A client got `Applied` for `data` at `index`."""
        if self.applied.get(index) != data:
            raise Violation(f"{node} acknowledged {data!r} at {index}, which holds another")
        self.acked[data] = index

    def final_state(self, node: str, items: list[tuple[int, bytes]]) -> None:
        held = dict(items)
        for data, index in self.acked.items():
            if held.get(index) != data:
                raise Violation(f"acknowledged {data!r} at {index} is lost on {node}")
