"""Serving under gunicorn: the options `partnerkit serve` uses, and the process it runs.

`partnerkit serve` validates the configuration, then replaces itself with
`python -m receiver.gunicorn_app --bind ... --workers N` so that PROMETHEUS_MULTIPROC_DIR is set
before prometheus_client is first imported in the gunicorn master (workers inherit it by fork).
Its workers are gunicorn's sync workers, except that a request gunicorn refuses itself is answered
in the app's small JSON rather than gunicorn's HTML page (`JsonErrorWorker`).
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
from http import HTTPStatus
from typing import Any, Callable

from gunicorn import glogging, util
from gunicorn.app.base import BaseApplication
from gunicorn.workers.sync import SyncWorker

from partnerkit.printable import printable
from partnerkit.processes import alive, die_with_parent

# Method and path only: never headers (signatures, tokens) and never the query string.
ACCESS_LOG_FORMAT = '%(h)s "%(m)s %(U)s" %(s)s %(B)s %(M)sms'
DEFAULT_BIND = "127.0.0.1:8000"
# By name, as gunicorn's own config file would give it (this module runs as __main__ under `serve`).
WORKER_CLASS = "receiver.gunicorn_app.JsonErrorWorker"
LOGGER_CLASS = "receiver.gunicorn_app.JsonLogger"


class PrintableAtoms(glogging.SafeAtoms):
    """gunicorn's access-log atoms with every character that is not printable escaped (`\\n`, `\\x1b`).

    `%(U)s` is the decoded PATH_INFO: `/x%0A{"level": ...` put a raw line break in the access log, and
    what followed it read as a line of its own (a forged JSON line, say). gunicorn escapes only `"`
    (SafeAtoms, whose escaping this keeps); here every atom is one line, so one request is always one line."""

    def __init__(self, atoms: dict[str, Any]) -> None:
        super().__init__({key: printable(value) if isinstance(value, str) else value for key, value in atoms.items()})


class JsonLogger(glogging.Logger):
    """gunicorn's logger with its error log (start-up, worker boots and exits, timeouts, refused requests)
    written as partnerkit's JSON lines through the process's redactor, like every other line of the
    receiver; a refused request's line repeats what the client sent, query string included.
    The access log keeps its own short format (ACCESS_LOG_FORMAT), one line per request (PrintableAtoms)."""

    atoms_wrapper_class = PrintableAtoms

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        from partnerkit.logs import JsonFormatter, process_redactor

        formatter = JsonFormatter(process_redactor())
        for handler in self.error_log.handlers:
            handler.setFormatter(formatter)


class _Withheld:
    """Takes the place of the client socket while gunicorn writes its own error page: the bytes are
    kept here and never sent (util.write_error -> write_nonblock -> sendall)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def gettimeout(self) -> float:
        return 0.0  # "already non-blocking": write_nonblock writes at once

    def setblocking(self, flag: bool) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.data += data

    def send(self, data: bytes) -> int:
        self.data += data
        return len(data)


class JsonErrorWorker(SyncWorker):
    """gunicorn's sync worker, answering a request gunicorn refuses itself in the receiver's JSON.

    A request gunicorn cannot parse (request line, method, version, a header, a header or line over
    its limits) never reaches the app: gunicorn answers it from `handle_error` with an HTML page.
    Here gunicorn still decides the status and logs the refusal as it always does; only the page
    is replaced by the app's form, `{"status":"bad_request"}`. Nothing else is overridden, so a
    request that parses costs exactly what it costs under the plain sync worker.
    """

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        withheld = _Withheld()
        super().handle_error(req, withheld, addr, exc)
        try:
            util.write_nonblock(client, error_answer(_status_of(bytes(withheld.data))))
        except Exception:  # the client is gone: as gunicorn does, say so at debug level only
            self.log.debug("Failed to send error message.")


