"""Security checks, each against the real parts: the verifier's comparisons, replays, the token
header, encryption at rest, file modes under a zero umask, logs of a full run, and the receiver's
surface (only the webhook, health, readiness and metrics endpoints; nothing secret in them).

The full run (module fixture): the sandbox on loopback, `partnerkit webhooks register`, the real
receiver (`partnerkit serve`, gunicorn), orders created through the CLI (one delivered at once,
two fulfilled later and announced by signed webhooks), `partnerkit worker --once` fetching the
vouchers, then the operator's commands: vouchers, events, status, config, reconcile, report,
backup. Log level DEBUG, umask 000, no PARTNERKIT_VOUCHER_KEY (so the key file is generated).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from freezegun import freeze_time

from partnerkit.config import Config, WebhookToken
from receiver.app import create_app
from receiver.signature import sign, verify
from tests.receiver.conftest import VOUCHER_KEY
from tests.receiver.servers import PARTNERKIT, ServedReceiver
from tests.reliability.hostile_http import listening_sockets, worker_pids

sandbox_testing = pytest.importorskip("sandbox.testing")

CONFIGURED_TOKEN = "whsec_configured_security_7d41c2e9"
KIT_PACKAGES = ("partnerkit", "receiver", "reconcile")
ROOT = Path(__file__).resolve().parents[2]


# --- constant-time comparison -------------------------------------------------------------------

SECRET_WORDS = ("signature", "digest", "token", "secret", "expected", "given", "mac", "hmac")


def _names(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id.lower())
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr.lower())
        elif isinstance(sub, ast.Call) and isinstance(sub.func, (ast.Name, ast.Attribute)):
            found.add((sub.func.id if isinstance(sub.func, ast.Name) else sub.func.attr).lower())
    return found


def secret_equality_comparisons(path: Path) -> list[str]:
    """`==`/`!=`/`in` comparisons in a module where an operand names a signature, digest, token or secret."""
    tree = ast.parse(path.read_text(), str(path))
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) and o.value is None for o in operands):
            continue  # `x is None`-style presence checks written with ==: not a value comparison
        names = set().union(*(_names(o) for o in operands))
        if any(word in name for name in names for word in SECRET_WORDS) and "webhook_id" not in names:
            hits.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return hits


def test_the_verifier_never_compares_a_secret_with_equality():
    """No ==, != or `in` on a signature, digest or token anywhere in the verifier or the token store."""
    for module in ("receiver/signature.py", "receiver/tokens.py"):
        assert secret_equality_comparisons(ROOT / module) == []


def test_the_detector_finds_an_equality_comparison(tmp_path):
    """The check above is not vacuous: it flags the comparison a careless verifier would make."""
    bad = tmp_path / "bad_verifier.py"
    bad.write_text("def verify(signature, expected):\n    return signature == expected\n")
    assert len(secret_equality_comparisons(bad)) == 1


def test_verify_calls_compare_digest_for_every_candidate_and_for_the_token_header():
    """Observed, not patched: sys.setprofile sees each C call to hmac.compare_digest."""
    import hmac

    body, ts = b'{"event_id":"ct"}', 1714557600
    tokens = [WebhookToken("token-one-aaaa"), WebhookToken("token-two-bbbb"), WebhookToken("token-three-cc")]
    headers = {"X-Timestamp": str(ts), "X-Signature": sign("token-two-bbbb", ts, body),
               "X-SERVICE-WEBHOOK-TOKEN": "token-two-bbbb"}
    calls = []

    def profiler(frame, event, arg):
        if event == "c_call" and arg is hmac.compare_digest:
            calls.append(frame.f_code.co_name)

    sys.setprofile(profiler)
    try:
        matched = verify(headers, body, tokens, now=ts)
    finally:
        sys.setprofile(None)
    assert matched == "token-two-bbbb"
    # Three HMAC comparisons (every candidate, even after a match) and three for the token header.
    assert len(calls) == 6 and set(calls) <= {"verify", "<listcomp>"}
    assert "compare_digest" in inspect.getsource(verify)


# --- replay and the token header, through the Flask app -----------------------------------------

@pytest.fixture
def app(tmp_path):
    config = Config(db_path=tmp_path / "pk.db", webhook_tokens=(WebhookToken(CONFIGURED_TOKEN),),
                    voucher_key=VOUCHER_KEY, log_level="WARNING")
    application = create_app(config)
    yield application
    application.extensions["partnerkit_receiver"].close()


def _inbox(app) -> list[tuple]:
    conn = sqlite3.connect(app.extensions["partnerkit_receiver"].config.db_path)
    try:
        return conn.execute("SELECT dedup_key, duplicate_count FROM inbox").fetchall()
    finally:
        conn.close()


BODY = json.dumps({"event_id": "evt_replay", "event_type": "order.delivered", "created_at": "2024-05-01T10:00:00Z",
                   "data": {"id": 77, "status": "DELIVERED", "quantity": 1, "amount": "10.00"}}).encode()


def test_a_captured_request_replayed_inside_the_window_is_a_duplicate_after_it_refused(app):
    captured_at = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
    ts = int(captured_at.timestamp())
    headers = {"Content-Type": "application/json", "X-Timestamp": str(ts),
               "X-Signature": sign(CONFIGURED_TOKEN, ts, BODY)}
    client = app.test_client()
    outcomes = []
    for later in (0, 1, 299, 300, 301, 3600):
        with freeze_time(captured_at + timedelta(seconds=later)):
            response = client.post("/webhooks/partner", data=BODY, headers=headers)
        outcomes.append((later, response.status_code, response.get_json()))
    assert outcomes == [
        (0, 200, {"status": "accepted"}), (1, 200, {"status": "duplicate"}), (299, 200, {"status": "duplicate"}),
        (300, 200, {"status": "duplicate"}),
        (301, 401, {"status": "rejected", "reason": "timestamp_out_of_tolerance"}),
        (3600, 401, {"status": "rejected", "reason": "timestamp_out_of_tolerance"})]
    assert _inbox(app) == [("evt_replay", 3)]


def test_a_replay_re_signed_with_a_fresh_timestamp_needs_the_token(app):
    """An attacker who captured a delivery cannot refresh its timestamp: the signature covers it."""
    old = 1714557600
    signature = sign(CONFIGURED_TOKEN, old, BODY)
    with freeze_time(datetime.fromtimestamp(old + 3600, timezone.utc)):
        response = app.test_client().post("/webhooks/partner", data=BODY, headers={
            "X-Timestamp": str(old + 3600), "X-Signature": signature})
    assert response.status_code == 401 and response.get_json()["reason"] == "signature_mismatch"
    assert _inbox(app) == []


@pytest.mark.parametrize("extra, reason", [
    ({}, "missing_signature"),
    ({"X-Signature": "0" * 64}, "signature_mismatch"),
    ({"X-Signature": CONFIGURED_TOKEN}, "malformed_signature"),
])
def test_the_service_token_header_alone_is_refused(app, extra, reason):
    ts = int(time.time())
    headers = {"X-Timestamp": str(ts), "X-SERVICE-WEBHOOK-TOKEN": CONFIGURED_TOKEN, **extra}
    response = app.test_client().post("/webhooks/partner", data=BODY, headers=headers)
    assert response.status_code == 401 and response.get_json()["reason"] == reason
    assert _inbox(app) == []


def test_a_valid_signature_with_a_wrong_token_header_is_refused(app):
    ts = int(time.time())
    headers = {"X-Timestamp": str(ts), "X-Signature": sign(CONFIGURED_TOKEN, ts, BODY),
               "X-SERVICE-WEBHOOK-TOKEN": "whsec_guess"}
    response = app.test_client().post("/webhooks/partner", data=BODY, headers=headers)
    assert response.status_code == 401 and response.get_json()["reason"] == "service_token_mismatch"
    assert _inbox(app) == []


# --- the receiver's surface ---------------------------------------------------------------------

def test_the_receiver_exposes_exactly_four_endpoints(app):
    # Flask(__name__) alone would also route /static/<path:filename>: the app is built without it.
    rules = {(rule.rule, frozenset(rule.methods - {"HEAD", "OPTIONS"})) for rule in app.url_map.iter_rules()}
    assert rules == {("/webhooks/partner", frozenset({"POST"})), ("/healthz", frozenset({"GET"})),
                     ("/readyz", frozenset({"GET"})), ("/metrics", frozenset({"GET"}))}
    assert not app.debug and not app.testing  # no Werkzeug debugger console, no test shortcuts


def test_the_kit_never_loads_the_sandbox():
    """The sandbox's /sandbox control endpoints are not part of the kit: nothing it serves loads it."""
    code = ("import sys, partnerkit.cli, receiver.app, receiver.gunicorn_app, reconcile.scheduler, partnerkit.client;"
            "print(sorted(m for m in sys.modules if m == 'sandbox' or m.startswith('sandbox.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- the full run -------------------------------------------------------------------------------

@dataclass
class FullRun:
    root: Path
    env: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)  # name -> value that must never be logged
    codes: list[str] = field(default_factory=list)         # card numbers, PINs and claim URLs
    logs: dict[str, str] = field(default_factory=dict)     # what each process wrote
    disk: dict[str, bytes] = field(default_factory=dict)   # the store's files, read while it ran
    modes: dict[str, int] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)
    revealed: list[dict] = field(default_factory=list)
    listening: set[str] = field(default_factory=set)  # what the receiver's processes listen on
    port: int = 0


