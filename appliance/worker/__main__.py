"""`python -m appliance.worker <bootstrap fd>`: a worker process, started by the supervisor only."""

import sys

from appliance.worker.process import main

sys.exit(main(sys.argv[1:]))