def _status_of(page: bytes) -> HTTPStatus:
    """The status of gunicorn's error page (`HTTP/1.1 400 Bad Request`); 500 if it shows none."""
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", page)
    try:
        return HTTPStatus(int(match.group(1))) if match else HTTPStatus.INTERNAL_SERVER_ERROR
    except ValueError:
        return HTTPStatus.INTERNAL_SERVER_ERROR


def error_answer(status: HTTPStatus) -> bytes:
    """A whole HTTP/1.1 answer in the app's error form (receiver.app): werkzeug's name in snake case."""
    from werkzeug.http import HTTP_STATUS_CODES  # where werkzeug's exceptions take their names

    from receiver.app import status_word

    body = json.dumps({"status": status_word(HTTP_STATUS_CODES.get(status.value, status.phrase))},
                      separators=(",", ":")).encode() + b"\n"
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def _child_exit(server: Any, worker: Any) -> None:
    """Tell prometheus_client a worker died, so its live gauges stop counting."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


# (database path, master id) once this process, the gunicorn master, recorded itself as serving (`_when_ready`), by
# pid: a web worker forked from it inherits the dict, and only the master that wrote the record marks it stopped.
_SERVING: dict[int, tuple[str, str]] = {}


def _listening_on(listener: Any) -> str:
    """A gunicorn listener as `--bind` names it: `127.0.0.1:8000`, `[::1]:8000`, `unix:/run/x.sock`."""
    text = str(listener)
    for scheme in ("http://", "https://"):
        text = text.removeprefix(scheme)
    return text


# Files a container runtime puts in every container: Docker's and Podman's (and CRI-O's).
CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")


def _loopback(address: str) -> bool:
    """Whether a listener's address (`_listening_on`) is reachable from this host alone: a loopback IP, a
    name resolving to loopback addresses only, or a unix socket."""
    if address.startswith("unix:"):
        return True
    host = address.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name (gunicorn shows the address it bound, but plain gunicorn's config may differ)
        try:
            found = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        except OSError:
            return False
        return bool(found) and all(ipaddress.ip_address(ip.split("%")[0]).is_loopback for ip in found)


def in_container() -> bool:
    """Whether this process runs in a container (a file of CONTAINER_MARKERS exists)."""
    return any(os.path.exists(marker) for marker in CONTAINER_MARKERS)


def exposure_warning(addresses: list[str], *, container: bool | None = None) -> str | None:
    """The WARNING for a receiver listening beyond loopback (`0.0.0.0:8000`), or None.

    gunicorn's sync workers serve one connection each, whole: a client that sends its headers (or its body)
    a byte at a time holds a worker until the 30 s timeout, so a few slow sockets stall every delivery and
    /healthz. The shipped nginx reads whole requests first (`proxy_request_buffering on`) and the systemd
    units bind 127.0.0.1; a public bind is that protection gone. Inside a container (`container`, by default
    `in_container()`) 0.0.0.0 is how the proxy's container reaches the receiver (deploy/compose.yaml, the
    Dockerfile's CMD): the network is the container's, its reach the port publishing this process cannot
    see (compose.yaml publishes nginx's port alone), so nothing is said there (docs/receiver.md)."""
    exposed = [address for address in addresses if not _loopback(address)]
    if not exposed or (in_container() if container is None else container):
        return None
    return (f"the receiver listens on {', '.join(exposed)}, beyond loopback: never expose gunicorn directly. Its "
            "sync workers are held by slow clients (a few connections sending a byte at a time stall every "
            "delivery until the 30 s timeout); put the shipped nginx (deploy/nginx/partnerkit.conf) or any proxy "
            "that buffers whole requests in front, and bind 127.0.0.1 (docs/receiver.md, \"Never expose "
            "gunicorn directly\")")


def _when_ready(server: Any) -> None:
    """Record in the database, once the master listens, that it serves: its pid and host, its addresses, since
    when (partnerkit.status.note_receiver_started), so `partnerkit status` can name it once it is killed.

    In the master only, before its first worker forks (gunicorn's `when_ready`): one small write per start,
    never one by a web worker or a request. It never stops the receiver from serving: a database this master
    cannot write now (locked past its wait, a full disk) is a WARNING, and the start goes unrecorded.
    A master listening beyond loopback says first, once, that it must not be exposed (`exposure_warning`)."""
    exposed = exposure_warning([_listening_on(listener) for listener in server.LISTENERS])
    if exposed:
        server.log.warning(exposed)
    from partnerkit.config import ConfigError, load_config
    from partnerkit.status import note_receiver_started
    from partnerkit.store import open_db

    try:
        config = load_config()
    except ConfigError:  # plain gunicorn: create_app() names the problem as the worker boots
        return
    try:
        db = open_db(config.db_path)
        try:
            holder = note_receiver_started(db, [_listening_on(listener) for listener in server.LISTENERS])
        finally:
            db.conn.close()
    except Exception as exc:  # bookkeeping only: receiving matters more
        server.log.warning("receiver start not recorded in the database (partnerkit status cannot tell if this "
                           "master is killed): %s: %s", type(exc).__name__, exc)
        return
    _SERVING[os.getpid()] = (str(config.db_path), holder)


# How long a stopping master waits for the database's write lock to mark its record stopped: another process may
# hold it for seconds (the nightly match's merge, `keys rewrap`, a backup), and a stop not recorded reads as a
# master killed. Within deploy/systemd/partnerkit-receiver.service's TimeoutStopSec (35 s) after gunicorn's
# graceful_timeout (10 s) for the workers.
STOP_MARK_WAIT_MS = 20_000


def _note_stopped(server: Any) -> None:
    """Mark this master's record stopped cleanly (gunicorn's shutdown ran to its end: `on_exit`), waiting up to
    STOP_MARK_WAIT_MS for the write lock."""
    serving = _SERVING.pop(os.getpid(), None)
    if serving is None:
        return
    from partnerkit.status import note_receiver_stopped
    from partnerkit.store import open_db

    db_path, holder = serving
    try:
        db = open_db(db_path, busy_timeout_ms=STOP_MARK_WAIT_MS)
        try:
            note_receiver_stopped(db, holder)
        finally:
            db.conn.close()
    except Exception as exc:  # the record then reads as a master killed: say why here
        server.log.warning("receiver stop not recorded in the database (partnerkit status will name this master "
                           "as killed until a receiver starts again on its address): %s: %s", type(exc).__name__, exc)


def _on_exit(server: Any) -> None:
    """Mark this master stopped cleanly in the database (`_when_ready` recorded it), and remove the private
    metrics directory `partnerkit serve` created."""
    if server is not None:
        _note_stopped(server)
    directory = os.environ.get("RECEIVER_METRICS_DIR_OWNED")
    if directory and directory == os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        shutil.rmtree(directory, ignore_errors=True)


def _post_worker_init(worker: Any) -> None:
    """Freeze what the worker holds after building its app, so the cyclic GC stops re-scanning it.

    A worker starts with some 40,000 long-lived objects (modules, the app, its libraries); each
    full collection walked them all, a 25-45 ms pause inside whichever request triggered it.
    Frozen objects are still freed by reference counting; only the cycle detector skips them.
    """
    gc.freeze()


def _post_fork(server: Any, worker: Any) -> None:
    """A web worker exits when its master dies, even by SIGKILL: an orphaned sync worker would serve
    on, holding the port, until its own timeout check noticed (up to 15 s).

    Until the worker installs its own handlers (gunicorn's `init_process`, after this hook, and after the
    app is loaded: seconds on a busy machine), it runs the master's, which only queue a signal for the
    master's loop: the parent-death SIGTERM of a master killed meanwhile, or the one below, was lost, and
    the worker lived on as an orphan (a fresh-clone test run met it). So SIGTERM ends it at once until then."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    arm = die_with_parent(server.pid)
    if arm is not None:
        arm()


def _worker_exit(server: Any, worker: Any) -> None:
    """Save what an exiting worker counted of refused deliveries since its last save (Receiver.close).

    gunicorn calls this in the worker as it exits (a graceful stop, a restart, a timeout's abort), and
    in the master for a worker already gone, which has no app there; an app that is not the
    receiver's (the benchmark's bare app) has nothing to save."""
    if getattr(worker, "pid", None) != os.getpid():
        return
    extensions = getattr(getattr(worker, "wsgi", None), "extensions", None)
    receiver = extensions.get("partnerkit_receiver") if isinstance(extensions, dict) else None
    if receiver is not None:
        receiver.close()


def gunicorn_options(bind: str = DEFAULT_BIND, workers: int = 2, *, log_level: str = "info") -> dict[str, Any]:
    """The gunicorn settings of the receiver (the benchmark's bare app uses the same ones)."""
    return {
        "bind": bind,
        "workers": workers,
        "worker_class": WORKER_CLASS,  # sync, with gunicorn's own refusals answered in JSON
        "logger_class": LOGGER_CLASS,  # gunicorn's error log in partnerkit's JSON lines
        "timeout": 30,  # the document's receiver timeout; a request takes milliseconds
        "graceful_timeout": 10,
        "keepalive": 2,
        "accesslog": "-",
        "errorlog": "-",
        "access_log_format": ACCESS_LOG_FORMAT,
        "loglevel": log_level.lower(),
        "proc_name": "partnerkit-receiver",
        "control_socket_disable": True,  # gunicorn >= 25: one shared default path would collide
        "preload_app": False,  # each worker builds its app (and its database connections) after fork
        "post_fork": _post_fork,
        "post_worker_init": _post_worker_init,
        "worker_exit": _worker_exit,
        "child_exit": _child_exit,
        "when_ready": _when_ready,  # records this master as serving (partnerkit status names it once killed)
        "on_exit": _on_exit,  # ... and as stopped cleanly
    }


class GunicornApplication(BaseApplication):
    """Run a WSGI app factory under gunicorn with the given options (no command-line parsing)."""

    def __init__(self, factory: Callable[[], Any], options: dict[str, Any]) -> None:
        self.factory = factory
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings:  # settings newer than the installed gunicorn are skipped
                self.cfg.set(key, value)

    def load(self) -> Any:
        return self.factory()


METRICS_PREFIX = "partnerkit-metrics-"


def private_metrics_dir() -> str:
    """A fresh 0700 directory for prometheus_client's per-process files, named after this master's pid.

    A master killed with SIGKILL never runs `_on_exit`; the next one removes what such masters left
    (`sweep_metrics_dirs`), so a receiver restarted after every kill -9 does not fill the temp dir.
    """
    sweep_metrics_dirs()
    return tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")


def sweep_metrics_dirs(parent: str | None = None) -> list[str]:
    """Remove this user's metrics directories whose master process is gone; their paths."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        pid_text = name[len(METRICS_PREFIX):].split("-", 1)[0]
        if not name.startswith(METRICS_PREFIX) or not pid_text.isdigit():
            continue  # not ours, or made before directories carried their master's pid
        path = os.path.join(parent, name)
        try:
            if os.stat(path).st_uid != os.getuid() or alive(int(pid_text)):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def main(argv: list[str] | None = None) -> None:
    """Entry point of the gunicorn master (exec'd by `partnerkit serve`)."""
    parser = argparse.ArgumentParser(prog="python -m receiver.gunicorn_app")
    parser.add_argument("--bind", default=DEFAULT_BIND)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = os.environ["RECEIVER_METRICS_DIR_OWNED"] = private_metrics_dir()

    from partnerkit.config import ConfigError, load_config
    from receiver.app import create_app

    try:
        config = load_config()  # the environment, over the file PARTNERKIT_CONFIG names (`serve` passes --config so)
        create_app(config)  # validate here, once, before any worker forks
    except ConfigError as exc:
        _on_exit(None)
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)
    GunicornApplication(lambda: create_app(config, warn=False), gunicorn_options(args.bind, args.workers,
                                                                     log_level=config.log_level)).run()


if __name__ == "__main__":
    main()
