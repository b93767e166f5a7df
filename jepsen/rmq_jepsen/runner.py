"""One campaign: hosts, install, configs, start, workload + nemesis schedule, heal, recovery
wait, drain, collect, export, check. The run directory `store/<test>/<timestamp>/` holds:

    config.json      the test config (options, hosts, roles and their configs, fault schedule)
    history.jsonl    the history (rmq_ha.history); history.parquet, the same as Parquet
    nemesis.jsonl    the nemesis timeline (every step of every fault, with targets)
    control.log      every control action, with its host
    nodes/<node>/    each node's role directories: role.conf, role.log, store/, controller/
    metrics.jsonl    the roles' own metrics, scraped once a second (rmq_jepsen.scrape)
    syncstate.jsonl  the controller's master, epoch and SyncStateSet per group, twice a
                     second (controller topologies, either database; rmq_jepsen.syncstate)
    summary.json     what the bench saw: op counts, faults, healed-or-not, timings, drain
    results.json, report.html   written by the checker (`rmq-ha check RUN_DIR`), when present
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import random
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from rmq_jepsen import checkout, existing, secure
from rmq_jepsen import generator as gen
from rmq_jepsen import hosts as hostmod
from rmq_jepsen.control import ActionLog, Control, Host
from rmq_jepsen.db import (
    DB,
    DBS,
    ROCKETMQ_TOPOLOGIES,
    TOPOLOGIES,
    ClusterView,
    Install,
    JvmSizes,
    Timing,
)
from rmq_jepsen.nemesis import Nemesis, Timeline, heal_journal
from rmq_jepsen.progress import Progress
from rmq_jepsen.recorder import Recorder, export_parquet
from rmq_jepsen.scrape import Scraper, in_background, scraping
from rmq_jepsen.state import StateDir, write_json_atomic
from rmq_jepsen.syncstate import SyncStateSampler, wait_full, wait_settled
from rmq_jepsen.workload import WorkloadOptions, Workloads, delay_levels_ms, parse_workloads

log = logging.getLogger("rmq_jepsen.runner")

NETWORK_FAMILIES = ("partition", "netem")


@dataclass
class CampaignOptions:
    hosts: str = "local"
    n: int = 5
    topology: str = "controller"
    workload: str = "queue"
    nemesis: str = "partition,kill,pause"
    time_s: float = 60.0
    rate: float = 100.0
    concurrency: int = 5
    consumers: int = 2
    fault_s: float = 10.0
    between_s: float = 10.0
    first_fault_s: float = 5.0
    overlap: int = 1
    recovery_s: float = 10.0
    drain_timeout_s: float = 60.0
    seed: int | None = None
    store: str = "store"
    test: str | None = None
    check: bool = True
    collect_data: bool = True
    subnet: str = hostmod.DEFAULT_SUBNET
    prefix: str = hostmod.DEFAULT_PREFIX
    state_dir: str | None = None
    progress: bool = True
    teardown: bool = False
    port_base: int = 0
    #: The rmq-ha wheel that SSH / Vagrant hosts install (None: build it from the checkout).
    wheel: str | None = None
    #: Where the checker runs: its Spark master (None: the checker's default, local[2]) and
    #: any Spark settings (KEY=VALUE), passed to `rmq-ha check` as --master / --conf.
    check_master: str | None = None
    check_conf: list[str] = field(default_factory=list)
    #: ACL and TLS on every role, the bench's clients signing over TLS (rmq_jepsen.secure).
    secure: bool = False
    #: The database the roles run: rmq_ha, or real Apache RocketMQ (`rocketmq`: its JVMs from
    #: the jars the interop harness caches; local hosts and the controller topology only).
    db: str = "rmq_ha"
    #: --db rocketmq: a released RocketMQ 5.x (None: the pinned one) and the JVMs' sizes.
    rocketmq_version: str | None = None
    jvm: JvmSizes = field(default_factory=JvmSizes)


@dataclass
class Outcome:
    run_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)
    check_rc: int | None = None
    verdict: str = "unchecked"
    report: Path | None = None
    notes: list[str] = field(default_factory=list)


def checker_available() -> bool:
    """The checker (issue 7) registers `rmq-ha check` through the rmq_ha.cli entry points."""
    from importlib.metadata import entry_points

    if importlib.util.find_spec("rmq_check") is None:
        return False
    return any(True for _ in entry_points(group="rmq_ha.cli")) and _has_check_command()


def _has_check_command() -> bool:
    p = subprocess.run(
        [sys.executable, "-m", "rmq_ha.cli", "check", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.returncode == 0


def check_argv(
    run_dir: Path, master: str | None = None, conf: list[str] | None = None
) -> list[str]:
    """`rmq-ha check RUN_DIR` with the campaign's Spark master and settings passed through."""
    argv = [sys.executable, "-m", "rmq_ha.cli", "check", str(run_dir)]
    if master:
        argv += ["--master", master]
    for kv in conf or []:
        argv += ["--conf", kv]
    return argv


