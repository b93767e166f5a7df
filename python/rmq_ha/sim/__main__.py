import sys

if "--acting" in sys.argv[1:]:
    # Slave-acting-master seeds (rmq_ha.sim.acting).
    from rmq_ha.sim.acting_cli import main as acting_main

    sys.exit(acting_main())

if "--group" in sys.argv[1:]:
    # Broker-group seeds (rmq_ha.sim.group); everything else is the Raft/controller runner.
    from rmq_ha.sim.group_cli import main as group_main

    sys.exit(group_main())

from rmq_ha.sim.runner import main

sys.exit(main())
