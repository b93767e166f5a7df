"""Readable scenario scripts for the Raft core, after etcd raft's interaction tests.

A script is a list of directives. Each is a command line, a `----` line, and the expected
output, ended by a blank line; `#` lines are comments. `run_script` runs the commands against
a small hand-driven group and returns the script with the actual outputs, so a test compares
it with the original (or rewrites the file when the change is intended).

Commands (node names are free; time starts at 0 and moves only when told):

    cluster n0 n1 n2 [seed=1] [config_field=value ...]   fresh nodes (RaftConfig fields)
    restart n1 [term=3] [vote=n2] [log=1,1,2] [snapshot=INDEX@TERM]
                                   rebuild a node from persisted state: log lists entry terms
                                   from index 0 (or after the snapshot)
    advance MS                     move the clock
    tick n0 [n1 ...]               run each node's maintenance
    deliver [SRC -> DST [KIND]]    deliver the messages queued now (optionally only SRC->DST,
                                   only of one kind, e.g. heartbeat-resp); replies are queued
    stabilize                      deliver until no message is left
    drop [SRC -> DST [KIND]]       lose queued messages
    refuse [SRC -> DST [KIND]]     queued requests fail in transport (connection refused): the
                                   sender gets DLedger's failure answer (UNKNOWN, NETWORK_ERROR)
    crash n0                       the node is down: requests to it are refused from now on
                                   (`restart` brings it back)
    inject SRC -> DST vote term=T end=INDEX@TERM | heartbeat term=T
                                   deliver a hand-made request
    propose n0 TEXT                offer an entry
    status n0 [n1 ...]             one line per node
    log n0                         the node's entries as INDEX@TERM
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Iterator
from dataclasses import fields

from rmq_ha.raft.config import RaftConfig
from rmq_ha.raft.core import NEVER, RaftNode
from rmq_ha.raft.messages import (
    Entry,
    EntryKind,
    HeartBeatRequest,
    Message,
    Snapshot,
    VoteRequest,
    failure_response,
)
from rmq_ha.raft.outputs import (
    HardState,
    PersistedState,
    Ready,
)
from rmq_ha.sim.render import entry_text, render_message, render_ready
from rmq_ha.sim.statemachine import ListStateMachine


class ScriptError(Exception):
    pass


class ScriptEnv:
    def __init__(self) -> None:
        self.now = 0
        self.nodes: dict[str, RaftNode] = {}
        self.members: tuple[str, ...] = ()
        self.config = RaftConfig()
        self.seed = 1
        self.queue: list[Message] = []
        self.crashed: set[str] = set()

    # -- helpers -----------------------------------------------------------------------------

    def _node(self, name: str) -> RaftNode:
        if name not in self.nodes:
            raise ScriptError(f"no node {name}")
        return self.nodes[name]

    def _make(self, name: str, persisted: PersistedState | None) -> RaftNode:
        rng = random.Random(f"{self.seed}/{name}")
        return RaftNode(name, self.members, ListStateMachine(), rng, self.config, persisted)

    def _take(self, ready: Ready, name: str) -> list[str]:
        self.queue.extend(ready.send)
        return render_ready(name, ready)

    def _route(self, args: list[str]) -> tuple[str | None, str | None]:
        if not args:
            return None, None
        if len(args) != 3 or args[1] != "->":
            raise ScriptError("expected SRC -> DST")
        return args[0], args[2]

    def _selector(self, args: list[str]) -> Callable[[Message], bool]:
        """[SRC -> DST [KIND]]: which queued messages a deliver or drop takes."""
        if not args:
            return lambda m: True
        src, dst = self._route(args[:3])
        kind = args[3] if len(args) > 3 else None

        def pick(m: Message) -> bool:
            if m.src != src or m.dst != dst:
                return False
            return kind is None or render_message(m).split()[3] == kind

        return pick

    def _deliver_one(self, m: Message) -> list[str]:
        if m.dst in self.crashed:
            failed = failure_response(m)
            if failed is not None:
                self.queue.append(failed)
                return [f"refused {render_message(m)}"]
            return [f"lost {render_message(m)}"]
        node = self.nodes.get(m.dst)
        if node is None:
            return [f"{m.dst}: (no such node, dropped)"]
        return self._take(node.receive(m, self.now), m.dst)

    def cmd_crash(self, args: list[str]) -> list[str]:
        """The node is down: requests to it are refused (the sender gets the failure answer),
        responses to it are lost."""
        self._node(args[0])
        self.crashed.add(args[0])
        return ["ok"]

    # -- commands ----------------------------------------------------------------------------

    def cmd_cluster(self, args: list[str]) -> list[str]:
        names = [a for a in args if "=" not in a]
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        self.seed = int(opts.pop("seed", "1"))
        known = {f.name for f in fields(RaftConfig)}
        unknown = set(opts) - known
        if unknown:
            raise ScriptError(f"unknown config {sorted(unknown)}")
        self.config = RaftConfig(**{k: int(v) for k, v in opts.items()})
        self.members = tuple(names)
        self.nodes = {n: self._make(n, None) for n in names}
        self.queue = []
        self.now = 0
        return ["ok"]

    def cmd_restart(self, args: list[str]) -> list[str]:
        name, opts = args[0], dict(a.split("=", 1) for a in args[1:])
        snapshot = None
        first = 0
        if "snapshot" in opts:
            index, term = (int(x) for x in opts["snapshot"].split("@"))
            sm = ListStateMachine()
            snapshot = Snapshot(index, term, sm.snapshot())
            first = index + 1
        terms = [int(t) for t in opts["log"].split(",")] if opts.get("log") else []
        entries = [Entry(first + i, t, b"", EntryKind.NOOP) for i, t in enumerate(terms)]
        vote = opts.get("vote")
        hs = HardState(int(opts.get("term", "0")), vote if vote not in (None, "-") else None)
        self.nodes[name] = self._make(name, PersistedState(hs, snapshot, entries))
        self.crashed.discard(name)
        self.queue = [m for m in self.queue if m.dst != name]
        return self._status([name])

    def cmd_advance(self, args: list[str]) -> list[str]:
        self.now += int(args[0])
        return [f"now={self.now}"]

    def cmd_tick(self, args: list[str]) -> list[str]:
        out: list[str] = []
        for name in args:
            if name in self.crashed:
                raise ScriptError(f"{name} is down")
            out += self._take(self._node(name).tick(self.now), name)
        return out

    def cmd_deliver(self, args: list[str]) -> list[str]:
        pick = self._selector(args)
        batch = [m for m in self.queue if pick(m)]
        self.queue = [m for m in self.queue if not pick(m)]
        out: list[str] = []
        for m in batch:
            out += self._deliver_one(m)
        return out

    def cmd_stabilize(self, args: list[str]) -> list[str]:
        out: list[str] = []
        for _ in range(1000):
            if not self.queue:
                return out
            out += self.cmd_deliver([])
        raise ScriptError("stabilize: messages keep coming")

    def cmd_drop(self, args: list[str]) -> list[str]:
        pick = self._selector(args)
        keep = [m for m in self.queue if not pick(m)]
        dropped = len(self.queue) - len(keep)
        self.queue = keep
        return [f"dropped {dropped}"]

    def cmd_refuse(self, args: list[str]) -> list[str]:
        """Queued requests fail in transport: the sender gets the failure response."""
        pick = self._selector(args)
        out: list[str] = []
        keep: list[Message] = []
        for m in self.queue:
            failed = failure_response(m) if pick(m) else None
            if failed is None:
                keep.append(m)
            else:
                out.append(f"refused {render_message(m)}")
                keep.append(failed)
        self.queue = keep
        return out

    def cmd_inject(self, args: list[str]) -> list[str]:
        src, dst = self._route(args[:3])
        assert src is not None and dst is not None
        kind, opts = args[3], dict(a.split("=", 1) for a in args[4:])
        term = int(opts["term"])
        msg: Message
        if kind == "vote":
            index, end_term = (int(x) for x in opts["end"].split("@"))
            msg = VoteRequest(src, dst, term, index, end_term, 1)
        elif kind == "heartbeat":
            msg = HeartBeatRequest(src, dst, term, 1)
        else:
            raise ScriptError(f"cannot inject {kind}")
        return self._deliver_one(msg)

    def cmd_propose(self, args: list[str]) -> list[str]:
        name = args[0]
        _, ready = self._node(name).propose(" ".join(args[1:]).encode(), self.now)
        return self._take(ready, name)

    def _status(self, names: list[str]) -> list[str]:
        out = []
        for name in names:
            s = self._node(name).status()
            last = s.last_election_outcome.value if s.last_election_outcome else "-"
            nxt = (
                "never"
                if s.next_time_to_request_vote_ms == NEVER
                else s.next_time_to_request_vote_ms
            )
            out.append(
                f"{name}: {s.role.value} term={s.term} vote={s.voted_for or '-'} "
                f"leader={s.leader_id or '-'} end={s.ledger_end_index}@{s.ledger_end_term} "
                f"commit={s.commit_index} applied={s.applied_index} "
                f"next_vote={nxt} last_round={last}"
            )
        return out

    def cmd_status(self, args: list[str]) -> list[str]:
        return self._status(args)

    def cmd_log(self, args: list[str]) -> list[str]:
        log = self._node(args[0]).log
        entries = " ".join(entry_text(e).replace(" noop", "") for e in log.all_entries())
        return [f"{args[0]}: snapshot={log.snapshot_index} entries: {entries or '-'}"]

    def run(self, line: str) -> list[str]:
        words = shlex.split(line)
        handler: Callable[[list[str]], list[str]] | None = getattr(self, f"cmd_{words[0]}", None)
        if handler is None:
            raise ScriptError(f"unknown command {words[0]!r}")
        return handler(words[1:]) or ["ok"]


def _directives(text: str) -> Iterator[tuple[list[str], str, list[str]]]:
    """Yields (lines before the command, command, expected output lines)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        before: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith("#")):
            before.append(lines[i])
            i += 1
        if i >= len(lines):
            yield before, "", []
            return
        command = lines[i]
        i += 1
        if i >= len(lines) or lines[i] != "----":
            raise ScriptError(f"missing ---- after {command!r}")
        i += 1
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        yield before, command, expected


def run_script(text: str) -> str:
    """Runs every directive; returns the script with the actual outputs in place."""
    env = ScriptEnv()
    out: list[str] = []
    for before, command, _expected in _directives(text):
        out += before
        if not command:
            break
        out += [command, "----", *env.run(command)]
    return "\n".join(out).rstrip("\n") + "\n"
