"""Faults: partitions (a dedicated iptables chain per run), kill -9, SIGSTOP, clock bump and
strobe (libfaketime), packet delay and loss (netem, or iptables loss where the kernel has no
netem), and file corruption on a stopped broker.

Every fault goes through the same three steps:

1. resolve its targets, asking the cluster first ("the master", "the controller leader"); a
   fault aimed at the master or the leader when there is none (or at nothing that runs) is
   skipped and recorded as skipped, never turned on some other node;
2. write the journal entry with the exact undo actions (state.faults.json), then act, on all
   targets at once;
3. on stop, run the undo actions on all targets at once, and forget the entry only once they
   all succeeded.

The history gets `fault-start` as the first action begins and `fault-stop` once the last undo
finished, with when the fault was wholly applied and when its healing began (`applied_ns`,
`healing_ns`); nemesis.jsonl has every step with its time.

`heal_journal` runs the undo actions of a crashed run from the journal alone, so `hosts down`
or the next run heals whatever was left in force.
"""

from __future__ import annotations

import json
import logging
import random
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from rmq_jepsen import generator as gen
from rmq_jepsen.control import Control, Host, Remote, SSHRemote
from rmq_jepsen.db import DB, ClusterView, Role
from rmq_jepsen.recorder import Recorder
from rmq_jepsen.state import StateDir

log = logging.getLogger("rmq_jepsen.nemesis")
T = TypeVar("T")

IPT = "iptables -w 5"
CHAIN_PREFIX = "RMQJ"


def chain_name(run_id: str, kind: str = "P") -> str:
    """iptables chain names are at most 28 characters."""
    return f"{CHAIN_PREFIX}{kind}-{run_id[-20:]}"[:28]


def chain_heal_cmd(chain: str) -> str:
    c = shlex.quote(chain)
    return (
        f"while {IPT} -D INPUT -j {c} 2>/dev/null; do :; done; "
        f"{IPT} -F {c} 2>/dev/null; {IPT} -X {c} 2>/dev/null; "
        f"! {IPT} -S {c} >/dev/null 2>&1"
    )


def chain_install_cmd(chain: str, drop_from: list[str], probability: float | None = None) -> str:
    c = shlex.quote(chain)
    stat = (
        f" -m statistic --mode random --probability {probability:.3f}"
        if probability is not None
        else ""
    )
    rules = "; ".join(f"{IPT} -A {c} -s {shlex.quote(ip)}{stat} -j DROP" for ip in drop_from)
    return (
        f"({IPT} -N {c} 2>/dev/null || {IPT} -F {c}) && "
        f"({IPT} -C INPUT -j {c} 2>/dev/null || {IPT} -I INPUT -j {c}) && {rules}"
    )


# ---- undo actions (data, so that the journal can replay them) ---------------------------------


def undo_cmd(undo: dict[str, Any]) -> str | None:
    op = undo["op"]
    if op == "iptables-chain":
        return chain_heal_cmd(undo["chain"])
    if op == "cont":
        return f"kill -CONT {int(undo['pid'])} 2>/dev/null; true"
    if op == "clock-reset":
        f = shlex.quote(undo["file"])
        return f"echo +0 > {f}.tmp && mv {f}.tmp {f}"
    if op == "tc-del":
        return f"tc qdisc del dev {shlex.quote(undo['dev'])} root 2>/dev/null; true"
    return None  # "restart": needs the DB; a crashed run's roles are stopped instead


def _remote_for_heal(host: Host) -> Remote:
    from rmq_jepsen.hosts import emergency_remote

    return emergency_remote(host) or (
        SSHRemote(host) if host.ssh_host is not None else _local(host)
    )


def _local(host: Host) -> Remote:
    from rmq_jepsen.control import LocalRemote

    return LocalRemote(host)


