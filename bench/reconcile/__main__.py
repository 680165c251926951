"""Entry point: python -m bench.reconcile."""

import sys

from bench.reconcile import main

sys.exit(main())
