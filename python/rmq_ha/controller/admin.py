"""Controller admin commands (RocketMQ's mqadmin getControllerMetaData, getSyncStateSet,
getBrokerEpoch, electMaster, cleanBrokerMetadata):

    rmq-ha controller-admin get-controller-metadata -a 127.0.0.1:9878;127.0.0.1:9868
    rmq-ha controller-admin get-sync-state-set -a ADDRS -b broker-a[,broker-b]
    rmq-ha controller-admin get-broker-epoch -a ADDRS -b broker-a
    rmq-ha controller-admin elect-master -a ADDRS -c DefaultCluster -b broker-a -i 2
    rmq-ha controller-admin clean-broker-metadata -a ADDRS -c DefaultCluster -b broker-a
        [--broker-ids "1;2"] [--clean-living-broker]

`-a` defaults to $CONTROLLER_ADDR. `--json` prints one JSON object per line. Exit status: 0
success, 1 when the controller refused or failed, 2 for a usage or connection error.
`controller_admin_parsers(subparsers)` adds the same commands to any subparser group (e.g.
`rmq-ha admin`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

import trio

from rmq_ha.controller import messages as m
from rmq_ha.controller.client import ControllerClient, split_addrs
from rmq_ha.errors import ConfigError, RemotingError
from rmq_ha.net.client import RemotingClient
from rmq_ha.protocol.codes import RequestCode as RC
from rmq_ha.protocol.codes import ResponseCode as Code
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.protocol.json_compat import BodyDecodeError
from rmq_ha.protocol.models import EpochEntryCache
from rmq_ha.security import cliopts

NO_EPOCHS = "the broker does not serve GET_BROKER_EPOCH_CACHE (1007)"


def _emit(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    print(json.dumps(obj, sort_keys=True, default=str) if args.json else text, flush=True)


def _code_name(code: Any) -> str:
    return code.name if isinstance(code, Code) else str(code)


def _fail(args: argparse.Namespace, resp: m.Response) -> int:
    _emit(
        args,
        {"code": int(resp.code), "remark": resp.remark},
        f"refused: {_code_name(resp.code)} {resp.remark}",
    )
    return 1


# --- commands ----------------------------------------------------------------------------------


async def _metadata(cc: ControllerClient, args: argparse.Namespace) -> int:
    failures = 0
    for addr in cc.addrs:
        try:
            h = await cc.metadata(addr)
        except RemotingError as e:
            failures += 1
            _emit(args, {"addr": addr, "error": str(e)}, f"{addr}: unreachable ({e})")
            continue
        obj = {
            "addr": addr,
            "group": h.group,
            "controllerLeaderId": h.controller_leader_id,
            "controllerLeaderAddress": h.controller_leader_address,
            "isLeader": h.is_leader,
            "peers": h.peers,
        }
        leader = f"{h.controller_leader_id}@{h.controller_leader_address}"
        text = f"{addr}: group={h.group} leader={leader} isLeader={h.is_leader} peers={h.peers}"
        _emit(args, obj, text)
    return 1 if failures == len(cc.addrs) else 0


def _replica_text(r: m.ReplicaIdentity) -> str:
    return f"{r.broker_id}@{r.broker_address}{'' if r.alive else ' (dead)'}"


def info_obj(name: str, info: m.ReplicasInfo) -> dict[str, Any]:
    def ids(rs: tuple[m.ReplicaIdentity, ...]) -> list[dict[str, Any]]:
        return [
            {"brokerId": r.broker_id, "brokerAddress": r.broker_address, "alive": r.alive}
            for r in rs
        ]

    return {
        "brokerName": name,
        "masterBrokerId": info.master_broker_id,
        "masterAddress": info.master_address,
        "masterEpoch": info.master_epoch,
        "syncStateSetEpoch": info.sync_state_set_epoch,
        "inSyncReplicas": ids(info.in_sync_replicas),
        "notInSyncReplicas": ids(info.not_in_sync_replicas),
    }


async def _sync_state_data(cc: ControllerClient, names: list[str]) -> m.GetSyncStateDataResponse:
    resp: m.GetSyncStateDataResponse = await cc.request(m.GetSyncStateDataRequest(tuple(names)))
    return resp


async def _sync_state_set(cc: ControllerClient, args: argparse.Namespace) -> int:
    resp = await _sync_state_data(cc, args.broker_name)
    if not resp.ok:
        return _fail(args, resp)
    for name in args.broker_name:
        info = resp.replicas_info.get(name)
        if info is None:
            _emit(args, {"brokerName": name, "error": "unknown"}, f"{name}: not in the controller")
            continue
        in_sync = ", ".join(_replica_text(r) for r in info.in_sync_replicas)
        not_in_sync = ", ".join(_replica_text(r) for r in info.not_in_sync_replicas)
        text = (
            f"{name}: master={info.master_broker_id}@{info.master_address} "
            f"masterEpoch={info.master_epoch} syncStateSetEpoch={info.sync_state_set_epoch} "
            f"inSync=[{in_sync}] notInSync=[{not_in_sync}]"
        )
        _emit(args, info_obj(name, info), text)
    return 0 if all(n in resp.replicas_info for n in args.broker_name) else 1


async def broker_epoch(client: RemotingClient, addr: str, timeout_s: float) -> str | Any:
    """The broker's epoch cache (GET_BROKER_EPOCH_CACHE 1007), or why there is none."""
    try:
        resp = await client.invoke(
            addr, RemotingCommand.request(RC.GET_BROKER_EPOCH_CACHE), timeout_s
        )
    except RemotingError as e:
        return f"unreachable: {e}"
    if resp.code == Code.REQUEST_CODE_NOT_SUPPORTED:
        return NO_EPOCHS
    if resp.code != Code.SUCCESS:
        return f"refused: {resp.code} {resp.remark}"
    try:
        return EpochEntryCache.from_json(resp.body)
    except BodyDecodeError as e:
        return f"bad answer: {e}"


