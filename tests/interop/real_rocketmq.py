"""A real Apache RocketMQ 5.x namesrv + single-master broker on loopback, from Maven Central jars.

Thin wrapper: the real-RocketMQ launcher lives in the bench package, `rmq_jepsen.bench.realrmq`
(also the baseline of `rmq-ha bench produce`), on the one process launcher `rmq_jepsen.launch`.
Standalone use:

    python tests/interop/real_rocketmq.py [--workdir DIR]

prints `namesrv=HOST:PORT broker=HOST:PORT` and runs until SIGINT/SIGTERM, then stops both JVMs.
"""

from __future__ import annotations

import sys

from rmq_jepsen.bench.realrmq import BROKER_NAME, CLUSTER_NAME, main, start_real

__all__ = ["BROKER_NAME", "CLUSTER_NAME", "main", "start_real"]

if __name__ == "__main__":
    sys.exit(main())
