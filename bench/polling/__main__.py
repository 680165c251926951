"""`python -m bench.polling`."""

import sys

from bench.polling.run import main

sys.exit(main(sys.argv[1:]))
