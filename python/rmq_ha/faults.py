"""Fault-injection points for tests and fault campaigns, switched on per process with the
environment variable ``RMQ_HA_FAULTS`` (comma-separated names). Each point makes the process
behave exactly as if the named fault had happened on the network or disk; nothing else about
the process changes. With the variable unset every point is off.

* ``drop-alter-sync-state-set-reply``: the master's ALTER_SYNC_STATE_SET reaches the controller
  and is applied there, but the answer is lost (RocketMQ #5663).
"""

from __future__ import annotations

import os
from typing import Final

ENV: Final = "RMQ_HA_FAULTS"
DROP_ALTER_SYNC_STATE_SET_REPLY: Final = "drop-alter-sync-state-set-reply"
KNOWN: Final = frozenset({DROP_ALTER_SYNC_STATE_SET_REPLY})


def active(name: str) -> bool:
    if name not in KNOWN:
        raise ValueError(f"unknown fault point {name!r}")
    return name in {f.strip() for f in os.environ.get(ENV, "").split(",")}
