"""Real Apache RocketMQ 5.x on loopback, from Maven Central jars: a namesrv + single-master broker
(what the interop suite uses), or a controller-mode group (3 name servers with embedded
controllers, 3 brokers).

Thin wrapper: the real-RocketMQ launcher lives in the bench package, `rmq_jepsen.bench.realrmq`
(also the baseline of `rmq-ha bench produce` and the RocketMQ side of `bench ha` / `bench
controller --impl`), on the one process launcher `rmq_jepsen.launch`. Standalone use:

    python tests/interop/real_rocketmq.py [--workdir DIR] [--controller]

prints the addresses and runs until SIGINT/SIGTERM, then stops the JVMs.
"""

from __future__ import annotations

import sys

from rmq_jepsen.bench.realrmq import (
    BROKER_NAME,
    CLUSTER_NAME,
    RealControllerGroup,
    main,
    start_real,
)

__all__ = ["BROKER_NAME", "CLUSTER_NAME", "RealControllerGroup", "main", "start_real"]

if __name__ == "__main__":
    sys.exit(main())
