"""rmq_ha: a RocketMQ-style replicated message broker with controller-mode and
slave-acting-master high availability, plus a Jepsen-style bench and a PySpark checker."""

from __future__ import annotations

__version__ = "0.1.0"
