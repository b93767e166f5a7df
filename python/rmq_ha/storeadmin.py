"""`rmq-ha admin store-health | delete-expired | reset-replica` (issue 15).

* `store-health -b HOST:PORT`: asks a running broker (RMQHA_STORE_HEALTH) for its store's
  counters and offsets, the quarantined records, what recovery cut or rebuilt at the last open,
  and the broker's damage, repair and retention counters.
* `delete-expired -b HOST:PORT`: a retention round now (DELETE_EXPIRED_COMMITLOG, RocketMQ's
  `mqadmin deleteExpiredCommitLog`), whatever deleteWhen says; the usual rules still apply.
* `reset-replica -c broker.conf --confirm`: the deliberate way out of "no consistent point"
  (a slave that refuses to sync, `slaveState SUSPEND`: its epochs share no history with the
  master's). With the broker STOPPED, moves the replica's log (commitlog, consume queues,
  checkpoint, manifests, quarantine list, catch-up debt and the epoch file) into
  `<storePathRootDir>/backup-<UTC time>/` and leaves an empty store: started again, the broker
  syncs the master's log from scratch. Topic configs, consumer offsets and the broker's
  identity stay; a catch-up debt of unknown size is written (`haCatchUp`), so the replica is
  not elected before it has synced from a master. Refused without `--confirm`, and while
  something answers on the broker's listen port.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import trio

from rmq_ha.broker.ha import catchup
from rmq_ha.cliargs import positive_seconds
from rmq_ha.config import BrokerConfig, BrokerRole, load
from rmq_ha.errors import RmqHaError, leaf_errors
from rmq_ha.security import cliopts

#: What a reset moves away: the replica's log and everything derived from it.
LOG_FILES = (
    "commitlog",
    "consumequeue",
    "checkpoint",
    "cqmanifest",
    "quarantine",
    "quarantine.bak",
    "haCatchUp",
    "commitlogSegmentSize",
    "scrubProgress",
)


def add_parsers(asub: Any) -> None:
    h = asub.add_parser("store-health", help="a broker's quarantined records, cuts and counters")
    h.add_argument("-b", "--broker", required=True, help="broker host:port")
    h.add_argument("--json", action="store_true", help="the whole answer as JSON")
    h.add_argument("--api-timeout", type=positive_seconds, default=5.0)
    cliopts.add_args(h)
    h.set_defaults(func=run_store_health)
    d = asub.add_parser("delete-expired", help="a retention round on a broker now")
    d.add_argument("-b", "--broker", required=True, help="broker host:port")
    d.add_argument("--api-timeout", type=positive_seconds, default=30.0)
    cliopts.add_args(d)
    d.set_defaults(func=run_delete_expired)
    r = asub.add_parser(
        "reset-replica",
        help="back up and empty a STOPPED replica's log so it re-syncs from the master",
    )
    r.add_argument("-c", "--config", required=True, help="the replica's broker config file")
    r.add_argument(
        "--confirm",
        action="store_true",
        help="really move the replica's log away (required: this discards its own history)",
    )
    r.set_defaults(func=run_reset_replica)


async def _invoke(addr: str, code: int, timeout_s: float, args: argparse.Namespace) -> Any:
    from rmq_ha.net.client import RemotingClient
    from rmq_ha.protocol.command import RemotingCommand

    # a secured broker: ACL credentials and TLS (docs/security.md)
    signer, tls = cliopts.signer_of(args), cliopts.tls_of(args)
    try:
        async with RemotingClient(signer=signer, tls=tls) as c:
            return await c.invoke(addr, RemotingCommand.request(code), timeout_s)
    except BaseExceptionGroup as eg:
        # the client's nursery wraps a refused connection: the one error, for one line
        causes = leaf_errors(eg)
        if len(causes) == 1 and isinstance(causes[0], Exception):
            raise causes[0] from None
        raise


def run_store_health(args: argparse.Namespace) -> int:
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.codes import ResponseCode as Resp

    try:
        r = trio.run(_invoke, args.broker, RC.RMQHA_STORE_HEALTH, args.api_timeout, args)
    except (RmqHaError, OSError, ValueError) as e:
        print(f"rmq-ha admin store-health: {args.broker}: {e}", file=sys.stderr)
        return 1
    if r.code != Resp.SUCCESS or not r.body:
        print(f"rmq-ha admin store-health: {r.code} {r.remark}", file=sys.stderr)
        return 1
    h = json.loads(r.body)
    if args.json:
        print(json.dumps(h, sort_keys=True))
        return 0
    print(render_health(h))
    return 0


def render_health(h: dict[str, Any]) -> str:
    st, b, op = h.get("status", {}), h.get("broker", {}), h.get("open", {})
    lines = [
        f"offsets: min {st.get('min_offset')} max {st.get('max_offset')} "
        f"confirm {st.get('confirm_offset')}",
        f"quarantined: {st.get('quarantined_records')} ranges, {st.get('quarantined_bytes')} "
        f"bytes (found while running: {st.get('quarantined_at_runtime')})",
        f"repaired: {b.get('repaired')}  refused repairs: {b.get('repairRefused')}  "
        f"skipped damaged records: {b.get('skippedDamaged')}  waiting for repair: "
        f"{b.get('waitingForRepair')}",
        f"disk full: {b.get('diskFull')}  retention: {b.get('retention')}  "
        f"deleted files: {b.get('retentionDeletedFiles')}",
        f"scrub: {b.get('scrubPasses')} passes done, {b.get('scrubbedBytes')} bytes validated, "
        f"{b.get('scrubFound')} damaged ranges found"
        + (f", now at {b['scrubAt']}" if b.get("scrubAt") is not None else ""),
    ]
    if op.get("cut_offset") is not None:
        below = " (below the durable point: data lost)" if op.get("cut_below_durable") else ""
        lines.append(
            f"last open cut the log at {op.get('cut_offset')} ({op.get('cut_bytes')} bytes): "
            f"{op.get('cut_reason')}{below}"
        )
    if st.get("checkpoint_error"):
        lines.append(f"checkpoint not written (disk full): {st.get('checkpoint_error')}")
    if st.get("dispatch_error"):
        lines.append(
            "consume-queue dispatch held back (disk full; the messages are in the commitlog,"
            f" retried every flush round): {st.get('dispatch_error')}"
        )
    if op.get("missing_durable"):
        lines.append(f"durable bytes missing at the last open: {op.get('missing_durable')}")
    for t in op.get("cq_rebuilt") or []:
        lines.append(f"consume queue rebuilt at the last open: {t}")
    for e in h.get("quarantined", []):
        where = (
            f"{e.get('topic')} queue {e.get('queue_id')} offset {e.get('queue_offset')}"
            if e.get("topic") is not None
            else "record unknown"
        )
        lines.append(
            f"  quarantined [{e.get('offset')}, +{e.get('size')}) {where}: {e.get('reason')}"
        )
    inc = h.get("incidents") or []
    if inc:
        lines.append(
            f"incidents on record: {len(inc)} (incidents.log in the store root; delete it once"
            " reviewed)"
        )
        lines += [f"  {x}" for x in inc[-10:]]
    return "\n".join(lines)


def run_delete_expired(args: argparse.Namespace) -> int:
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.codes import ResponseCode as Resp

    try:
        r = trio.run(_invoke, args.broker, RC.DELETE_EXPIRED_COMMITLOG, args.api_timeout, args)
    except (RmqHaError, OSError, ValueError) as e:
        print(f"rmq-ha admin delete-expired: {args.broker}: {e}", file=sys.stderr)
        return 1
    if r.code != Resp.SUCCESS:
        print(f"rmq-ha admin delete-expired: {r.code} {r.remark}", file=sys.stderr)
        return 1
    print(f"retention round run on {args.broker}")
    return 0


def run_reset_replica(args: argparse.Namespace) -> int:
    try:
        cfg, _unknown = load(BrokerConfig, args.config)
        moved, backup = reset_replica(cfg, confirm=args.confirm)
    except (RmqHaError, OSError) as e:
        print(f"rmq-ha admin reset-replica: {e}", file=sys.stderr)
        return 1
    print(f"moved {', '.join(moved) or 'nothing'} to {backup}")
    print("start the broker again: it syncs the master's log from scratch")
    return 0


class ResetRefusedError(RmqHaError):
    pass


def reset_replica(cfg: BrokerConfig, *, confirm: bool) -> tuple[list[str], Path]:
    """Moves a stopped replica's log into a backup directory (see the module doc); returns
    what was moved and where."""
    root = cfg.store_root
    if not confirm:
        raise ResetRefusedError(
            f"refusing to reset the replica at {root} without --confirm: this moves its whole "
            "log away (to a backup directory) and it re-syncs from the master"
        )
    if not cfg.enable_controller_mode and cfg.broker_role is not BrokerRole.SLAVE:
        # a classic master restarted empty stays master, and its slaves are cut to its empty
        # log at their next handshake: every replica's copy would go (storage probe)
        raise ResetRefusedError(
            f"{root} is a classic master's store (brokerRole={cfg.broker_role.value}, brokerId"
            f"={cfg.broker_id}): reset only a slave; a master started empty would make its "
            "slaves cut their logs to it. To replace the master's log, make a slave that holds "
            "the data the master first (docs/ha.md)"
        )
    if _listening(cfg.broker_ip, cfg.listen_port):
        raise ResetRefusedError(
            f"something answers on {cfg.broker_ip}:{cfg.listen_port}: stop the broker first"
        )
    if not (root / "commitlog").is_dir():
        raise ResetRefusedError(f"{root} holds no commitlog: not a broker store")
    backup = root / time.strftime("backup-%Y%m%dT%H%M%SZ", time.gmtime())
    n = 0
    while backup.exists():
        n += 1
        backup = backup.with_name(f"{backup.name}-{n}")
    backup.mkdir()
    moved: list[str] = []
    epoch = cfg.epoch_file_path
    targets = [root / f for f in LOG_FILES] + [epoch, epoch.with_name(epoch.name + ".bak")]
    for src in targets:
        if src.exists():
            shutil.move(str(src), str(backup / src.name))
            moved.append(src.name)
    # The emptied replica keeps its identity, so it may still be a SyncStateSet member: it
    # must not be elected with an empty log (the others would cut theirs to it; operator
    # probe: every acknowledged message gone). It owes what the master it follows next holds
    # (an unknown debt of epoch 0: the history it had may be the diverged one the reset
    # discards, so a master of any epoch resolves it at the handshake).
    catchup.save(
        root,
        catchup.CatchUp(
            catchup.UNKNOWN_OFFSET,
            0,
            f"reset by rmq-ha admin reset-replica (its log is in {backup.name})",
        ),
    )
    return moved, backup


def _listening(host: str, port: int) -> bool:
    if port <= 0:
        return False
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
