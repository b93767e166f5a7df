"""One-line renderings of messages, persist operations and Ready batches (scripts, traces)."""

from __future__ import annotations

from rmq_ha.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from rmq_ha.raft.outputs import (
    AppendLog,
    CompactLog,
    PersistOp,
    Ready,
    SaveHardState,
    SaveSnapshot,
    TruncateLog,
)


def entry_text(e: Entry) -> str:
    return f"{e.index}@{e.term}" + (" noop" if e.kind is EntryKind.NOOP else "")


def render_message(m: Message) -> str:
    head = f"{m.src} -> {m.dst}:"
    if isinstance(m, VoteRequest):
        return f"{head} vote term={m.term} end={m.ledger_end_index}@{m.ledger_end_term}"
    if isinstance(m, VoteResponse):
        return f"{head} vote-resp term={m.term} {m.result.value}"
    if isinstance(m, HeartBeatRequest):
        return f"{head} heartbeat term={m.term}"
    if isinstance(m, HeartBeatResponse):
        return f"{head} heartbeat-resp term={m.term} {m.code.name} commit={m.commit_index}"
    if isinstance(m, AppendRequest):
        entries = ", ".join(entry_text(e) for e in m.entries)
        return (
            f"{head} append term={m.term} prev={m.prev_index}@{m.prev_term} "
            f"entries=[{entries}] commit={m.leader_commit}"
        )
    if isinstance(m, AppendResponse):
        return (
            f"{head} append-resp term={m.term} {m.code.name} match={m.match_index} "
            f"commit={m.commit_index}"
        )
    if isinstance(m, InstallSnapshotRequest):
        s = m.snapshot
        return f"{head} snapshot term={m.term} last={s.last_index}@{s.last_term}"
    if isinstance(m, InstallSnapshotResponse):
        return f"{head} snapshot-resp term={m.term} {m.code.name} match={m.match_index}"
    raise ValueError(f"cannot render {m!r}")


def render_op(op: PersistOp) -> str:
    if isinstance(op, SaveHardState):
        return f"persist term={op.hard_state.term} vote={op.hard_state.voted_for or '-'}"
    if isinstance(op, AppendLog):
        return "persist append " + ", ".join(entry_text(e) for e in op.entries)
    if isinstance(op, TruncateLog):
        return f"persist truncate after {op.after_index}"
    if isinstance(op, SaveSnapshot):
        return f"persist snapshot {op.snapshot.last_index}@{op.snapshot.last_term}"
    if isinstance(op, CompactLog):
        return f"persist compact through {op.through_index}"
    raise ValueError(f"cannot render {op!r}")


def render_ready(node: str, ready: Ready) -> list[str]:
    out = [f"{node}: {text.removeprefix(node + ': ')}" for text in ready.events]
    out += [f"{node}: {render_op(op)}" for op in ready.persist]
    out += [render_message(m) for m in ready.send]
    if ready.commit_index is not None:
        out.append(f"{node}: commit {ready.commit_index}")
    out += [f"{node}: applied {a.index}@{a.term} -> {a.result}" for a in ready.applied]
    for p in ready.proposals:
        where = f" {p.index}@{p.term}" if p.index >= 0 else ""
        why = f" {p.code.name}" if p.code.name != "SUCCESS" else ""
        out.append(f"{node}: proposal {p.status.value}{where}{why}")
    if ready.role is not None:
        r = ready.role
        serving = " serving" if r.serving else ""
        out.append(
            f"{node}: role {r.role.value} term={r.term} leader={r.leader_id or '-'}{serving}"
        )
    return out