async def _get_broker_epoch(cc: ControllerClient, args: argparse.Namespace) -> int:
    resp = await _sync_state_data(cc, args.broker_name)
    if not resp.ok:
        return _fail(args, resp)
    for name, info in resp.replicas_info.items():
        for r in (*info.in_sync_replicas, *info.not_in_sync_replicas):
            got = await broker_epoch(cc.client, r.broker_address, cc.timeout_s)
            obj: dict[str, Any] = {
                "brokerName": name,
                "brokerId": r.broker_id,
                "brokerAddress": r.broker_address,
            }
            if isinstance(got, EpochEntryCache):
                obj["epochs"] = [e.to_obj() for e in got.epoch_list]
                obj["maxOffset"] = got.max_offset
                text = f"{name} {_replica_text(r)}: " + ", ".join(
                    f"epoch {e.epoch} from {e.start_offset}" for e in got.epoch_list
                )
            else:
                obj["status"] = got
                text = f"{name} {_replica_text(r)}: {got}"
            _emit(args, obj, text)
    return 0


async def _elect_master(cc: ControllerClient, args: argparse.Namespace) -> int:
    req = m.ElectMasterRequest.of_admin_trigger(args.cluster, args.broker_name[0], args.broker_id)
    resp: m.ElectMasterResponse = await cc.request(req)
    if resp.code not in (Code.SUCCESS, Code.CONTROLLER_MASTER_STILL_EXIST):
        return _fail(args, resp)
    obj = {
        "code": int(resp.code),
        "masterBrokerId": resp.master_broker_id,
        "masterAddress": resp.master_address,
        "masterEpoch": resp.master_epoch,
        "syncStateSetEpoch": resp.sync_state_set_epoch,
        "syncStateSet": sorted(resp.sync_state_set),
    }
    _emit(
        args,
        obj,
        f"{args.broker_name[0]}: {_code_name(resp.code)} master="
        f"{resp.master_broker_id}@{resp.master_address} epoch={resp.master_epoch} "
        f"syncStateSet={sorted(resp.sync_state_set)}",
    )
    return 0