def heal_journal(state: StateDir, *, log: Callable[[str], Any] = print) -> list[str]:
    """Undoes every fault in the journal (from an earlier, crashed run), then stops every role
    process the bench had started. Returns what it did."""
    did: list[str] = []
    for key, entry in sorted(state.faults().items()):
        ok = True
        for undo in entry.get("undo", []):
            cmd = undo_cmd(undo)
            if cmd is None:
                continue
            host = Host.from_json(undo["host"])
            try:
                _remote_for_heal(host).run(cmd, check=True, timeout_s=30)
                did.append(f"healed {entry.get('variant')} ({undo['op']}) on {host.name}")
            except Exception as e:  # keep going: heal everything that can be healed
                ok = False
                did.append(f"could not heal {undo['op']} on {host.name}: {e}")
        if ok:
            state.end_fault(key)
    for key, p in sorted(state.procs().items()):
        host = Host.from_json(p["host"])
        remote = _remote_for_heal(host)
        pidfile = shlex.quote(p["pidfile"])
        # Only a pid whose command line is still rmq-ha: never a recycled pid.
        cmd = (
            f"pid=$(cat {pidfile} 2>/dev/null) && grep -q rmq-ha /proc/$pid/cmdline 2>/dev/null "
            "&& kill -CONT $pid && kill -KILL $pid && echo killed $pid; true"
        )
        try:
            r = remote.run(cmd, check=False, timeout_s=30)
            if "killed" in r.out:
                did.append(f"stopped stale {p['role']} on {host.name} ({r.out.strip()})")
            state.set_proc(key, None)
        except Exception as e:
            did.append(f"could not stop {p['role']} on {host.name}: {e}")
    for line in did:
        log(line)
    return did


# ---- the nemesis ------------------------------------------------------------------------------


class NoTarget(Exception):
    """What the fault aims at does not exist right now (no master, no controller leader,
    nothing running on the chosen node): the fault is skipped, and recorded as skipped."""


@dataclass
class Active:
    event: gen.FaultEvent
    key: str
    targets: list[str]
    detail: str
    undo: list[dict[str, Any]]
    restart: list[str] = field(default_factory=list)
    resume: list[Role] = field(default_factory=list)
    strobe: trio.CancelScope | None = None
    #: History times (Recorder.now_ns): the first action began; every action had finished.
    start_ns: int = 0
    applied_ns: int | None = None


async def _each(items: Iterable[T], fn: Callable[[T], Awaitable[Any]]) -> None:
    """`fn(item)` for every item at once (the first error cancels the others and propagates)."""
    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(fn, item)


