"""A seeded, deterministic simulation of a Raft group.

One `random.Random(seed)` drives everything: the fault plan, message delays, losses and
duplicates, fsync latencies, crashes, and every node's own Random. A virtual clock jumps from
event to event, so a few hundred simulated seconds take milliseconds, and the same seed always
replays the same run.

Each node is a `RaftNode` driven the way a real driver must drive it: one call at a time; the
batch's persist operations are written to the node's `DurableStorage` when its fsync completes
(a random latency later); only then are its messages sent and its results surfaced; inputs that
arrive meanwhile wait. A crash drops the node's memory and the unfinished batch (keeping a
random prefix of it, as a torn write), and a restart rebuilds the node from its storage alone.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rmq_ha.controller.invariants import InvariantViolation
from rmq_ha.raft.config import RaftConfig
from rmq_ha.raft.core import RaftNode, TestHooks
from rmq_ha.raft.messages import (
    Message,
    Role,
    VoteResponse,
    VoteResult,
    failure_response,
)
from rmq_ha.raft.outputs import (
    AppendLog,
    PersistOp,
    ProposalStatus,
    Ready,
    SaveHardState,
    SaveSnapshot,
    TruncateLog,
)
from rmq_ha.sim import brokers
from rmq_ha.sim.brokers import ControllerSimConfig, ControllerWorld
from rmq_ha.sim.checker import Checker, Violation
from rmq_ha.sim.render import render_message
from rmq_ha.sim.statemachine import ControllerSimStateMachine, ListStateMachine
from rmq_ha.sim.storage import DurableStorage, StorageError

_TICK, _DELIVER, _FSYNC, _NEMESIS, _PROPOSE, _CHECK, _BROKER = range(7)
assert (_PROPOSE, _BROKER) == (brokers._PROPOSE_KIND, brokers._BROKER_KIND)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One run's fault plan; `SimConfig.for_seed` draws it from the seed."""

    nodes: int = 3
    duration_ms: int = 240_000
    #: After `duration_ms`: faults stop, everyone restarts, the network heals; the group must
    #: converge within this long.
    settle_ms: int = 60_000
    loss: float = 0.02
    duplicate: float = 0.01
    delay_min_ms: int = 1
    delay_max_ms: int = 10
    #: Chance and bound of a long delay (reorders messages).
    slow: float = 0.02
    slow_max_ms: int = 3000
    #: Chance that a message to a crashed node is refused at once (else it vanishes).
    refuse: float = 0.5
    fsync_min_ms: int = 0
    fsync_max_ms: int = 5
    #: Chance of a slow fsync (up to 500 ms).
    fsync_stall: float = 0.01
    #: Chance that a crash keeps part of the batch being written.
    torn_write: float = 0.5
    nemesis_min_ms: int = 2000
    nemesis_max_ms: int = 15000
    propose_min_ms: int = 500
    propose_max_ms: int = 4000
    tick_jitter_ms: int = 10
    #: Scheduling delay: the chance that a node, about to run (a message or a tick), runs late
    #: instead, as a starved or paused process does, by up to `late_max_ms`; everything it was
    #: sent meanwhile waits and is handled, in order, once it runs again. Off by default.
    late: float = 0.0
    late_max_ms: int = 0
    #: A run needing more events than this is reported (a livelock or message storm).
    max_events: int = 200_000
    raft: RaftConfig = field(default_factory=RaftConfig)

    @classmethod
    def for_seed(cls, rng: random.Random) -> SimConfig:
        snapshot_every = rng.choice((0, 8, 16, 32, 64))
        return cls(
            nodes=rng.choice((3, 3, 3, 5)),
            duration_ms=rng.randrange(150_000, 300_000),
            loss=rng.choice((0.0, 0.01, 0.05, 0.15)),
            duplicate=rng.choice((0.0, 0.01, 0.05)),
            delay_max_ms=rng.choice((2, 10, 50)),
            slow=rng.choice((0.0, 0.01, 0.05)),
            refuse=rng.random(),
            fsync_max_ms=rng.choice((0, 2, 10)),
            torn_write=rng.random(),
            nemesis_min_ms=rng.choice((1000, 3000)),
            nemesis_max_ms=rng.choice((8000, 20000)),
            propose_min_ms=rng.choice((100, 500)),
            propose_max_ms=rng.choice((2000, 5000)),
            tick_jitter_ms=rng.choice((0, 10)),
            raft=RaftConfig(
                snapshot_threshold_entries=snapshot_every,
                snapshot_trailing_entries=rng.choice((0, 4)),
                max_entries_per_push=rng.choice((1, 4, 64)),
            ),
        )


