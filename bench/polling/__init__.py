"""bench.polling: the kit's recharge poller against a naive by-id poller, on the sandbox, in simulated time.

1000 recharges PROCESSING for each poller (the kit's under the sandbox's first client, the naive
one's under the second), settled through the sandbox's control endpoint at the same seeded random
times over 0-40 minutes (SUCCESS 90 %, FAILED 7 %, REVERSED 3 %). Both pollers run every 5
simulated seconds for 46 minutes, the poller's `now` and the sandbox clock advanced together. API
calls are read from the sandbox's own counters (GET /sandbox/stats) around each poller's pass.

The sandbox runs in a child process (its own core; driven over HTTP: clock advance, settle,
stats). Its hourly limit is raised to 1,000,000 so that the naive poller is measured, not
throttled (at the document's 1000 per hour it would be refused almost at once); 429s are counted
and printed all the same. The kit runs with PARTNERKIT_HOURLY_BUDGET=100000 because the 1000
submits that set its side up go through its key's budget; the poller itself stays far inside the
default 1000 per hour (its share is 500).
"""

from bench.polling.run import main

__all__ = ["main"]