async def _clean(cc: ControllerClient, args: argparse.Namespace) -> int:
    req = m.CleanBrokerDataRequest(
        args.cluster, args.broker_name[0], args.broker_ids, args.clean_living_broker
    )
    resp: m.CleanBrokerDataResponse = await cc.request(req)
    if not resp.ok:
        return _fail(args, resp)
    what = f"ids {args.broker_ids}" if args.broker_ids else "the whole group"
    _emit(
        args,
        {"code": 0, "brokerName": args.broker_name[0]},
        f"{args.broker_name[0]}: cleaned {what}",
    )
    return 0


_COMMANDS = {
    "get-controller-metadata": _metadata,
    "get-sync-state-set": _sync_state_set,
    "get-broker-epoch": _get_broker_epoch,
    "elect-master": _elect_master,
    "clean-broker-metadata": _clean,
}


async def _main(args: argparse.Namespace) -> int:
    addrs = split_addrs(args.controller or os.environ.get("CONTROLLER_ADDR", ""))
    if not addrs:
        print("no controller address: use -a host:port[;host:port]", file=sys.stderr)
        return 2
    try:
        signer, tls = cliopts.signer_of(args), cliopts.tls_of(args)
    except (ValueError, ConfigError) as e:
        print(f"{args.controller_admin}: {e}", file=sys.stderr)
        return 2
    async with RemotingClient(signer=signer, tls=tls) as client:
        cc = ControllerClient(client, addrs, args.timeout)
        try:
            return await _COMMANDS[args.controller_admin](cc, args)
        except RemotingError as e:  # here: out of the client's nursery it is an ExceptionGroup
            print(f"{args.controller_admin}: {e}", file=sys.stderr)
            return 2


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.WARNING), stream=sys.stderr
    )
    try:
        return trio.run(_main, args)
    except RemotingError as e:
        print(f"{args.controller_admin}: {e}", file=sys.stderr)
        return 2


# --- parsers -----------------------------------------------------------------------------------


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _common(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument(
        "-a", "--controller", help="controllers host:port[;host:port] ($CONTROLLER_ADDR)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds per request")
    p.add_argument("--log-level", default="warning")
    cliopts.add_args(p)
    p.set_defaults(func=run, controller_admin=name)


def controller_admin_parsers(sub: Any) -> None:
    """Adds the controller admin commands to the subparser group `sub`."""
    p = sub.add_parser("get-controller-metadata", help="each controller's view of the group")
    _common(p, "get-controller-metadata")
    for name, help_ in (
        ("get-sync-state-set", "master, epochs and SyncStateSet of groups"),
        ("get-broker-epoch", "the epoch entries of each replica of groups"),
    ):
        q = sub.add_parser(name, help=help_)
        _common(q, name)
        q.add_argument("-b", "--broker-name", type=_names, required=True, help="name[,name]")
    e = sub.add_parser("elect-master", help="elect this replica master (admin-designated)")
    _common(e, "elect-master")
    e.add_argument("-c", "--cluster", default="DefaultCluster")
    e.add_argument("-b", "--broker-name", type=_names, required=True)
    e.add_argument("-i", "--broker-id", type=int, required=True, help="the replica to elect")
    c = sub.add_parser("clean-broker-metadata", help="drop a group's or some replicas' metadata")
    _common(c, "clean-broker-metadata")
    c.add_argument("-c", "--cluster", default="DefaultCluster")
    c.add_argument("-b", "--broker-name", type=_names, required=True)
    c.add_argument("--broker-ids", help='broker controller ids to clean, "1;2" (default: all)')
    c.add_argument("-l", "--clean-living-broker", action="store_true")


def add_parsers(sub: Any) -> None:
    """`rmq-ha controller-admin ...`."""
    p = sub.add_parser("controller-admin", help="controller metadata administration")
    controller_admin_parsers(p.add_subparsers(dest="controller_admin", required=True))