@dataclass
class SimResult:
    seed: int
    ok: bool
    error: str | None = None
    sim_ms: int = 0
    wall_ms: float = 0.0
    events: int = 0
    leaders: int = 0
    max_term: int = 0
    committed: int = -1
    acked: int = 0
    crashes: int = 0
    #: Crashes while a batch was being written (its messages never went out) ...
    lost_writes: int = 0
    #: ... of which kept part of the batch.
    torn_writes: int = 0
    #: Uncommitted entries cut from followers' logs.
    truncated: int = 0
    #: Snapshots taken or installed.
    snapshots: int = 0
    #: Controller mode: broker requests handled by a leader, and proposed as events.
    controller: bool = False
    requests: int = 0
    proposed: int = 0
    trace: list[str] = field(default_factory=list)


class _Node:
    __slots__ = (
        "core",
        "crash_in_fsync",
        "inbox",
        "incarnation",
        "late_until",
        "name",
        "pending",
        "seen_commit",
        "sm",
        "storage",
        "tick_at",
        "tick_token",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.core: RaftNode | None = None
        self.sm: ListStateMachine | ControllerSimStateMachine | None = None
        self.storage = DurableStorage()
        self.incarnation = 0
        self.pending: Ready | None = None
        self.inbox: deque[tuple[int, object]] = deque()
        self.tick_at = -1
        self.tick_token = 0
        self.seen_commit = -1
        #: Crash during the next fsync, losing (part of) its batch.
        self.crash_in_fsync = False
        #: Runs late (scheduling delay) until then: inputs wait in `inbox`.
        self.late_until = 0


class Simulation:
    def __init__(
        self,
        seed: int,
        config: SimConfig | None = None,
        hooks: TestHooks | None = None,
        trace: bool = False,
        trace_messages: bool = False,
        controller: bool = False,
        controller_bug: str | None = None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = config if config is not None else SimConfig.for_seed(self.rng)
        self.controller_bug = controller_bug
        self.ctl: ControllerWorld | None = None
        if controller or controller_bug:
            ccfg = ControllerSimConfig.for_seed(self.rng)
            if controller_bug == "unclean-election":
                ccfg = replace(ccfg, enable_elect_unclean_master=True)
            if config is None:
                self.cfg = replace(self.cfg, duration_ms=self.rng.randrange(60_000, 150_000))
        self.hooks = hooks
        self.tracing = trace or trace_messages
        self.tracing_messages = trace_messages
        self.trace: list[str] = []
        self.now = 0
        self.events = 0
        self._queue: list[tuple[int, int, int, str, object]] = []
        self._seq = 0
        self.names = tuple(f"n{i}" for i in range(self.cfg.nodes))
        self.nodes = {n: _Node(n) for n in self.names}
        self.blocked: set[tuple[str, str]] = set()
        self.checker = Checker()
        self.loss = self.cfg.loss
        self.duplicate = self.cfg.duplicate
        self.faults_on = True
        self.crashes = 0
        self.torn_writes = 0
        self.lost_writes = 0
        self.truncated = 0
        self.snapshots = 0
        self.next_payload = 0
        self.proposals: dict[tuple[str, int, int], bytes] = {}
        self.believed_leader: str | None = None
        self.callbacks: dict[tuple[str, int, int], Callable[[object], None]] = {}
        if controller or controller_bug:
            self.ctl = ControllerWorld(self, ccfg)
            if controller_bug == "unclean-election":
                # The checker believes unclean election is off while the controller does it.
                self.ctl.invariants.enable_elect_unclean_master = False

    # -- running -----------------------------------------------------------------------------

    def run(self) -> SimResult:
        started = time.perf_counter()
        result = SimResult(self.seed, ok=True)
        try:
            self._run()
        except (Violation, StorageError, InvariantViolation) as exc:
            result.ok, result.error = False, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a core assertion is a failure too, with its seed
            result.ok, result.error = False, f"{type(exc).__name__}: {exc!r}"
        result.sim_ms = self.now
        result.wall_ms = (time.perf_counter() - started) * 1000
        result.events = self.events
        result.leaders = len(self.checker.leaders)
        result.max_term = max(self.checker.leaders, default=0)
        result.committed = self.checker.max_committed
        result.acked = len(self.checker.acked)
        result.crashes = self.crashes
        result.torn_writes = self.torn_writes
        result.lost_writes = self.lost_writes
        result.truncated = self.truncated
        result.snapshots = self.snapshots
        if self.ctl is not None:
            result.controller = True
            result.requests = self.ctl.requests
            result.proposed = self.ctl.proposed
        result.trace = self.trace
        return result

    def _run(self) -> None:
        for name in self.names:
            self._start(self.nodes[name], first_tick_ms=self.rng.randrange(0, 200))
        self._at(self.rng.randrange(self.cfg.nemesis_min_ms, self.cfg.nemesis_max_ms), _NEMESIS)
        if self.ctl is not None:
            self.ctl.start()
        else:
            self._at(self.rng.randrange(500, 3000), _PROPOSE)
        end = self.cfg.duration_ms
        self._loop(end)
        self._settle()
        self._loop(end + self.cfg.settle_ms)
        if not self._converged():
            raise Violation(f"no convergence {self.cfg.settle_ms} ms after faults stopped")
        for node in self.nodes.values():
            assert node.sm is not None
            self.checker.final_state(node.name, node.sm.items)

    def _loop(self, until: int, stop: Callable[[], bool] | None = None) -> None:
        queue = self._queue
        while queue and queue[0][0] <= until:
            if stop is not None and stop():
                return
            when, _, kind, name, payload = heapq.heappop(queue)
            self.now = when
            self.events += 1
            if self.events > self.cfg.max_events:
                raise Violation(f"over {self.cfg.max_events} events: a message storm?")
            if kind == _DELIVER:
                self._deliver(payload)  # type: ignore[arg-type]
            elif kind == _TICK:
                self._on_tick(self.nodes[name], payload)
            elif kind == _FSYNC:
                self._on_fsync(self.nodes[name], payload)
            elif kind == _NEMESIS:
                if self.faults_on:
                    self._nemesis()
                    self._at(
                        self.now
                        + self.rng.randrange(self.cfg.nemesis_min_ms, self.cfg.nemesis_max_ms),
                        _NEMESIS,
                    )
            elif kind == _PROPOSE:
                if self.faults_on:
                    self._client_propose()
                    gap = self.rng.randrange(self.cfg.propose_min_ms, self.cfg.propose_max_ms)
                    self._at(self.now + gap, _PROPOSE)
            elif kind == _BROKER:
                assert self.ctl is not None
                self.ctl.on_event(payload)  # type: ignore[arg-type]
            elif kind == _CHECK and self._converged():
                return
            elif kind == _CHECK:
                self._at(self.now + 500, _CHECK)

    def _at(self, when: int, kind: int, name: str = "", payload: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, kind, name, payload))

    def _log(self, text: str) -> None:
        self.trace.append(f"{self.now:>9} {text}")

    # -- node lifecycle ----------------------------------------------------------------------

    def _start(self, node: _Node, first_tick_ms: int | None = None) -> None:
        name = node.name
        checker = self.checker
        sm: ListStateMachine | ControllerSimStateMachine
        if self.ctl is not None:
            self.ctl.invariants.forget_node(name)  # a new incarnation replays from scratch
            self.ctl.node_restarted(name)
            sm = ControllerSimStateMachine(
                name,
                self.ctl.invariants,
                on_apply=lambda i, d: checker.apply(name, i, d),
                on_restore=lambda items: checker.restore(name, items),
                second_master=self.controller_bug == "second-master",
            )
        else:
            sm = ListStateMachine(
                on_apply=lambda i, d: checker.apply(name, i, d),
                on_restore=lambda items: checker.restore(name, items),
            )
        core = RaftNode(
            name,
            self.names,
            sm,
            random.Random(self.rng.getrandbits(64)),
            self.cfg.raft,
            node.storage.persisted(),
            self.hooks,
        )
        node.storage.reset_log(core.log.all_entries())
        node.core, node.sm = core, sm
        node.seen_commit = core.commit_index
        node.tick_at = -1
        node.late_until = 0
        if first_tick_ms is None:
            self._schedule_tick(node)
        else:
            node.tick_at = first_tick_ms
            node.tick_token += 1
            self._at(first_tick_ms, _TICK, node.name, node.tick_token)

    def _crash(self, node: _Node) -> None:
        if node.core is None:
            return
        self.crashes += 1
        kept = 0
        if node.pending is not None:
            self.lost_writes += 1
            if self.rng.random() < self.cfg.torn_write:
                ops = node.pending.persist
                kept = self.rng.randrange(len(ops) + 1)
                self._write(node, ops[:kept])
                self.torn_writes += kept > 0
        if self.tracing:
            self._log(f"{node.name} CRASH (kept {kept} unsynced ops)")
        node.core = None
        node.sm = None
        node.pending = None
        node.inbox.clear()
        node.incarnation += 1
        node.tick_token += 1

    # -- driving a node ----------------------------------------------------------------------

    def _feed(self, node: _Node, kind: int, payload: object) -> None:
        if node.core is None:
            return
        if (
            node.pending is not None
            or (node.late_until and node.inbox)  # it has not caught up since running late
            or self._running_late(node)
        ):
            node.inbox.append((kind, payload))
            return
        self._call(node, kind, payload)

    def _running_late(self, node: _Node) -> bool:
        """True while `node` runs late; may start a new delay (scheduling-delay faults)."""
        if node.late_until > self.now:
            return True
        cfg = self.cfg
        if cfg.late and self.faults_on and self.rng.random() < cfg.late:
            node.late_until = self.now + 1 + int(self.rng.random() * cfg.late_max_ms)
            if self.tracing:
                self._log(f"{node.name} runs late until {node.late_until}")
            self._schedule_tick(node)  # wakes it then
            return True
        return False

    def _call(self, node: _Node, kind: int, payload: object) -> None:
        core = node.core
        assert core is not None
        now = self.now
        if kind == _DELIVER:
            ready = core.receive(payload, now)  # type: ignore[arg-type]
        elif kind == _PROPOSE:
            callback = None
            if isinstance(payload, tuple):
                data, callback = payload
            else:
                data = payload
            pid, ready = core.propose(data, now)
            self.proposals[(node.name, node.incarnation, pid)] = data
            if callback is not None:
                self.callbacks[(node.name, node.incarnation, pid)] = callback
        else:
            ready = core.tick(now)
        if self.tracing:
            for text in ready.events:
                self._log(text)
        if ready.role is not None:
            rs = ready.role
            if self.tracing:
                self._log(f"{node.name} {rs.role.value} term={rs.term} leader={rs.leader_id}")
            if rs.role is Role.LEADER and ready.role.term == core.term:
                self.checker.leader(node.name, rs.term, core.log)
        if ready.commit_index is not None:
            self.checker.commit(node.name, core.term, core.log, node.seen_commit, core.commit_index)
            node.seen_commit = core.commit_index
        if ready.persist:
            node.pending = ready
            cfg = self.cfg
            delay = cfg.fsync_min_ms + int(
                self.rng.random() * (cfg.fsync_max_ms - cfg.fsync_min_ms + 1)
            )
            if self.rng.random() < cfg.fsync_stall:
                delay += 50 + int(self.rng.random() * 450)
            self._at(now + delay, _FSYNC, node.name, node.incarnation)
        else:
            self._release(node, ready)
        self._schedule_tick(node)

    def _on_fsync(self, node: _Node, incarnation: object) -> None:
        if incarnation != node.incarnation or node.pending is None:
            return
        if node.crash_in_fsync:
            node.crash_in_fsync = False
            self._crash(node)
            return
        ready = node.pending
        node.pending = None
        self._write(node, ready.persist)
        self._check_durable(node)
        self._release(node, ready)
        while node.inbox and node.pending is None and node.core is not None:
            kind, payload = node.inbox.popleft()
            self._call(node, kind, payload)
        if node.core is not None:
            self._schedule_tick(node)

    def _write(self, node: _Node, ops: tuple[PersistOp, ...]) -> None:
        storage = node.storage
        for op in ops:
            if isinstance(op, AppendLog):
                prev = storage.term_at(op.entries[0].index - 1) if op.entries else None
                for e in op.entries:
                    self.checker.stored_entry(node.name, e, prev)
                    prev = e.term
            elif isinstance(op, SaveHardState) and op.hard_state.voted_for is not None:
                hs = op.hard_state
                self.checker.vote(node.name, hs.term, hs.voted_for)  # type: ignore[arg-type]
            elif isinstance(op, TruncateLog):
                self.truncated += max(0, storage.last_index - op.after_index)
            elif isinstance(op, SaveSnapshot):
                self.snapshots += 1
            storage.apply(op)

    def _check_durable(self, node: _Node) -> None:
        """Once a batch is durable, memory and disk must agree: anything the core changed but
        did not ask to persist would be lost by a crash."""
        core, storage = node.core, node.storage
        assert core is not None
        if core.hard_state != storage.hard_state:
            raise Violation(f"{node.name} holds {core.hard_state}, disk {storage.hard_state}")
        if core.log.snapshot_index != (
            storage.snapshot.last_index if storage.snapshot is not None else -1
        ):
            raise Violation(f"{node.name} snapshot differs from disk")
        if core.log.all_entries() != tuple(storage.entries):
            raise Violation(f"{node.name} log differs from disk")

    def _release(self, node: _Node, ready: Ready) -> None:
        for msg in ready.send:
            if isinstance(msg, VoteResponse) and msg.result is VoteResult.ACCEPT:
                self.checker.vote(msg.src, msg.term, msg.dst)
            self._send(msg)
        for reply in ready.proposals:
            if reply.status is ProposalStatus.REJECTED:
                self.believed_leader = reply.leader_id
            elif reply.status is ProposalStatus.ACCEPTED:
                self.believed_leader = node.name
        for applied in ready.applied:
            if applied.proposal_id is not None:
                key = (node.name, node.incarnation, applied.proposal_id)
                data = self.proposals.pop(key)
                self.checker.acknowledge(node.name, applied.index, data)
                callback = self.callbacks.pop(key, None)
                if callback is not None:
                    callback(applied.result)

    def _schedule_tick(self, node: _Node) -> None:
        core = node.core
        if core is None:
            return
        when = max(core.next_tick_ms(), self.now, node.late_until)
        if self.now <= node.tick_at <= when:
            return  # an earlier tick is already due
        if self.cfg.tick_jitter_ms:
            when += int(self.rng.random() * self.cfg.tick_jitter_ms)
        node.tick_at = when
        node.tick_token += 1
        self._at(when, _TICK, node.name, node.tick_token)

    def _on_tick(self, node: _Node, token: object) -> None:
        if node.core is None or token != node.tick_token:
            return
        node.tick_at = -1
        if node.pending is not None:
            return  # rescheduled when the fsync completes
        if node.late_until:
            if node.late_until > self.now:
                self._schedule_tick(node)
                return
            # It runs again: first what it was sent meanwhile, in order.
            while node.inbox and node.pending is None and node.core is not None:
                kind, payload = node.inbox.popleft()
                self._call(node, kind, payload)
            if node.core is None or node.pending is not None:
                return
        if node.core.next_tick_ms() > self.now:
            self._schedule_tick(node)
            return
        if self._running_late(node):
            return
        self._call(node, _TICK, None)

    # -- network -----------------------------------------------------------------------------

    def _delay(self) -> int:
        rng = self.rng
        cfg = self.cfg
        if rng.random() < cfg.slow:
            return int(rng.random() * cfg.slow_max_ms)
        return cfg.delay_min_ms + int(rng.random() * (cfg.delay_max_ms - cfg.delay_min_ms + 1))

    def _send(self, msg: Message) -> None:
        if (msg.src, msg.dst) in self.blocked:
            return
        rng = self.rng
        if rng.random() < self.loss:
            return
        self._at(self.now + self._delay(), _DELIVER, msg.dst, msg)
        if rng.random() < self.duplicate:
            self._at(self.now + self._delay(), _DELIVER, msg.dst, msg)

    def _deliver(self, msg: Message) -> None:
        if (msg.src, msg.dst) in self.blocked:
            return
        node = self.nodes[msg.dst]
        if self.tracing_messages:
            self._log(render_message(msg) + ("" if node.core is not None else " (down)"))
        if node.core is None:
            if self.rng.random() < self.cfg.refuse:
                failed = failure_response(msg)
                if failed is not None:
                    self._at(self.now + self._delay(), _DELIVER, failed.dst, failed)
            return
        self._feed(node, _DELIVER, msg)

    # -- faults and clients ------------------------------------------------------------------

    def _nemesis(self) -> None:
        rng = self.rng
        down = [n for n in self.nodes.values() if n.core is None]
        up = [n for n in self.nodes.values() if n.core is not None]
        action = rng.choice(
            ("crash", "crash-in-fsync", "restart", "restart", "partition", "oneway", "heal")
        )
        if action == "crash-in-fsync" and up:
            node = rng.choice(up)
            node.crash_in_fsync = True
            if self.tracing:
                self._log(f"{node.name} will crash in its next fsync")
        elif action == "restart" or (action == "crash" and len(down) > len(self.names) // 2):
            if down:
                node = rng.choice(down)
                if self.tracing:
                    self._log(f"{node.name} RESTART")
                self._start(node)
        elif action == "crash" and up:
            leaders = [n for n in up if n.core is not None and n.core.role is Role.LEADER]
            node = rng.choice(leaders) if leaders and rng.random() < 0.5 else rng.choice(up)
            self._crash(node)
        elif action == "partition":
            names = list(self.names)
            rng.shuffle(names)
            cut = rng.randrange(1, len(names))
            left, right = names[:cut], names[cut:]
            self.blocked = {(a, b) for a in left for b in right} | {
                (b, a) for a in left for b in right
            }
            if self.tracing:
                self._log(f"PARTITION {sorted(left)} | {sorted(right)}")
        elif action == "oneway":
            a, b = rng.sample(self.names, 2)
            self.blocked.add((a, b))
            if self.tracing:
                self._log(f"BLOCK {a} -> {b}")
        else:
            self.blocked = set()
            if self.tracing:
                self._log("HEAL")

    def _client_propose(self) -> None:
        up = [n for n in self.names if self.nodes[n].core is not None]
        if not up:
            return
        target = self.believed_leader
        if target not in up or self.rng.random() < 0.2:
            target = self.rng.choice(up)
        self.next_payload += 1
        self._feed(self.nodes[target], _PROPOSE, b"v%d" % self.next_payload)

    def _settle(self) -> None:
        self.faults_on = False
        for node in self.nodes.values():
            node.crash_in_fsync = False
        self.blocked = set()
        self.loss = 0.0
        self.duplicate = 0.0
        self.cfg = replace(self.cfg, slow=0.0, fsync_stall=0.0)
        for node in self.nodes.values():
            if node.core is None:
                self._start(node)
        if self.tracing:
            self._log("SETTLE: faults stop, all nodes up, network healed")
        self._at(self.now + 500, _CHECK)

    def _serving_leader(self) -> _Node | None:
        leaders = [
            n
            for n in self.nodes.values()
            if n.core is not None and n.core.role is Role.LEADER and n.core.serving
        ]
        return leaders[0] if len(leaders) == 1 else None

    def failovers(self, kills: int, limit_ms: int, out: FailoverResult) -> None:
        """See `run_failover_seed`."""
        hb = self.cfg.raft.heart_beat_time_interval_ms
        leak = self.cfg.raft.max_heart_beat_leak
        for name in self.names:
            self._start(self.nodes[name], first_tick_ms=self.rng.randrange(0, 200))
        for _ in range(kills):
            deadline = self.now + limit_ms
            self._loop(deadline, stop=self._converged)
            if not self._converged():
                raise Violation(f"not stable {limit_ms} ms after the last restart")
            self._loop(self.now + self.rng.randrange((leak + 1) * hb, (leak + 2) * hb))
            old = self._serving_leader()
            if old is None:
                continue  # scheduling delay deposed it meanwhile: wait for the next one
            assert old.core is not None
            t0, term0 = self.now, old.core.term
            if self.tracing:
                self._log(f"KILL leader {old.name} (term {term0})")
            self._crash(old)
            self._loop(t0 + limit_ms, stop=lambda: self._serving_leader() is not None)
            new = self._serving_leader()
            if new is None:
                raise Violation(f"no leader {limit_ms} ms after {old.name} crashed")
            assert new.core is not None
            out.failover_ms.append(self.now - t0)
            out.terms.append(new.core.term - term0)
            if self.tracing:
                self._log(f"FAILOVER {self.now - t0} ms, {new.core.term - term0} terms")
            self._start(old)

    def _converged(self) -> bool:
        cores = [n.core for n in self.nodes.values()]
        leaders = [c for c in cores if c is not None and c.role is Role.LEADER and c.serving]
        if len(leaders) != 1:
            return False
        target = leaders[0].commit_index
        for node in self.nodes.values():
            if node.core is None or node.pending is not None:
                return False
            if node.core.applied_index != target:
                return False
        first = self.nodes[self.names[0]].sm
        assert first is not None
        return all(n.sm is not None and n.sm.items == first.items for n in self.nodes.values())


def failover_config(raft: RaftConfig | None = None, **overrides: object) -> SimConfig:
    """A quiet network like `rmq-ha bench controller`'s loopback (no loss, 1-2 ms delays, fast
    fsyncs, a dead peer's requests refused at once) and its Raft timing (200 ms heartbeats,
    maxHeartBeatLeak 3, vote interval 30-100 ms); `overrides` are SimConfig fields, e.g.
    `late`/`late_max_ms` for scheduling delay."""
    if raft is None:
        raft = RaftConfig(
            heart_beat_time_interval_ms=200,
            max_heart_beat_leak=3,
            min_vote_interval_ms=30,
            max_vote_interval_ms=100,
        )
    base = SimConfig(
        nodes=3,
        loss=0.0,
        duplicate=0.0,
        delay_min_ms=1,
        delay_max_ms=2,
        slow=0.0,
        refuse=1.0,
        fsync_min_ms=0,
        fsync_max_ms=2,
        fsync_stall=0.0,
        torn_write=0.0,
        tick_jitter_ms=1,
        raft=raft,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


@dataclass
class FailoverResult:
    """Leader crashes in one seed: for each, the virtual milliseconds from the crash until
    another node leads and serves (its no-op committed), and the term increments it took."""

    seed: int
    ok: bool
    error: str | None = None
    failover_ms: list[int] = field(default_factory=list)
    terms: list[int] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)


def run_failover_seed(
    seed: int, config: SimConfig, kills: int = 1, limit_ms: int = 60_000, trace: bool = False
) -> FailoverResult:
    """Starts a group, then `kills` times: waits until it is stable (one serving leader, every
    node caught up), waits a random 4-5 heartbeat intervals, crashes the leader, runs until
    another node serves, and restarts the crashed node. Faults are `config`'s (its nemesis is
    not run); a seed that finds no leader within `limit_ms` fails."""
    sim = Simulation(seed, config=config, trace=trace)
    result = FailoverResult(seed, ok=True)
    try:
        sim.failovers(kills, limit_ms, result)
    except (Violation, StorageError, InvariantViolation) as exc:
        result.ok, result.error = False, f"{type(exc).__name__}: {exc}"
    result.trace = sim.trace
    return result


def run_seed(
    seed: int,
    hooks: TestHooks | None = None,
    trace: bool = False,
    trace_messages: bool = False,
    controller: bool = False,
    controller_bug: str | None = None,
) -> SimResult:
    return Simulation(
        seed,
        hooks=hooks,
        trace=trace,
        trace_messages=trace_messages,
        controller=controller,
        controller_bug=controller_bug,
    ).run()