def run_check(
    run_dir: Path, master: str | None = None, conf: list[str] | None = None
) -> tuple[int, str]:
    p = subprocess.run(
        check_argv(run_dir, master, conf),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return p.returncode, (p.stdout + p.stderr)[-4000:]


#: `rmq-ha check` exit codes (docs/checker.md): 3 = the history cannot decide.
CHECK_VERDICTS = {0: "valid", 1: "INVALID", 2: "check-error", 3: "unknown"}


def resolve_hosts(opts: CampaignOptions, state: StateDir, say: Any) -> tuple[str, list[Host]]:
    """(provider, hosts). `local` without root falls back to loopback, and says so."""
    kind = opts.hosts
    if kind == "local":
        if not hostmod.is_root():
            say(
                "not root: local hosts (network namespaces) need root; running on loopback "
                "processes instead, with kill and pause only — partitions and packet faults are "
                "skipped"
            )
            return "loopback", hostmod.loopback_hosts(opts.n, state, port_base=opts.port_base)
        return "local", hostmod.local_up(
            opts.n, state, subnet=opts.subnet, prefix=opts.prefix, log=say
        )
    if kind == "loopback":
        return "loopback", hostmod.loopback_hosts(opts.n, state, port_base=opts.port_base)
    if kind == "vagrant":
        return "vagrant", hostmod.vagrant_hosts()
    return "file", hostmod.file_hosts(kind)


class CampaignError(ValueError):
    """The options ask for something the campaign cannot do (the message says what and why)."""


def check_options(opts: CampaignOptions) -> None:
    """CampaignError for option combinations that are not supported."""
    if opts.topology not in TOPOLOGIES:
        raise CampaignError(f"--topology {opts.topology}: unknown topology")
    if opts.db not in DBS:
        raise CampaignError(f"--db {opts.db}: unknown database (known: {', '.join(DBS)})")
    dep = _deployment_table(opts.hosts)
    if dep is not None and opts.db != "rocketmq":
        raise CampaignError(
            f"--hosts {opts.hosts} describes an existing RocketMQ deployment ([deployment]): "
            "run it with --db rocketmq"
        )
    if dep is not None and dep.get("topology", "controller") != opts.topology:
        raise CampaignError(
            f"--hosts {opts.hosts}: the deployment's topology is "
            f"{dep.get('topology', 'controller')!r}, not --topology {opts.topology}"
        )
    if opts.db != "rocketmq":
        return
    if opts.topology not in ROCKETMQ_TOPOLOGIES:
        raise CampaignError(
            f"--db rocketmq: topology {opts.topology} is not supported yet "
            f"(supported: {', '.join(ROCKETMQ_TOPOLOGIES)})"
        )
    if opts.secure:
        raise CampaignError("--db rocketmq with --secure is not supported")
    if opts.hosts not in ("local", "loopback") and dep is None:
        raise CampaignError(
            f"--db rocketmq --hosts {opts.hosts}: only local hosts (namespaces or loopback) are "
            "supported for a RocketMQ the bench deploys (remote hosts would need its jars copied "
            "to them); for RocketMQ already running on remote hosts, describe it in the host "
            "file's [deployment] (docs/bench.md)"
        )


def _deployment_table(hosts: str) -> dict[str, Any] | None:
    """The [deployment] table of a host file (None: not a file, or none in it)."""
    if hosts in ("local", "loopback", "vagrant"):
        return None
    p = Path(hosts)
    if not p.is_file():
        return None
    text = p.read_text()
    data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    dep = data.get("deployment")
    return dict(dep) if isinstance(dep, dict) else None


def plan_variants(
    opts: CampaignOptions, provider: str, n: int, controller: bool, notes: list[str]
) -> list[str]:
    variants = gen.parse_nemesis(opts.nemesis)
    keep = []
    skipped: dict[str, str] = {}
    for v in variants:
        fam = gen.VARIANT_FAMILY[v]
        if opts.db == "rocketmq" and fam == "clock":
            skipped[v] = "--db rocketmq: libfaketime under the JVMs is not supported"
        elif provider == "loopback" and fam in NETWORK_FAMILIES:
            skipped[v] = "needs root and network namespaces (loopback hosts)"
        elif v == "partition-ring" and n < 4:
            skipped[v] = "needs at least 4 nodes"
        elif v == "partition-bridge" and n < 3:
            skipped[v] = "needs at least 3 nodes"
        elif v.endswith("-leader") and not controller:
            skipped[v] = "no controller in this topology"
        elif fam == "clock" and hostmod.faketime_lib() is None and provider == "loopback":
            skipped[v] = "libfaketime is not installed"
        else:
            keep.append(v)
    fams = sorted({gen.VARIANT_FAMILY[v] for v in skipped})
    for fam in fams:
        vs = [v for v in skipped if gen.VARIANT_FAMILY[v] == fam]
        notes.append(f"skipped {', '.join(vs)}: {skipped[vs[0]]}")
    return keep


def _git_rev(source: Path | None) -> str | None:
    """The checkout's commit, when the bench runs from one (from wheels: None)."""
    if source is None:
        return None
    try:
        p = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=source
        )
        return p.stdout.strip() or None
    except OSError:
        return None


