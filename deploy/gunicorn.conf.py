"""gunicorn settings for running the receiver with plain gunicorn instead of `partnerkit serve`:

    PROMETHEUS_MULTIPROC_DIR=/run/partnerkit/metrics \
    gunicorn -c deploy/gunicorn.conf.py 'receiver.app:create_app()'

The values come from receiver.gunicorn_app.gunicorn_options(), the same function `partnerkit serve`
uses, so the two ways of running the receiver cannot drift apart: sync workers (answering a request
gunicorn refuses itself in the receiver's JSON, not gunicorn's HTML page), the document's
30-second receiver timeout, graceful shutdown, gunicorn's own log lines as partnerkit's redacted JSON, the cyclic GC told to skip what a worker loaded at
start-up (gc.freeze), each worker's count of refused deliveries saved as it exits (worker_exit), the master
recorded in the database once it listens and marked stopped as it stops cleanly (when_ready, on_exit: `partnerkit
status` names a master that was killed), and an access log of method, path, status, size
and duration only (never headers such as X-Signature or X-SERVICE-WEBHOOK-TOKEN, never the query
string). RECEIVER_BIND and RECEIVER_WORKERS override the bind address and worker count.
PROMETHEUS_MULTIPROC_DIR must name an empty directory writable by the service so that /metrics sums
every worker (partnerkit serve creates a private one itself). Settings come from the environment and
the file PARTNERKIT_CONFIG names, as for every partnerkit command (`partnerkit.config.load_config`).
"""

import os

from partnerkit.config import ConfigError, load_config
from receiver.gunicorn_app import gunicorn_options


def _log_level() -> str:
    """PARTNERKIT_LOG_LEVEL as the app reads it (the environment, over the file PARTNERKIT_CONFIG names)."""
    try:
        return load_config().log_level
    except ConfigError:  # create_app() names the problem as the worker boots
        return os.environ.get("PARTNERKIT_LOG_LEVEL", "info")


# Every setting gunicorn_options() gives, by name: gunicorn reads this module's names, so nothing can be
# left behind here (a list copied by hand once lacked post_fork, which stops a worker whose master died).
for _name, _value in gunicorn_options(
    bind=os.environ.get("RECEIVER_BIND", "127.0.0.1:8000"),
    workers=int(os.environ.get("RECEIVER_WORKERS", "2")),
    log_level=_log_level(),
).items():
    globals()[_name] = _value