def _cli(run: FullRun, name: str, *args: str, log_stdout: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([PARTNERKIT, *args], env=run.env, capture_output=True, text=True, timeout=120)
    run.logs[f"{name} (stderr)"] = done.stderr
    if log_stdout:
        run.logs[f"{name} (stdout)"] = done.stdout
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


def _wait(predicate, timeout: float = 40.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def _snapshot(run: FullRun, paths: dict[str, Path]) -> None:
    for name, path in paths.items():
        if path.exists():
            run.disk[name] = path.read_bytes()
            run.modes[name] = path.stat().st_mode & 0o777


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    from sandbox.settings import SandboxSettings

    root = tmp_path_factory.mktemp("security")
    old_umask = os.umask(0)  # the kit must make its files private itself
    try:
        settings = SandboxSettings(allow_http_webhooks=True, order_fulfilment_delay_s=2, speed=10)
        with sandbox_testing.SandboxServer(settings) as sandbox:
            alpha = sandbox.clients[0]
            var = root / "var"
            env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
            env.update(PARTNERKIT_DB=str(var / "db" / "pk.db"), PARTNERKIT_API_BASE_URL=sandbox.base_url,
                       PARTNERKIT_API_KEY=alpha.key, PARTNERKIT_API_SECRET=alpha.secret,
                       PARTNERKIT_WEBHOOK_TOKENS=CONFIGURED_TOKEN, PARTNERKIT_LOG_LEVEL="DEBUG",
                       PARTNERKIT_REPORT_DIR=str(var / "reports"))
            run = FullRun(root, env)
            served = ServedReceiver(env, root / "receiver.log")
            _cli(run, "webhooks register", "webhooks", "register", "--url", served.base_url + "/webhooks/partner")
            db_path = var / "db" / "pk.db"
            files = {"db": db_path, "db-wal": db_path.with_name("pk.db-wal"), "db-shm": db_path.with_name("pk.db-shm"),
                     "key file": db_path.with_name("pk.db.voucher.key")}
            with served:
                now_order = json.loads(_cli(run, "orders create 8", "orders", "create", "--product-id", "8",
                                            "--denomination", "50", "--quantity", "2", "--format", "json").stdout)
                # Quantity over 10: fulfilled later, announced by webhooks; product 1's claim URLs carry the code.
                later = json.loads(_cli(run, "orders create 1", "orders", "create", "--product-id", "1",
                                        "--denomination", "100", "--quantity", "11", "--format", "json").stdout)
                order_ids = [now_order["id"], later["id"]]

                def delivered_and_announced():  # the later order's (the first one's came with its creation)
                    conn = sqlite3.connect(db_path)
                    try:
                        done = conn.execute("SELECT COUNT(*) FROM inbox WHERE event_type = 'order.delivered' AND "
                                            "order_id = ?", (later["id"],)).fetchone()
                    finally:
                        conn.close()
                    return done[0] >= 1

                _wait(delivered_and_announced)
                for attempt in range(10):  # the worker's pass fetches the vouchers of the announced orders
                    worker = subprocess.run([PARTNERKIT, "worker", "--once", "--format", "json"], env=env,
                                            capture_output=True, text=True, timeout=120)
                    run.logs[f"worker --once #{attempt} (stderr)"] = worker.stderr
                    run.logs[f"worker --once #{attempt} (stdout)"] = worker.stdout
                    conn = sqlite3.connect(db_path)
                    stored = conn.execute("SELECT COUNT(*) FROM vouchers").fetchone()[0]
                    conn.close()
                    if stored >= 13:
                        break
                    time.sleep(1)
                _snapshot(run, files)  # while the receiver holds the database open: WAL and SHM exist
                master = served.process.pid
                run.listening = listening_sockets({master} | worker_pids(master))
                run.port = served.port
                for path in ("/metrics", "/readyz", "/healthz"):
                    run.endpoints[path] = requests.get(served.base_url + path, timeout=10).text
                day = datetime.now(timezone.utc).date().isoformat()
                for order_id in order_ids:
                    _cli(run, f"vouchers {order_id}", "vouchers", str(order_id), "--format", "json")
                    run.revealed += json.loads(_cli(run, f"vouchers {order_id} --reveal", "vouchers", str(order_id),
                                                    "--reveal", "--format", "json", log_stdout=False).stdout)
                _cli(run, "events list", "events", "list", "--format", "json")
                _cli(run, "orders list", "orders", "list", "--format", "csv")
                _cli(run, "status", "status", "--format", "json")
                _cli(run, "config", "config")
                _cli(run, "reconcile", "reconcile", "--date", day)
                for folder in ("out", "backups"):  # made by the operator: `report --output` and `backup` make none
                    (var / folder).mkdir(mode=0o700)
                _cli(run, "report", "report", "--date", day, "--format", "html", "--output",
                     str(var / "out" / "report.html"))
                _cli(run, "backup", "backup", str(var / "backups" / "pk-backup.db"))
            run.logs["receiver"] = served.log()
            files.update({"backup": var / "backups" / "pk-backup.db", "report --output": var / "out" / "report.html"})
            files.update({f"report {p.name}": p for p in (var / "reports").iterdir()})
            _snapshot(run, {k: v for k, v in files.items() if k not in run.disk})

            tokens = [CONFIGURED_TOKEN] + [
                t for t in _accepted(env) if t != CONFIGURED_TOKEN]
            run.secrets = {"api secret": alpha.secret, "api key": alpha.key, "voucher key": files["key file"].read_text().strip(),
                           **{f"webhook token {i}": t for i, t in enumerate(tokens)}}
            for order_id in order_ids:
                for v in sandbox.sandbox.orders[order_id].vouchers:
                    run.codes += [x for x in (v.card_number, v.pin_code, v.claim_url) if x]
        yield run
    finally:
        os.umask(old_umask)


def _accepted(env: dict[str, str]) -> list[str]:
    from partnerkit.config import load_config
    from partnerkit.crypto import load_cipher
    from partnerkit.store import open_db
    from receiver.tokens import accepted_tokens

    config = load_config(environ=env)
    db = open_db(config.db_path)
    try:
        return [t.token for t in accepted_tokens(config, db, load_cipher(config))]
    finally:
        db.conn.close()


def test_the_full_run_really_happened(full_run):
    """The checks below would be vacuous without vouchers, logs and a registered token."""
    assert len(full_run.revealed) == 13 and len(full_run.codes) >= 13 + 2 + 11  # codes, PINs, claim URLs
    assert len(full_run.secrets) >= 5  # API secret and key, voucher key, configured and registered tokens
    receiver_log = full_run.logs["receiver"]
    assert '"webhook"' in receiver_log and "POST /webhooks/partner" in receiver_log
    assert {"db", "db-wal", "db-shm", "key file", "backup", "report --output"} <= set(full_run.disk)
    assert any(name.startswith("report ") and name.endswith(".html") for name in full_run.disk)


def test_voucher_codes_pins_and_claim_urls_are_only_ciphertext_on_disk(full_run):
    """The raw bytes of the database, its WAL and SHM (read while the receiver ran) and the backup."""
    for name in ("db", "db-wal", "db-shm", "backup"):
        raw = full_run.disk[name]
        leaked = [code for code in full_run.codes if code.encode() in raw]
        assert leaked == [], name
    # The scan would see them: revealed through the CLI, the codes are the provider's.
    assert {v["card_number"] for v in full_run.revealed} <= set(full_run.codes)
    assert {v["pin_code"] for v in full_run.revealed if v["pin_code"]} <= set(full_run.codes)


def test_store_key_backup_and_report_files_are_0600_under_umask_000(full_run):
    loose = {name: oct(mode) for name, mode in full_run.modes.items() if mode & 0o077}
    assert loose == {}
    assert len(full_run.modes) >= 9  # db, wal, shm, key, backup, --output, the report's json/csv/html


def test_directories_the_kit_creates_are_not_world_writable(full_run):
    var = full_run.root / "var"
    made = [var, var / "db", var / "reports"]  # var: the parent the kit made too
    loose = {str(p.relative_to(full_run.root)): oct(p.stat().st_mode & 0o777) for p in made if p.stat().st_mode & 0o022}
    assert loose == {}


def test_logs_of_the_full_run_carry_no_secret_token_code_or_pin(full_run):
    text = "\n".join(full_run.logs.values())
    assert len(text) > 5_000  # DEBUG logs of a receiver, a worker and a dozen commands
    leaked = {name for name, value in full_run.secrets.items() if value in text}
    leaked |= {f"voucher value ...{code[-4:]}" for code in full_run.codes if code in text}
    assert leaked == set()


def test_metrics_readyz_and_healthz_leak_nothing(full_run):
    metrics = full_run.endpoints["/metrics"]
    assert "partnerkit_webhook_events_total" in metrics and "partnerkit_inbox_events" in metrics
    assert json.loads(full_run.endpoints["/readyz"]) == {"status": "ready"}
    assert json.loads(full_run.endpoints["/healthz"]) == {"status": "ok"}
    text = "\n".join(full_run.endpoints.values())
    assert [n for n, v in full_run.secrets.items() if v in text] == []
    assert [c for c in full_run.codes if c in text] == []


def test_the_served_receiver_listens_on_its_bind_address_only(full_run):
    """No gunicorn control socket, no second port: the only way in is the HTTP bind address."""
    from receiver.gunicorn_app import gunicorn_options

    assert full_run.listening == {f"tcp:{full_run.port}"}
    assert gunicorn_options()["control_socket_disable"] is True


@pytest.mark.parametrize("path", ["/admin", "/console", "/sandbox/settings", "/sandbox/clock", "/api/v1/orders",
                                  "/webhooks", "/debug", "/?__debugger__=yes&cmd=resource&f=style.css",
                                  "/static/x", "/metrics/../readyz"])
def test_no_other_surface_over_http(app, path):
    client = app.test_client()
    for method in ("GET", "POST"):
        assert client.open(path, method=method).status_code == 404