def _versions() -> dict[str, str | None]:
    """The installed versions of the three packages (the bench may run from wheels)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("rmq-ha", "rmq-jepsen", "rmq-check"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


async def run_campaign(opts: CampaignOptions) -> Outcome:
    check_options(opts)
    state = StateDir(Path(opts.state_dir) if opts.state_dir else None)
    with state.lock():
        return await _run_locked(opts, state)


async def _run_locked(opts: CampaignOptions, state: StateDir) -> Outcome:
    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    topo = TOPOLOGIES[opts.topology]
    kinds = parse_workloads(opts.workload)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    db_prefix = "rocketmq-" if opts.db == "rocketmq" else ""
    test = opts.test or f"{db_prefix}{opts.topology}-{'-'.join(kinds)}"
    run_dir = Path(opts.store) / test / stamp
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = Path(opts.store) / test / f"{stamp}-{n}"
    run_dir.mkdir(parents=True)
    run_id = f"{stamp}{'-' + str(n) if n > 1 else ''}"
    latest = run_dir.parent / "latest"
    try:
        if latest.is_symlink() or latest.exists():
            latest.unlink()
        latest.symlink_to(run_dir.name)
    except OSError:
        pass
    out = Outcome(run_dir)
    progress = Progress(opts.progress)
    say = progress.message
    timings: dict[str, float] = {}

    logs = _log_to(run_dir / "bench.log")
    healed_before = heal_journal(state, log=say)
    if healed_before:
        out.notes.append(f"healed {len(healed_before)} leftovers of an earlier run first")
    t = time.monotonic()
    provider, hosts = resolve_hosts(opts, state, say)
    timings["hosts_s"] = time.monotonic() - t
    deployment = existing.load_deployment(opts.hosts, hosts) if provider == "file" else None
    if deployment is not None:
        out.notes.append(
            "an existing RocketMQ deployment: nothing installed, configured or started; its "
            "JVMs found by their command lines"
        )
    if provider == "loopback" and opts.hosts == "local":
        out.notes.append("not root: ran on loopback processes; partitions were skipped")
    controller = topo.mode == "controller"
    variants = plan_variants(opts, provider, len(hosts), controller, out.notes)
    for note in out.notes:
        say(note)
    clock_faults = any(gen.VARIANT_FAMILY[v] == "clock" for v in variants)
    events = gen.schedule(
        gen.ScheduleOptions(
            time_limit_s=opts.time_s,
            fault_s=opts.fault_s,
            recovery_s=opts.between_s,
            first_fault_s=opts.first_fault_s,
            overlap=opts.overlap,
            seed=seed,
            variants=tuple(variants),
        )
    )

    control = Control(hosts, ActionLog(run_dir / "control.log"))
    security = None
    if opts.secure:
        # Keys and secrets live in the state directory, never in the run directory.
        security = secure.make(state.root / "secure" / run_id, [h.address for h in hosts])
        out.notes.append("secure: ACL and TLS on every role (docs/security.md)")
    db = DB(
        control,
        topo,
        state=state,
        timing=Timing(),
        clock_faults=clock_faults,
        install=Install(wheel=opts.wheel),
        security=security,
        kind=opts.db,
        jvm=opts.jvm,
        rocketmq_version=opts.rocketmq_version,
        deployment=deployment,
    )
    source = checkout.find()
    client_ip = "127.0.0.1" if provider == "loopback" else _control_ip(state, hosts)
    view = ClusterView(db, client_ip=client_ip)
    recorder: Recorder | None = None
    nemesis: Nemesis | None = None
    timeline = Timeline(run_dir / "nemesis.jsonl", time.monotonic())
    summary: dict[str, Any] = {
        "run_id": run_id,
        "provider": provider,
        "seed": seed,
        "notes": out.notes,
    }
    config = {
        "test": test,
        "run_id": run_id,
        "seed": seed,
        "provider": provider,
        "db": opts.db,
        "options": dataclasses.asdict(opts),
        "topology": dataclasses.asdict(topo),
        "timing": dataclasses.asdict(db.timing),
        "git": _git_rev(source),
        "versions": _versions(),
        "hosts": [h.to_json() for h in hosts],
        "roles": [
            {
                "name": r.name,
                "kind": r.kind,
                "node": r.node,
                "port": r.port,
                "group": r.group,
                "config": r.values,
            }
            for r in db.roles
        ],
        "schedule": [dataclasses.asdict(e) for e in events],
        "skipped": out.notes,
    }
    write_json_atomic(run_dir / "config.json", config)
    try:
        progress.set_phase("install")
        t = time.monotonic()
        await db.install(source)
        await db.setup()
        timings["install_s"] = time.monotonic() - t
        progress.set_phase("start")
        timings["start_s"] = await db.start_all()
        masters_timeout_s = 30.0 if opts.db == "rmq_ha" else db.ready_timeout_s
        masters = await view.wait_masters(masters_timeout_s)
        timings["masters_s"] = time.monotonic() - t - timings["install_s"]
        say("masters: " + ", ".join(f"{g}={r.name if r else None}" for g, r in masters.items()))
        recorder = Recorder(run_dir / "history.jsonl")
        config["start_wall_ns"] = recorder.start_wall_ns
        write_json_atomic(run_dir / "config.json", config)
        progress.recorder = recorder
        wl = Workloads(
            WorkloadOptions(
                kinds=kinds,
                rate=opts.rate,
                concurrency=opts.concurrency,
                consumers=opts.consumers,
                run_id=run_id,
                client_ip=client_ip,
                seed=seed,
                delay_levels_ms=delay_levels_ms(db.timing.delay_levels),
            ),
            db,
            view,
            recorder,
        )
        await wl.setup()
        nemesis = Nemesis(
            db,
            view,
            recorder,
            state,
            run_id,
            timeline,
            seed=seed,
            network_faults=provider != "loopback",
        )
        nem = nemesis
        progress.faults = lambda: [a.event.variant for a in nem.active.values()]
        # The cluster's own metrics, from the run phase to the end of the drain (issue 20).
        targets = {r.name: a for r in db.roles if (a := r.metrics_addr()) is not None}
        scraper = Scraper(targets, run_dir / "metrics.jsonl", recorder.now_ns)
        # The controller's SyncStateSets (controller mode, either database): heal -> full set.
        sampler = None
        if db.controller_addrs():
            sampler = SyncStateSampler(
                view.replicas,
                run_dir / "syncstate.jsonl",
                recorder.now_ns,
                last_error=lambda: view.last_error,
            )

        async with (
            wl.lifetime(),
            scraping(scraper),
            in_background(sampler.run if sampler is not None else None),
        ):
            progress.set_phase("run", opts.time_s)
            timeline.t0 = time.monotonic()  # nemesis.jsonl times count from the run phase
            timeline.write(event="run-start", wall_ns=time.time_ns())
            t0 = trio.current_time()
            t = time.monotonic()
            async with trio.open_nursery() as outer:

                async def ticker() -> None:
                    while True:
                        await trio.sleep(0.5)
                        assert recorder is not None
                        recorder.flush()
                        progress.tick()

                outer.start_soon(ticker)
                # The workload stops at the time limit; the nemesis after its last fault stops.
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(wl.run, t0 + opts.time_s)
                    nursery.start_soon(nemesis.run, events, t0)
                outer.cancel_scope.cancel()
            timings["run_s"] = time.monotonic() - t

            progress.set_phase("heal")
            await nemesis.heal_all()
            for name in sorted(db.down):
                try:
                    await db.restart(db.by_name[name])
                except Exception as e:
                    out.notes.append(f"could not restart {name} after the run: {e}")
            progress.set_phase("recovery", opts.recovery_s)
            t = time.monotonic()
            await trio.sleep(opts.recovery_s)
            await view.wait_masters(masters_timeout_s)
            timings["recovery_s"] = time.monotonic() - t
            if any(k in kinds for k in ("delay", "transaction")):
                progress.set_phase("settle")
                t = time.monotonic()
                summary["settle"] = await wl.settle(opts.recovery_s)
                timings["settle_s"] = time.monotonic() - t
            progress.set_phase("drain")
            t = time.monotonic()
            summary["drain"] = await wl.drain(opts.drain_timeout_s)
            timings["drain_s"] = time.monotonic() - t
        summary["metrics_scrapes"] = scraper.summary()
        # Faults undone is not recovery: every group's SyncStateSet full again is (controller
        # topologies); every configured slave connected and caught up with its master (classic).
        if sampler is not None:
            progress.set_phase("replication")
            summary["replication"] = await wait_full(sampler, db.groups(), opts.recovery_s)
            summary["syncstate_samples"] = sampler.summary()
        elif any(r.replica > 0 for r in db.brokers()):
            progress.set_phase("replication")

            async def lag() -> tuple[dict[str, str], Any]:
                why = await view.classic_lag()
                return why, {"lag": why}

            summary["replication"] = await wait_settled(lag, opts.recovery_s)
        if "replication" in summary and not summary["replication"]["full"]:
            say(f"REPLICATION NOT FULL: {summary['replication']['not_full']}")
        summary["client_errors"] = wl.stats.errors[:20]
        summary["healed"] = await nemesis.verify_healed()
        if not summary["healed"]["healed"]:
            say(f"NOT HEALED: {summary['healed']}")
    finally:
        with trio.CancelScope(shield=True):
            progress.set_phase("collect")
            if nemesis is not None:
                await nemesis.heal_all()
                summary["faults"] = nemesis.injected
            try:
                await db.stop_all()
            except Exception as e:
                out.notes.append(f"stopping roles: {e!r}")
            if recorder is not None:
                recorder.close()
                summary["ops"] = recorder.ops
                summary["counts"] = {f"{f}:{t}": c for (f, t), c in sorted(recorder.counts.items())}
            timeline.close()
            try:
                t = time.monotonic()
                summary["collected_bytes"] = await db.collect(run_dir, data=opts.collect_data)
                timings["collect_s"] = time.monotonic() - t
            except Exception as e:
                out.notes.append(f"collecting node files: {e!r}")
            summary["timings"] = timings
            write_json_atomic(run_dir / "summary.json", summary)
            control.close()
            progress.close()
            _unlog(logs)
    if recorder is not None:
        try:
            export_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")
        except ImportError:
            out.notes.append("pyarrow is not installed: no history.parquet")
    if opts.check:
        if checker_available():
            progress.set_phase("check")
            out.check_rc, text = run_check(run_dir, opts.check_master, opts.check_conf)
            (run_dir / "check.log").write_text(text)
            out.verdict = CHECK_VERDICTS.get(out.check_rc, "INVALID")
            report = run_dir / "report.html"
            out.report = report if report.exists() else None
        else:
            out.verdict = "unavailable"
            out.notes.append(
                "check step unavailable: the checker (`rmq-ha check`, package "
                "rmq_check, issue 7) is not installed — no verdict"
            )
    summary["verdict"] = out.verdict
    summary["check_rc"] = out.check_rc
    write_json_atomic(run_dir / "summary.json", summary)
    out.summary = summary
    if opts.teardown and provider == "local":
        hostmod.local_down(state, log=say)
    return out


def _log_to(path: Path) -> list[tuple[logging.Logger, logging.Handler, bool]]:
    """Client and bench logs go to bench.log in the run directory, not to the terminal."""
    handler: logging.Handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    out = []
    for name in ("rmq_ha", "rmq_jepsen"):
        lg = logging.getLogger(name)
        out.append((lg, handler, lg.propagate))
        lg.addHandler(handler)
        lg.propagate = False
        if lg.level == logging.NOTSET or lg.level > logging.INFO:
            lg.setLevel(logging.INFO)
    return out


def _unlog(logs: list[tuple[logging.Logger, logging.Handler, bool]]) -> None:
    for lg, handler, propagate in logs:
        lg.removeHandler(handler)
        lg.propagate = propagate
    if logs:
        logs[0][1].close()


def _control_ip(state: StateDir, hosts: list[Host]) -> str:
    info = state.hosts()
    if info and info.get("gateway"):
        return str(info["gateway"])
    return os.environ.get("RMQ_JEPSEN_CLIENT_IP", "127.0.0.1")


def list_runs(store: Path) -> list[dict[str, Any]]:
    out = []
    for summ in sorted(store.glob("*/*/summary.json")):
        d = summ.parent
        if d.is_symlink():
            continue
        try:
            s = json.loads(summ.read_text())
        except (OSError, ValueError):
            s = {}
        out.append(
            {
                "test": d.parent.name,
                "run": d.name,
                "dir": str(d),
                "ops": s.get("ops"),
                "faults": len(s.get("faults", [])),
                "healed": (s.get("healed") or {}).get("healed"),
                "replication_full": (s.get("replication") or {}).get("full"),
                "verdict": s.get("verdict"),
            }
        )
    return out
