"""`rmq-ha hosts up|down|status`, `rmq-ha campaign run|list|show|demo`, the benchmarks
(`rmq-ha bench store|produce|controller|ha|acting-master|history`) and `rmq-ha demo store`,
added to the `rmq-ha` command through the `rmq_ha.cli` entry point group."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

DEMO_TIME_S = 60.0


def replication_text(summary: dict[str, Any]) -> str | None:
    """`replication: full` / `replication: NOT full (group: why; ...)` of a run's summary
    (controller topologies: every SyncStateSet full; classic ones with slaves: every slave
    caught up); None when the run had neither (or predates the field)."""
    r = summary.get("replication")
    if not isinstance(r, dict):
        return None
    if r.get("full"):
        return "replication: full"
    why = "; ".join(f"{g}: {w}" for g, w in sorted((r.get("not_full") or {}).items()))
    return f"replication: NOT full {r.get('waited_s')} s after the drain ({why})"


def add_parsers(sub: Any, bench_sub: Any) -> None:
    from rmq_jepsen.db import DBS, ROCKETMQ_TOPOLOGIES
    from rmq_jepsen.hosts import DEFAULT_PREFIX, DEFAULT_SUBNET

    h = sub.add_parser("hosts", help="local bench hosts: network namespaces + sshd (root)")
    hs = h.add_subparsers(dest="hosts_cmd", required=True)
    up = hs.add_parser("up", help="create N namespaces on a bridge, one sshd each")
    up.add_argument("--n", type=int, default=5)
    up.add_argument("--subnet", default=DEFAULT_SUBNET)
    up.add_argument("--prefix", default=DEFAULT_PREFIX, help="namespace and bridge name prefix")
    up.add_argument("--state-dir", help="bookkeeping directory ($RMQ_JEPSEN_STATE)")
    up.set_defaults(func=_hosts_up)
    down = hs.add_parser("down", help="heal every recorded fault, stop processes, delete hosts")
    down.add_argument("--state-dir")
    down.set_defaults(func=_hosts_down)
    st = hs.add_parser("status", help="what is up, and what the journal still holds")
    st.add_argument("--state-dir")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_hosts_status)

    c = sub.add_parser("campaign", help="Jepsen-style campaigns: run, list, show, demo")
    cs = c.add_subparsers(dest="campaign_cmd", required=True)
    r = cs.add_parser("run", help="one campaign: workload + faults, heal, drain, check")
    _add_campaign_args(r)
    r.add_argument(
        "--db",
        default="rmq_ha",
        choices=DBS,
        help="the database the roles run: rmq_ha, or real Apache RocketMQ (rocketmq: local "
        f"hosts, topologies {', '.join(ROCKETMQ_TOPOLOGIES)}; needs java and mvn)",
    )
    r.set_defaults(func=_campaign_run)
    cmp_ = cs.add_parser(
        "compare",
        help="one schedule (same seed) against rmq_ha, then real RocketMQ (--db rocketmq's "
        "limits apply); writes compare.html linking both reports",
    )
    _add_campaign_args(cmp_)
    cmp_.set_defaults(func=_campaign_compare)
    ls = cs.add_parser("list", help="runs in the store")
    ls.add_argument("--store", default="store")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_campaign_list)
    sh = cs.add_parser("show", help="summary of one run (a run dir, or TEST[/RUN])")
    sh.add_argument("run")
    sh.add_argument("--store", default="store")
    sh.set_defaults(func=_campaign_show)
    dm = cs.add_parser(
        "demo",
        help="make demo: 5 local hosts, 60 s controller-mode campaign "
        "with partitions and kills, check, verdict, tear down",
    )
    dm.add_argument("--time", type=float, default=DEMO_TIME_S)
    dm.add_argument("--store", default="store")
    dm.set_defaults(func=_campaign_demo)

    from rmq_jepsen import bench as benchmarks
    from rmq_jepsen import demo

    benchmarks.add_parsers(bench_sub)
    d = sub.add_parser("demo", help="demonstrations a newcomer can watch")
    demo.add_parser(d.add_subparsers(dest="demo", required=True))

    b = bench_sub.add_parser("history", help="recorder ops/s vs raw json writes; 5-host bring-up")
    b.add_argument("--ops", type=int, default=300_000)
    b.add_argument("--hosts", type=int, default=5)
    b.add_argument("--no-hosts", action="store_true", help="skip the bring-up measurement")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench_history)


def _add_campaign_args(r: Any) -> None:
    """The options of `campaign run` (and `campaign compare`, which runs it per database)."""
    from rmq_jepsen import generator as gen
    from rmq_jepsen.bench.realrmq import add_jvm_flags
    from rmq_jepsen.db import TOPOLOGIES
    from rmq_jepsen.hosts import DEFAULT_PREFIX, DEFAULT_SUBNET

    r.add_argument(
        "--hosts",
        default="local",
        help="local (namespaces; needs root) | loopback | vagrant | a host file",
    )
    r.add_argument("--n", type=int, default=5, help="local/loopback hosts")
    r.add_argument(
        "--topology",
        default="controller",
        choices=sorted(TOPOLOGIES),
        help="; ".join(f"{t.name}: {t.doc}" for t in TOPOLOGIES.values()),
    )
    r.add_argument(
        "--workload",
        default="queue",
        help="queue, ordered, admin, delay, transaction, pop (comma list)",
    )
    r.add_argument(
        "--nemesis",
        default="partition,kill,pause",
        help="families or variants, comma list: "
        + "; ".join(f"{k}: {' '.join(v)}" for k, v in gen.FAULTS.items())
        + "; none",
    )
    r.add_argument("--time", type=float, default=60.0, help="seconds of workload")
    r.add_argument("--rate", type=float, default=100.0, help="ops/s over all workers")
    r.add_argument("--concurrency", type=int, default=5, help="producer workers")
    r.add_argument("--consumers", type=int, default=2)
    r.add_argument("--fault-duration", type=float, default=10.0)
    r.add_argument(
        "--between", type=float, default=10.0, help="recovery period between fault windows (s)"
    )
    r.add_argument(
        "--overlap", type=int, default=1, help="faults of different families in force at once"
    )
    r.add_argument(
        "--recovery", type=float, default=10.0, help="wait after healing, before the drain (s)"
    )
    r.add_argument("--seed", type=int)
    r.add_argument("--store", default="store")
    r.add_argument("--test", help="test name (default: topology-workload)")
    r.add_argument("--no-check", action="store_true")
    r.add_argument(
        "--secure",
        action="store_true",
        help="ACL and TLS on every role; the bench's clients sign and verify certificates "
        "(docs/security.md; needs openssl)",
    )
    r.add_argument(
        "--check-master",
        help="Spark master for the check, e.g. spark://127.0.0.1:7077 (make spark-cluster); "
        "default: the checker's local[2]",
    )
    r.add_argument(
        "--check-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the check (repeatable), passed as rmq-ha check --conf",
    )
    r.add_argument("--no-data", action="store_true", help="collect logs but not data dirs")
    r.add_argument("--teardown", action="store_true", help="local: hosts down afterwards")
    r.add_argument("--state-dir")
    r.add_argument(
        "--wheel",
        help="the rmq-ha wheel SSH/Vagrant hosts install (default: build it from the checkout; "
        "`make wheels` builds it into dist/)",
    )
    r.add_argument("--subnet", default=DEFAULT_SUBNET)
    r.add_argument("--prefix", default=DEFAULT_PREFIX, help="local: namespace/bridge prefix")
    r.add_argument("--first-fault", type=float, default=5.0, help="seconds before the first fault")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")
    add_jvm_flags(r)


def _logging() -> None:
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _state(args: argparse.Namespace) -> Any:
    from rmq_jepsen.state import StateDir

    return StateDir(Path(args.state_dir) if getattr(args, "state_dir", None) else None)


def _hosts_up(args: argparse.Namespace) -> int:
    import time

    from rmq_jepsen.hosts import HostsError, local_up

    t0 = time.monotonic()
    try:
        hosts = local_up(args.n, _state(args), subnet=args.subnet, prefix=args.prefix)
    except HostsError as e:
        print(f"rmq-ha hosts up: {e}", file=sys.stderr)
        return 2
    for h in hosts:
        print(f"{h.name}  {h.address}  netns {h.netns}  ssh root@{h.ssh_host} -i {h.key_file}")
    print(f"{len(hosts)} hosts up in {time.monotonic() - t0:.1f} s")
    return 0


def _hosts_down(args: argparse.Namespace) -> int:
    from rmq_jepsen.hosts import is_root, local_down
    from rmq_jepsen.nemesis import heal_journal

    state = _state(args)
    did = local_down(state) if is_root() else heal_journal(state)
    print(f"hosts down: {len(did)} actions" if did else "hosts down: nothing to do")
    return 0


def _hosts_status(args: argparse.Namespace) -> int:
    from rmq_jepsen.hosts import local_status

    st = local_status(_state(args))
    if args.json:
        print(json.dumps(st))
    elif not st["up"]:
        print("no local hosts")
    else:
        for h in st["hosts"]:
            print(
                f"{h['name']}  {h['address']}  {h['netns']}  sshd {'up' if h['sshd'] else 'DOWN'}"
            )
        print(f"journal: {st['faults_in_journal']} faults, {st['processes']} processes")
    return 0


def _print_outcome(out: Any, as_json: bool) -> None:
    s = out.summary
    if as_json:
        print(
            json.dumps(
                {
                    "run_dir": str(out.run_dir),
                    "verdict": out.verdict,
                    "check_rc": out.check_rc,
                    "report": str(out.report or ""),
                    "notes": out.notes,
                    "summary": s,
                },
                default=str,
            )
        )
        return
    print(f"run dir: {out.run_dir}")
    print(
        f"ops: {s.get('ops')}  faults injected: {len(s.get('faults', []))}  "
        f"healed: {(s.get('healed') or {}).get('healed')}"
    )
    if (rep := replication_text(s)) is not None:
        print(rep)
    for note in out.notes:
        print(f"note: {note}")
    if out.verdict == "unchecked":
        print("verdict: not checked (--no-check)")
    elif out.verdict == "unavailable":
        print("verdict: unavailable (the checker is not installed; nothing was checked)")
    else:
        print(f"verdict: {out.verdict} (rmq-ha check exit {out.check_rc})")
    if out.report:
        print(f"report: {out.report}")


def _campaign_options(args: argparse.Namespace) -> Any:
    from rmq_jepsen.bench.realrmq import jvm_sizes, rocketmq_version
    from rmq_jepsen.runner import CampaignOptions

    return CampaignOptions(
        db=getattr(args, "db", "rmq_ha"),
        rocketmq_version=rocketmq_version(args),
        jvm=jvm_sizes(args),
        hosts=args.hosts,
        n=args.n,
        topology=args.topology,
        workload=args.workload,
        nemesis=args.nemesis,
        time_s=args.time,
        rate=args.rate,
        concurrency=args.concurrency,
        consumers=args.consumers,
        fault_s=args.fault_duration,
        between_s=args.between,
        overlap=args.overlap,
        recovery_s=args.recovery,
        seed=args.seed,
        store=args.store,
        test=args.test,
        check=not args.no_check,
        collect_data=not args.no_data,
        teardown=args.teardown,
        state_dir=args.state_dir,
        subnet=args.subnet,
        prefix=args.prefix,
        first_fault_s=args.first_fault,
        progress=not args.quiet,
        wheel=args.wheel,
        check_master=args.check_master,
        check_conf=args.check_conf,
        secure=args.secure,
    )


def _campaign_compare(args: argparse.Namespace) -> int:
    import dataclasses

    import trio

    from rmq_jepsen.compare import run_compare
    from rmq_jepsen.runner import CampaignError, check_options

    _logging()
    opts = _campaign_options(args)
    try:
        for db in ("rmq_ha", "rocketmq"):
            check_options(dataclasses.replace(opts, db=db))
    except CampaignError as e:
        print(f"rmq-ha campaign compare: {e}", file=sys.stderr)
        return 2
    page = trio.run(run_compare, opts)
    print(f"comparison: {page}")
    return 0


def _campaign_run(args: argparse.Namespace) -> int:
    import trio

    from rmq_jepsen.runner import CampaignError, check_options, run_campaign

    _logging()
    opts = _campaign_options(args)
    try:
        check_options(opts)
    except CampaignError as e:
        print(f"rmq-ha campaign run: {e}", file=sys.stderr)
        return 2
    out = trio.run(run_campaign, opts)
    _print_outcome(out, args.json)
    return 1 if out.check_rc not in (None, 0) else 0


def _campaign_demo(args: argparse.Namespace) -> int:
    import trio

    from rmq_jepsen.hosts import is_root, local_down
    from rmq_jepsen.runner import CampaignOptions, run_campaign
    from rmq_jepsen.state import StateDir

    _logging()
    root = is_root()
    if root:
        print(
            f"demo: 5 local hosts (network namespaces, sshd), controller mode, {args.time:.0f} s "
            "of queue + admin workload with partitions and kills, then the checker"
        )
    else:
        print(
            "demo: NOT ROOT — partitions need root (network namespaces, iptables). Running the "
            "same campaign on loopback processes with kill and pause only; partitions skipped."
        )
    opts = CampaignOptions(
        hosts="local" if root else "loopback",
        n=5,
        topology="controller",
        workload="queue,admin",
        nemesis="partition,kill" if root else "kill,pause",
        time_s=args.time,
        store=args.store,
        test="demo",
        rate=100,
        concurrency=5,
    )
    try:
        out = trio.run(run_campaign, opts)
    finally:
        if root:
            local_down(StateDir(), log=lambda s: None)
            print("demo: hosts torn down")
    _print_outcome(out, False)
    return 1 if out.check_rc not in (None, 0) else 0


def _campaign_list(args: argparse.Namespace) -> int:
    from rmq_jepsen.runner import list_runs

    runs = list_runs(Path(args.store))
    if args.json:
        print(json.dumps(runs))
        return 0
    if not runs:
        print(f"no runs in {args.store}/")
    for r in runs:
        print(
            f"{r['test']}/{r['run']}  ops {r['ops']}  faults {r['faults']}  "
            f"healed {r['healed']}  replication full {r.get('replication_full')}  "
            f"verdict {r['verdict']}"
        )
    return 0


def fault_times(f: dict[str, Any]) -> str:
    """How long a fault took to apply, was wholly in force and took to heal (from a summary's
    fault entry, history times), or "" without them (a skipped fault, an older run)."""
    keys = ("start_ns", "applied_ns", "healing_ns", "stop_ns")
    if any(f.get(k) is None for k in keys):
        return ""
    t = [f[k] / 1e9 for k in keys]
    applying, in_force, healing = t[1] - t[0], t[2] - t[1], t[3] - t[2]
    return f" (applying {applying:.1f} s, in force {in_force:.1f} s, healing {healing:.1f} s)"


def _campaign_show(args: argparse.Namespace) -> int:
    d = Path(args.run)
    if not d.is_dir():
        d = Path(args.store) / args.run
        if (d / "latest").exists():
            d = d / "latest"
    summ = d / "summary.json"
    if not summ.exists():
        print(f"no run at {d}", file=sys.stderr)
        return 2
    s = json.loads(summ.read_text())
    print(f"run: {d.resolve()}")
    for k in ("run_id", "provider", "seed", "ops", "verdict", "check_rc"):
        print(f"{k}: {s.get(k)}")
    print(f"healed: {(s.get('healed') or {}).get('healed')}")
    if (rep := replication_text(s)) is not None:
        print(rep)
    print(f"timings: {s.get('timings')}")
    print(f"drain: {s.get('drain')}")
    for f in s.get("faults", []):
        print(
            f"fault {f['fault_id']} {f['variant']} on {f['targets']}: {f['detail']}{fault_times(f)}"
        )
    for note in s.get("notes", []):
        print(f"note: {note}")
    for name in (
        "history.jsonl",
        "history.parquet",
        "nemesis.jsonl",
        "results.json",
        "report.html",
    ):
        p = d / name
        print(f"{name}: {'yes' if p.exists() else 'no'}")
    return 0


def _bench_history(args: argparse.Namespace) -> int:
    from rmq_jepsen.bench import history

    _logging()
    out = history.run(ops=args.ops, hosts=args.hosts, skip_hosts=args.no_hosts)
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"recorder: {out['recorder_ops_per_s']:,} ops/s  baseline (json.dumps + write): "
            f"{out['baseline_ops_per_s']:,} ops/s  ratio {out['ratio']}  (goal >= 50,000)"
        )
        if "bringup" in out:
            b = out["bringup"]
            print(
                f"bring-up of {b['nodes']} hosts ({b['provider']}): hosts {b['hosts_up_s']} s, "
                f"cluster ready {b.get('cluster_up_s')} s (goal <= 30 s)"
            )
    return 0