class Timeline:
    """nemesis.jsonl in the run directory: every step of every fault, with times."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path = path
        self.t0 = t0
        self._f = open(path, "a", encoding="utf-8")

    def write(self, **obj: Any) -> None:
        obj = {"t": round(time.monotonic() - self.t0, 3), **obj}
        self._f.write(json.dumps(obj, sort_keys=True) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Nemesis:
    def __init__(
        self,
        db: DB,
        view: ClusterView,
        recorder: Recorder,
        state: StateDir,
        run_id: str,
        timeline: Timeline,
        *,
        seed: int = 0,
        network_faults: bool = True,
    ) -> None:
        self.db = db
        self.control: Control = db.control
        self.view = view
        self.rec = recorder
        self.state = state
        self.run_id = run_id
        self.timeline = timeline
        self.rng = random.Random(seed ^ 0x5EED)
        self.network_faults = network_faults
        self.active: dict[int, Active] = {}
        self.injected: list[dict[str, Any]] = []
        self._netem_ok: bool | None = None

    @property
    def nodes(self) -> list[str]:
        return self.control.nodes

    def addr(self, node: str) -> str:
        return self.control.host(node).address

    # ---- targets ---------------------------------------------------------------------------

    async def _master(self) -> tuple[Role, str]:
        """A master registered at the name servers that the nemesis has not already taken
        down; NoTarget if there is none."""
        masters = await self.view.masters()
        registered = [r for r in masters.values() if r is not None]
        live = [r for r in registered if r.name not in self.db.down]
        if not live:
            if registered:
                down = ", ".join(sorted(r.name for r in registered))
                raise NoTarget(f"no master: the registered master(s) {down} are down already")
            raise NoTarget(f"no master registered ({self.view.last_error or 'none'})")
        r = self.rng.choice(live)
        return r, f"master of {r.group} is {r.name} on {r.node} (asked the name servers)"

    async def _leader(self) -> tuple[Role, str]:
        r = await self.view.controller_leader()
        if r is None:
            raise NoTarget(f"no controller leader found ({self.view.last_error or 'none'})")
        if r.name in self.db.down:
            raise NoTarget(f"no controller leader: {r.name} is down already")
        return r, f"controller leader is {r.name} on {r.node} (asked the controllers)"

    def _some(self, k: int) -> list[str]:
        return sorted(self.rng.sample(self.nodes, min(k, len(self.nodes))))

    async def _target_nodes(self, spec: str) -> tuple[list[str], str]:
        """one | minority | majority | master | leader -> nodes, and how they were chosen."""
        n = len(self.nodes)
        if spec == "one":
            return self._some(1), "one random node"
        if spec == "minority":
            return self._some(gen.minority(n)), "a random minority"
        if spec == "majority":
            return self._some(gen.majority(n)), "a random majority"
        role, why = await (self._master() if spec == "master" else self._leader())
        return [role.node], why

    # ---- start / stop ----------------------------------------------------------------------

    async def start(self, ev: gen.FaultEvent) -> Active | None:
        key = f"{self.run_id}:{ev.fault_id}"
        self.timeline.write(event="start", fault_id=ev.fault_id, variant=ev.variant)
        try:
            starter: Callable[[gen.FaultEvent, str], Awaitable[Active]] = getattr(
                self, "_start_" + ev.family
            )
            act = await starter(ev, key)
        except NoTarget as e:
            self._skip(ev, str(e))
            return None
        except Exception as e:
            log.exception("fault %s failed to start", ev.variant)
            self.timeline.write(event="start-failed", fault_id=ev.fault_id, error=repr(e))
            self.rec.nemesis(
                "fault-start",
                ev.family,
                ev.fault_id,
                [],
                ev.variant,
                error=f"failed to start: {e!r}",
            )
            self.rec.nemesis("fault-stop", ev.family, ev.fault_id, [], ev.variant)
            await self._undo_all(key, None)
            return None
        act.applied_ns = self.rec.now_ns()
        self.active[ev.fault_id] = act
        self.injected.append(
            {
                "fault_id": ev.fault_id,
                "variant": ev.variant,
                "targets": act.targets,
                "detail": act.detail,
                "start_ns": act.start_ns,
                "applied_ns": act.applied_ns,
            }
        )
        self.timeline.write(
            event="started", fault_id=ev.fault_id, targets=act.targets, detail=act.detail
        )
        return act

    def _skip(self, ev: gen.FaultEvent, why: str) -> None:
        """Nothing to aim at: a start and an immediate stop with no targets, saying why."""
        detail = f"skipped: {why}"
        self.timeline.write(event="skipped", fault_id=ev.fault_id, variant=ev.variant, why=why)
        start = self.rec.nemesis(
            "fault-start", ev.family, ev.fault_id, [], f"{ev.variant}: {detail}"
        )
        self.rec.nemesis("fault-stop", ev.family, ev.fault_id, [], f"{ev.variant}: {detail}")
        self.injected.append(
            {
                "fault_id": ev.fault_id,
                "variant": ev.variant,
                "targets": [],
                "detail": detail,
                "skipped": True,
                "start_ns": start.time_ns,
            }
        )

    def _begin(
        self,
        ev: gen.FaultEvent,
        key: str,
        targets: list[str],
        detail: str,
        undo: list[dict[str, Any]],
    ) -> Active:
        """Journal first, then the history line; the caller acts after this returns."""
        self.state.begin_fault(
            key,
            {
                "run": self.run_id,
                "variant": ev.variant,
                "fault_id": ev.fault_id,
                "targets": targets,
                "undo": undo,
                "time": time.time(),
            },
        )
        op = self.rec.nemesis(
            "fault-start", ev.family, ev.fault_id, targets, f"{ev.variant}: {detail}"
        )
        return Active(ev, key, targets, detail, undo, start_ns=op.time_ns)

    async def stop(self, fault_id: int) -> None:
        act = self.active.pop(fault_id, None)
        if act is None:
            return
        self.timeline.write(event="stop", fault_id=fault_id)
        healing_ns = self.rec.now_ns()
        error = None
        try:
            await self._undo_all(act.key, act)
        except Exception as e:
            error = repr(e)
            log.exception("fault %s did not heal cleanly", act.event.variant)
        op = self.rec.nemesis(
            "fault-stop",
            act.event.family,
            fault_id,
            act.targets,
            act.event.variant,
            error=error,
            applied_ns=act.applied_ns,
            healing_ns=healing_ns,
        )
        self.timeline.write(event="stopped", fault_id=fault_id, error=error)
        for f in self.injected:
            if f["fault_id"] == fault_id:
                f.update(healing_ns=healing_ns, stop_ns=op.time_ns)

    async def heal_all(self) -> None:
        """Stops every fault in force, all at once."""
        await _each(sorted(self.active, reverse=True), self.stop)

    async def _undo_all(self, key: str, act: Active | None) -> None:
        if act is not None and act.strobe is not None:
            act.strobe.cancel()
        entry = self.state.faults().get(key)
        undo = entry.get("undo", []) if entry else (act.undo if act else [])
        errors: list[str] = []

        async def run_undo(u: dict[str, Any]) -> None:
            cmd = undo_cmd(u)
            if cmd is None:
                return
            node = Host.from_json(u["host"]).name
            try:
                r = await self.control.run(node, cmd, check=False, timeout_s=30)
            except Exception as e:  # every other undo still runs
                errors.append(f"{u['op']} on {node}: {e}")
                return
            if r.rc != 0:
                errors.append(f"{u['op']} on {node}: rc {r.rc} {r.err.strip()[-200:]}")

        async def resume(role: Role) -> None:
            try:
                await self.db.resume(role)
            except Exception as e:
                errors.append(f"resume {role.name}: {e}")

        async def restart(name: str) -> None:
            try:
                await self.db.restart(self.db.by_name[name])
            except Exception as e:
                errors.append(f"restart {name}: {e}")

        # Every node at once: a fault half-healed node by node is a different fault.
        await _each(undo, run_undo)
        if act is not None:
            await _each(act.resume, resume)
            await _each(act.restart, restart)
        if errors:
            raise RuntimeError("; ".join(errors))
        self.state.end_fault(key)

    # ---- partitions ------------------------------------------------------------------------

    async def _grudge(self, variant: str) -> tuple[gen.Grudge, str]:
        nodes = self.nodes
        if variant == "partition-halves":
            a, b = gen.halves(nodes, self.rng)
            return gen.complete_grudge([a, b]), f"halves {a} | {b}"
        if variant == "partition-one":
            x = self._some(1)
            return gen.isolate_grudge(nodes, x), f"isolated {x[0]}"
        if variant in ("partition-master", "partition-leader"):
            spec = "master" if variant == "partition-master" else "leader"
            x, why = await self._target_nodes(spec)
            return gen.isolate_grudge(nodes, x), f"isolated {x[0]}: {why}"
        if variant == "partition-ring":
            order = list(nodes)
            self.rng.shuffle(order)
            return gen.ring_grudge(order), f"majorities ring {order}"
        if variant == "partition-bridge":
            order = list(nodes)
            self.rng.shuffle(order)
            mid = len(order) // 2
            return gen.bridge_grudge(
                order
            ), f"bridge {order[mid]} between {order[:mid]} and {order[mid + 1 :]}"
        if variant == "partition-oneway":
            a, b = gen.halves(nodes, self.rng)
            return gen.oneway_grudge(a, b), f"one-way: {a} receive nothing from {b}"
        raise ValueError(variant)

    async def _start_partition(self, ev: gen.FaultEvent, key: str) -> Active:
        grudge, detail = await self._grudge(ev.variant)
        chain = chain_name(self.run_id)
        victims = sorted(n for n, drop in grudge.items() if drop)
        undo = [
            {"op": "iptables-chain", "host": self.control.host(n).to_json(), "chain": chain}
            for n in victims
        ]
        act = self._begin(ev, key, victims, detail, undo)

        async def install(node: str) -> None:
            ips = sorted(self.addr(m) for m in grudge[node])
            await self.control.run(node, chain_install_cmd(chain, ips))

        await self.control.on_all(victims, install)
        return act

    # ---- kill / pause ------------------------------------------------------------------------

    async def _roles_for(self, spec: str) -> tuple[list[Role], str]:
        """The running roles a kill / pause hits; NoTarget when none runs."""
        if spec in ("master", "leader"):
            role, why = await (self._master() if spec == "master" else self._leader())
            roles = [role]
        else:
            nodes, why = await self._target_nodes(spec)
            roles = [r for n in nodes for r in self.db.roles_on(n)]
        live = [r for r in roles if r.pid is not None and r.name not in self.db.down]
        if not live:
            names = ", ".join(r.name for r in roles) or "no role"
            raise NoTarget(f"nothing running to hit ({names} down): {why}")
        return live, why

    async def _start_kill(self, ev: gen.FaultEvent, key: str) -> Active:
        roles, why = await self._roles_for(ev.variant.removeprefix("kill-"))
        targets = sorted({r.node for r in roles})
        undo = [{"op": "restart", "host": self.db.host(r).to_json(), "role": r.name} for r in roles]
        act = self._begin(ev, key, targets, f"kill -9 {[r.name for r in roles]}: {why}", undo)
        act.restart = [r.name for r in roles]
        await _each(roles, self.db.kill)
        return act

    async def _start_pause(self, ev: gen.FaultEvent, key: str) -> Active:
        roles, why = await self._roles_for(ev.variant.removeprefix("pause-"))
        undo = [{"op": "cont", "host": self.db.host(r).to_json(), "pid": r.pid} for r in roles]
        act = self._begin(
            ev,
            key,
            sorted({r.node for r in roles}),
            f"SIGSTOP {[r.name for r in roles]}: {why}",
            undo,
        )
        act.resume = list(roles)
        await _each(roles, self.db.pause)
        return act

    # ---- clock -------------------------------------------------------------------------------

    def _clock_file(self, node: str) -> str:
        return f"{self.control.host(node).workdir}/faketime"

    async def _set_clock(self, node: str, offset_s: int) -> None:
        f = shlex.quote(self._clock_file(node))
        await self.control.run(node, f"echo {offset_s:+d} > {f}.tmp && mv {f}.tmp {f}")

    async def _start_clock(self, ev: gen.FaultEvent, key: str) -> Active:
        if not self.db.clock_faults:
            raise RuntimeError("clock faults need the roles started under libfaketime")
        nodes, why = await self._target_nodes(self.rng.choice(["one", "minority"]))
        undo = [
            {
                "op": "clock-reset",
                "host": self.control.host(n).to_json(),
                "file": self._clock_file(n),
            }
            for n in nodes
        ]
        if ev.variant == "clock-bump":
            # Jepsen bumps by 1.5^k ms; capped here at ~2 min, skewed toward small jumps.
            offsets = {
                n: self.rng.choice([-1, 1]) * max(1, int(1.5 ** self.rng.uniform(0, 12)))
                for n in nodes
            }
            act = self._begin(ev, key, nodes, f"bump {offsets} s ({why})", undo)
            await _each(offsets, lambda n: self._set_clock(n, offsets[n]))
            return act
        period = self.rng.choice([1, 2, 3])
        amp = max(1, int(1.5 ** self.rng.uniform(0, 10)))
        act = self._begin(ev, key, nodes, f"strobe 0/{amp:+d} s every {period} s ({why})", undo)
        scope = trio.CancelScope()
        act.strobe = scope

        async def strobe() -> None:
            with scope:
                flip = False
                while True:
                    flip = not flip
                    for n in nodes:
                        await self._set_clock(n, amp if flip else 0)
                    await trio.sleep(period)

        self._nursery.start_soon(strobe)
        return act

    # ---- netem -------------------------------------------------------------------------------

    async def _iface(self, node: str) -> str:
        h = self.control.host(node)
        if h.iface:
            return h.iface
        r = await self.control.run(node, "ip -o -4 addr show", check=False)
        for line in r.out.splitlines():
            parts = line.split()
            if len(parts) > 3 and parts[3].split("/")[0] == h.address:
                return parts[1]
        raise RuntimeError(f"{node}: no interface has {h.address}")

    async def _start_netem(self, ev: gen.FaultEvent, key: str) -> Active:
        nodes, why = await self._target_nodes(self.rng.choice(["one", "minority"]))
        if ev.variant == "netem-delay":
            spec, what = "delay 100ms 50ms distribution normal", "delay 100±50 ms"
        else:
            spec, what = "loss 20% 75%", "loss 20% (correlation 75%)"
        if self._netem_ok is None:
            r = await self.control.run(
                nodes[0],
                "tc qdisc show >/dev/null && "
                f"tc qdisc add dev lo root netem {spec} && "
                "tc qdisc del dev lo root",
                check=False,
            )
            self._netem_ok = r.rc == 0
        if not self._netem_ok:
            if ev.variant == "netem-loss":
                # No netem in this kernel: drop 20% of packets from every peer with iptables.
                chain = chain_name(self.run_id, "L")
                undo = [
                    {"op": "iptables-chain", "host": self.control.host(n).to_json(), "chain": chain}
                    for n in nodes
                ]
                act = self._begin(
                    ev,
                    key,
                    nodes,
                    f"loss 20% via iptables statistic (no netem in this kernel) ({why})",
                    undo,
                )

                async def lossy(n: str) -> None:
                    peers = [self.addr(m) for m in self.nodes if m != n]
                    await self.control.run(n, chain_install_cmd(chain, peers, 0.2))

                await _each(nodes, lossy)
                return act
            # skipped as any fault with nothing to act on: a start and an immediate stop (it
            # was recorded as started and held "in force" for its window, probe)
            raise NoTarget(f"{what} needs the kernel's netem qdisc, which this kernel lacks")
        ifaces = {n: await self._iface(n) for n in nodes}
        undo = [
            {"op": "tc-del", "host": self.control.host(n).to_json(), "dev": ifaces[n]}
            for n in nodes
        ]
        act = self._begin(ev, key, nodes, f"{what} on {ifaces} ({why})", undo)
        await _each(
            nodes,
            lambda n: self.control.run(n, f"tc qdisc replace dev {ifaces[n]} root netem {spec}"),
        )
        return act

    # ---- file faults -------------------------------------------------------------------------

    async def _start_file(self, ev: gen.FaultEvent, key: str) -> Active:
        """Kills a broker and damages its commitlog's tail as a power loss would (truncate:
        zeroes; bitflip: flipped bits in the last MiB). `-master` variants hit the current
        master (a newly elected one that loses its tail is issue 13's case); the others a
        random running broker."""
        brokers = [r for r in self.db.brokers() if r.name not in self.db.down]
        why = ""
        if ev.variant.endswith("-master"):
            master, why = await self._master()  # NoTarget when there is none: skipped
            brokers = [r for r in brokers if r.name == master.name]
            why = f" ({why})"
        if not brokers:
            raise NoTarget("no running broker to corrupt")
        role = self.rng.choice(brokers)
        mode = "truncate" if ev.variant.startswith("file-truncate") else "bitflip"
        undo = [{"op": "restart", "host": self.db.host(role).to_json(), "role": role.name}]
        act = self._begin(
            ev,
            key,
            [role.node],
            f"{mode} the commitlog tail of {role.name} while it is stopped (kill -9 first){why}",
            undo,
        )
        act.restart = [role.name]
        await self.db.kill(role)
        await trio.sleep(0.2)
        store = f"{role.dir(self.db.host(role))}/store/commitlog"
        script = CORRUPT_SCRIPT.format(dir=store, mode=mode, seed=self.rng.randrange(1 << 30))
        r = await self.control.run(
            role.node,
            f"{shlex.quote(self.db.install_spec.python)} -c {shlex.quote(script)}",
            check=False,
        )
        act.detail += f"; {r.out.strip() or r.err.strip()[-200:]}"
        return act

    # ---- running a schedule ------------------------------------------------------------------

    _nursery: trio.Nursery

    async def run(
        self,
        events: list[gen.FaultEvent],
        t0: float,
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """Plays `events` (times relative to `t0`, trio clock); returns after the last stop."""
        timeline: list[tuple[float, int, gen.FaultEvent]] = []
        for e in events:
            timeline.append((e.start_s, 1, e))
            timeline.append((e.stop_s, 0, e))
        timeline.sort(key=lambda x: (x[0], x[1], x[2].fault_id))
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                for at, is_start, e in timeline:
                    await trio.sleep_until(t0 + at)
                    if is_start:
                        await self.start(e)
                    else:
                        await self.stop(e.fault_id)
                    if on_change:
                        on_change()
            finally:
                with trio.CancelScope(shield=True):
                    await self.heal_all()
                nursery.cancel_scope.cancel()

    async def verify_healed(self) -> dict[str, Any]:
        """What is still in force on the nodes: iptables chains of this bench, netem qdiscs,
        stopped (T) role processes, fake-clock offsets, journal entries of this run."""
        out: dict[str, Any] = {"chains": {}, "netem": {}, "stopped": [], "clock": {}, "journal": []}
        if self.network_faults:
            for n in self.nodes:
                r = await self.control.run(
                    n,
                    f"{IPT} -S 2>/dev/null | grep -- '-N {CHAIN_PREFIX}' "
                    "; tc qdisc show 2>/dev/null | grep netem; true",
                    check=False,
                )
                lines = [x for x in r.out.splitlines() if x.strip()]
                chains = [x for x in lines if CHAIN_PREFIX in x]
                netem = [x for x in lines if "netem" in x]
                if chains:
                    out["chains"][n] = chains
                if netem:
                    out["netem"][n] = netem
        states = await self.db.process_states()
        out["stopped"] = sorted(name for name, st in states.items() if st == "T")
        if self.db.clock_faults:
            for n in self.nodes:
                r = await self.control.run(
                    n, f"cat {shlex.quote(self._clock_file(n))}", check=False
                )
                if r.out.strip() not in ("", "+0", "0"):
                    out["clock"][n] = r.out.strip()
        out["journal"] = sorted(
            k for k, v in self.state.faults().items() if v.get("run") == self.run_id
        )
        out["healed"] = not any(out[k] for k in ("chains", "netem", "stopped", "clock", "journal"))
        return out


#: Runs on the node with its own Python: corrupt the newest commitlog segment's tail.
CORRUPT_SCRIPT = r"""
import os, random
d = {dir!r}; mode = {mode!r}; rng = random.Random({seed})
segs = sorted(f for f in os.listdir(d) if f.isdigit()) if os.path.isdir(d) else []
end = 0; path = None
for name in reversed(segs):
    p = os.path.join(d, name)
    with open(p, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        try:
            end = f.seek(0, os.SEEK_HOLE) if size else 0
        except OSError:
            end = size
        f.seek(0); data = f.read(end)
        end = len(data.rstrip(b'\0'))
    if end:
        path = p; break
if not path:
    print('no commitlog data to corrupt')
else:
    with open(path, 'r+b') as f:
        if mode == 'truncate':
            n = min(end, rng.randint(1, 4096))
            f.seek(end - n); f.write(b'\0' * n)
            print(f'zeroed the last {{n}} bytes of {{os.path.basename(path)}} (end {{end}})')
        else:
            lo = max(0, end - (1 << 20)); flips = []
            for _ in range(rng.randint(1, 8)):
                pos = rng.randrange(lo, end); f.seek(pos); b = f.read(1)[0]
                f.seek(pos); f.write(bytes([b ^ (1 << rng.randrange(8))])); flips.append(pos)
            print(f'flipped bits at {{flips}} in {{os.path.basename(path)}} (end {{end}})')
        f.flush(); os.fsync(f.fileno())
"""
