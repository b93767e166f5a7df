"""A secured cluster for the security tests: a name server and a broker with aclEnable, the
broker signing its own requests with the cluster's credentials."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio

from rmq_ha.broker.broker import Broker, open_broker
from rmq_ha.config import BrokerConfig, BrokerRole, NamesrvConfig
from rmq_ha.nameserver.server import Nameserver
from rmq_ha.security.signing import Credentials

ADMIN = Credentials("clusterAdmin", "cluster-secret-1")
USER = Credentials("client01", "client-secret-1")
#: Publishes to every topic but `forbidden`, subscribes with every group but `banned`.
ACL_TEXT = f"""
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - forbidden=DENY
    groupPerms:
      - banned=DENY
"""
INNER = json.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})


@dataclass
class SecureEnv:
    namesrv: str
    broker: str
    nameserver: Nameserver
    node: Broker
    acl_file: Path
    slave: Broker | None = None


@asynccontextmanager
async def secure_cluster(
    tmp_path: Path, *, slave: bool = False, **broker_kw: Any
) -> AsyncIterator[SecureEnv]:
    """`slave`: also broker-a's slave (id 1), replicating over the authenticated HA port."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_TEXT)
    async with trio.open_nursery() as n:
        ns = Nameserver(NamesrvConfig(listen_port=0, acl_enable=True, plain_acl_file=str(acl)))
        await n.start(ns.serve)
        cfg = BrokerConfig(
            listen_port=0,
            namesrv_addr=ns.address,
            store_path_root_dir=str(tmp_path / "store"),
            commitlog_segment_bytes=1 << 20,
            acl_enable=True,
            plain_acl_file=str(acl),
            inner_client_authentication_credentials=INNER,
            **broker_kw,
        )
        async with open_broker(cfg) as node:
            if not slave:
                yield SecureEnv(ns.address, node.address, ns, node, acl)
            else:
                scfg = replace(
                    cfg,
                    broker_id=1,
                    broker_role=BrokerRole.SLAVE,
                    store_path_root_dir=str(tmp_path / "slave"),
                    ha_send_heartbeat_interval_ms=200,
                )
                async with open_broker(scfg) as s:
                    yield SecureEnv(ns.address, node.address, ns, node, acl, s)
        n.cancel_scope.cancel()
