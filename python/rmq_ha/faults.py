"""Fault-injection points for tests and fault campaigns, switched on per process with the
environment variable ``RMQ_HA_FAULTS`` (comma-separated names). Each point makes the process
behave exactly as if the named fault had happened on the network or disk; nothing else about
the process changes. With the variable unset every point is off.

* ``drop-alter-sync-state-set-reply``: the master's ALTER_SYNC_STATE_SET reaches the controller
  and is applied there, but the answer is lost (RocketMQ #5663).
* ``old-namesrv``: the name server answers like a RocketMQ 4.x one that predates RIP-32: it
  does not know GET_BROKER_MEMBER_GROUP (901) or BROKER_HEARTBEAT (904) and answers
  REQUEST_CODE_NOT_SUPPORTED (a oneway 904 is dropped), so brokers must use
  compatibleWithOldNameSrv (QUERY_DATA_VERSION heartbeats, the member-group topic route).
"""

from __future__ import annotations

import os
from typing import Final

ENV: Final = "RMQ_HA_FAULTS"
DROP_ALTER_SYNC_STATE_SET_REPLY: Final = "drop-alter-sync-state-set-reply"
OLD_NAMESRV: Final = "old-namesrv"
KNOWN: Final = frozenset({DROP_ALTER_SYNC_STATE_SET_REPLY, OLD_NAMESRV})


def active(name: str) -> bool:
    if name not in KNOWN:
        raise ValueError(f"unknown fault point {name!r}")
    return name in {f.strip() for f in os.environ.get(ENV, "").split(",")}
