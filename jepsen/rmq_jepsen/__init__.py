"""The Jepsen-style bench of rmq_ha: hosts reached over SSH, a DB lifecycle, composable
nemeses, workloads through `rmq_ha.client`, and typed histories (`rmq_ha.history`).

Modules: `hosts` (local network namespaces, Vagrant, an SSH host file, loopback), `control`
(commands over SSH with retries, logged per host), `state` (bookkeeping written before every
action, so a crashed run is healed later), `db` (topologies, role configs, processes),
`generator` (pure fault schedules and op streams), `nemesis`, `workload`, `recorder` (the
history writer), `runner` (one campaign), `cli` (`rmq-ha hosts|campaign|bench|demo`).

Beside the campaigns: `bench/` (the benchmarks and the real-RocketMQ launcher), `demo` (the
store demo), `launch` (the one local process launcher of the benchmarks, tests and interop
harness), `checkout` (finding a source checkout, when there is one) and `wheels` (the three
wheels, `make wheels`). This package is not part of the broker's wheel.
"""

__version__ = "0.1.0"
