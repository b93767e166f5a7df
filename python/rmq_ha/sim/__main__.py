import sys

from rmq_ha.sim.runner import main

sys.exit(main())
