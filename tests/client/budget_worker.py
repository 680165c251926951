"""Child process for the shared-budget tests: N calls with wait=False against one SQLite file
(as the poller, with that own cap, when a fifth argument is given)."""

import json
import sys

from partnerkit.client import PartnerClient, RetryPolicy
from partnerkit.config import Config
from partnerkit.errors import BudgetExhausted
from partnerkit.store import open_db


def main(db_path: str, base_url: str, calls: int, budget: int, own_cap: int | None = None) -> None:
    config = Config(db_path=db_path, api_base_url=base_url, api_key="shared-key", api_secret="s3cret",
                    hourly_budget=budget, http_timeout_s=5)
    client = PartnerClient(config, open_db(db_path), wait_for_budget=False, retry=RetryPolicy(max_attempts=1))
    if own_cap is not None:
        client = client.with_budget("poller", wait=False, own_cap=own_cap)
    ok = exhausted = 0
    for _ in range(calls):
        try:
            client.list_wallets()
            ok += 1
        except BudgetExhausted:
            exhausted += 1
    print(json.dumps({"ok": ok, "exhausted": exhausted}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *(int(a) for a in sys.argv[5:6]))
