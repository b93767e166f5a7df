import sys

if "--group" in sys.argv[1:]:
    # Broker-group seeds (rmq_ha.sim.group); everything else is the Raft/controller runner.
    from rmq_ha.sim.group_cli import main as group_main

    sys.exit(group_main())

from rmq_ha.sim.runner import main

sys.exit(main())
