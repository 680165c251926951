"""bench.polling: the kit's recharge poller against a naive by-id poller, on the sandbox, in simulated time.

1000 recharges PROCESSING for each poller (the kit's under the sandbox's first client, the naive
one's under the second), settled through the sandbox's control endpoint at the same seeded random
times over 0-40 minutes (SUCCESS 90 %, FAILED 7 %, REVERSED 3 %). Both pollers run every 5
simulated seconds for 46 minutes, the poller's `now` and the sandbox clock advanced together. API
calls are read from the sandbox's own counters (GET /sandbox/stats) around each poller's pass.

The sandbox's hourly limit is raised to 1,000,000 so that the naive poller is measured, not
throttled (at the document's 1000 per hour it would be refused almost at once); 429s are counted
and printed all the same. The kit runs with PARTNERKIT_HOURLY_BUDGET=100000 because the 2000
submits that set the bench up go through the same key's budget.
"""

from bench.polling.run import main

__all__ = ["main"]
