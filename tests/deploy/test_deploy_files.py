"""deploy/: each file checked as far as this machine allows (systemd-analyze, nginx parser, YAML)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import crossplane
import pytest
import requests
import yaml

from partnerkit.config import ENV_NAMES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
TIMERS = sorted((DEPLOY / "systemd").glob("*.timer"))


def test_env_example_lists_every_variable_and_nothing_else():
    names = set(re.findall(r"^(PARTNERKIT_[A-Z_]+)=", (DEPLOY / "partnerkit.env.example").read_text(), re.M))
    assert names == set(ENV_NAMES.values())


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
@pytest.mark.parametrize("unit", UNITS + TIMERS, ids=lambda p: p.name)
def test_systemd_units_verify(unit, tmp_path):
    # systemd-analyze checks that ExecStart exists: point it at this checkout's console script. A timer
    # is verified beside the service it starts.
    script = Path(sys.executable).with_name("partnerkit")
    for source in [unit] + ([unit.with_suffix(".service")] if unit.suffix == ".timer" else []):
        (tmp_path / source.name).write_text(source.read_text().replace("/opt/partnerkit/.venv/bin/partnerkit", str(script)))
    result = subprocess.run(["systemd-analyze", "verify", str(tmp_path / unit.name)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_run_as_a_non_root_user_with_hardening(unit):
    text = unit.read_text()
    for line in ("User=partnerkit", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "EnvironmentFile=/etc/partnerkit/partnerkit.env", "UMask=0077"):
        assert line in text, f"{unit.name} lacks {line}"
    # Services restart on failure; a oneshot check must not (its failure is the alert).
    assert ("Restart=on-failure" in text) == ("Type=oneshot" not in text), unit.name


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_give_partnerkit_the_file_systemd_loads(unit):
    # partnerkit then refuses at start a line EnvironmentFile= reads otherwise (README, "Configuration").
    text = unit.read_text()
    assert "Environment=PARTNERKIT_CONFIG=/etc/partnerkit/partnerkit.env\n" in text


def test_what_the_services_write_is_where_protect_system_strict_lets_them():
    """ProtectSystem=strict leaves the state directory writable alone: the example file keeps the database
    (with its -wal, -shm and key file beside it) and the reports there."""
    env = dict(re.findall(r"^(PARTNERKIT_[A-Z_]+)=(.*)$", (DEPLOY / "partnerkit.env.example").read_text(), re.M))
    for unit in UNITS:
        text = unit.read_text()
        assert "ProtectSystem=strict\n" in text and "StateDirectory=partnerkit\n" in text, unit.name
    for name in ("PARTNERKIT_DB", "PARTNERKIT_REPORT_DIR"):
        assert Path(env[name]).is_relative_to("/var/lib/partnerkit"), name
    # A fresh host (README "Move to a new host") restores before any unit has created the directory.
    readme = (DEPLOY.parent / "README.md").read_text()
    assert "sudo install -d -m 0700 -o partnerkit -g partnerkit /var/lib/partnerkit" in readme


def test_the_worker_is_not_restarted_on_a_refusal_a_restart_cannot_change():
    """Exit 2 (a bad setting, another account's key) would be one wallet read at the provider every 2 s;
    the receiver keeps restarting on it, since it starts once `webhooks register` saved a token."""
    worker = (DEPLOY / "systemd" / "partnerkit-worker.service").read_text()
    receiver = (DEPLOY / "systemd" / "partnerkit-receiver.service").read_text()
    assert "RestartPreventExitStatus=2\n" in worker
    assert "RestartPreventExitStatus" not in receiver and "Restart=on-failure\n" in receiver


def test_the_units_documentation_is_where_the_readme_install_puts_it():
    readme = (DEPLOY.parent / "README.md").read_text()
    assert "sudo cp -r README.md docs /opt/partnerkit/" in readme
    for unit in UNITS + TIMERS:
        (line,) = [line for line in unit.read_text().splitlines() if line.startswith("Documentation=")]
        for uri in line.removeprefix("Documentation=").split():
            assert uri.startswith("file:///opt/partnerkit/"), (unit.name, uri)
            assert (DEPLOY.parent / uri.removeprefix("file:///opt/partnerkit/")).is_file(), (unit.name, uri)


def test_the_readme_deploy_removes_debians_default_site_before_nginx_t():
    """Debian's `sites-enabled/default` is port 80's default_server: beside it `nginx -t` warned `conflicting
    server name "_" on 0.0.0.0:80, ignored`, and the site's HTTP -> HTTPS redirect never applied."""
    lines = (DEPLOY.parent / "README.md").read_text().splitlines()
    step = lines.index(next(line for line in lines if line.startswith("sudo rm -f /etc/nginx/sites-enabled/default")))
    assert lines.index("sudo cp deploy/nginx/partnerkit.conf /etc/nginx/sites-enabled/") < step
    assert step < lines.index("sudo nginx -t && sudo systemctl reload nginx")


def test_the_status_timer_starts_the_check_that_fails_while_something_needs_a_person():
    service = (DEPLOY / "systemd" / "partnerkit-status.service").read_text()
    assert "ExecStart=/opt/partnerkit/.venv/bin/partnerkit status --check" in service
    assert "PrivateNetwork=yes" in service  # it reads the database only
    timer = (DEPLOY / "systemd" / "partnerkit-status.timer").read_text()
    assert "OnUnitActiveSec=5min" in timer and "WantedBy=timers.target" in timer


def test_nginx_site_parses_with_body_limit_and_tls(tmp_path):
    main = tmp_path / "nginx.conf"
    main.write_text(f"events {{}}\nhttp {{\n    include {DEPLOY / 'nginx' / 'partnerkit.conf'};\n}}\n")
    parsed = crossplane.parse(str(main), check_ctx=True, check_args=True)
    assert parsed["status"] == "ok", parsed["errors"]
    text = (DEPLOY / "nginx" / "partnerkit.conf").read_text()
    assert "client_max_body_size 1m;" in text
    # `http2 on;` needs nginx 1.25.1; Debian 12 ships 1.22 and Ubuntu 24.04 1.24 (the systemd deploy's nginx).
    assert "listen 443 ssl http2;" in text and not re.search(r"^\s*http2\s", text, re.M)
    assert "$http_x_signature" not in text and "$http_x_service_webhook_token" not in text


def _directives(block, name):
    """Every directive `name` in a crossplane block, at any depth."""
    for directive in block:
        if directive["directive"] == name:
            yield directive
        yield from _directives(directive.get("block", []), name)


def test_nginx_site_passes_the_webhook_and_healthz_only_and_logs_no_query_string():
    (site,) = crossplane.parse(str(DEPLOY / "nginx" / "partnerkit.conf"), single=True, check_ctx=False)["config"]
    locations = {tuple(d["args"]) for d in _directives(site["parsed"], "location")}
    # /readyz commits a probe write per request and /metrics tells how the receiver is doing: inside only.
    assert locations == {("=", "/webhooks/partner"), ("=", "/healthz"), ("/",)}
    (log_format,) = _directives(site["parsed"], "log_format")
    line = "".join(log_format["args"][1:])
    # `combined` logs $request, the request line with its query string (a token put in a URL).
    assert "$uri" in line
    assert not re.search(r"\$(request|request_uri|args|query_string|http_authorization)\b|\$(arg|http_x|cookie)_", line)
    access_logs = list(_directives(site["parsed"], "access_log"))
    assert len(access_logs) == 2 and all(d["args"][1:] == [log_format["args"][0]] for d in access_logs)


NGINX = os.environ.get("NGINX_BINARY") or shutil.which("nginx")
needs_nginx = pytest.mark.skipif(NGINX is None, reason="no nginx here (NGINX_BINARY names one, e.g. Debian's: "
                                 "`apt-get install nginx`)")
# nginx 1.25.1 and later say this of `listen 443 ssl http2;`, which the older ones need (README).
HTTP2_DEPRECATION = 'the "listen ... http2" directive is deprecated'


def _nginx_site(tmp_path: Path, upstream_port: int = 8000, listen: dict[str, str] | None = None) -> Path:
    """The site as the README's systemd deploy installs it (upstream on loopback), with a certificate for
    127.0.0.1 and its paths in tmp_path; `listen` rewrites the ports. Returns the main nginx.conf."""
    from datetime import datetime, timedelta, timezone
    from ipaddress import IPv4Address

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "fullchain.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls" / "privkey.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    # README: `sed -i 's/server receiver:8000;/server 127.0.0.1:8000;/'`.
    site = (DEPLOY / "nginx" / "partnerkit.conf").read_text().replace("server receiver:8000;",
                                                                       f"server 127.0.0.1:{upstream_port};")
    for old, new in (listen or {}).items():
        assert old in site, old
        site = site.replace(old, new)
    (tmp_path / "site.conf").write_text(site.replace("/etc/nginx/tls", str(tmp_path / "tls"))
                                        .replace("/var/log/nginx", str(tmp_path)))
    temps = "".join(f"    {kind}_temp_path {tmp_path / kind};\n" for kind in
                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    # As root, nginx's workers would run as `nobody`, who cannot enter tmp_path (mode 0700).
    user = "user root;\n" if os.geteuid() == 0 else ""
    main = tmp_path / "nginx.conf"
    main.write_text(f"{user}pid {tmp_path / 'nginx.pid'};\nerror_log {tmp_path / 'error.log'};\nevents {{}}\n"
                    f"http {{\n{temps}    access_log {tmp_path / 'access.log'};\n    include {tmp_path / 'site.conf'};\n}}\n")
    return main


@needs_nginx
def test_nginx_site_loads_in_a_real_nginx(tmp_path):
    """`nginx -t` on the site as the README's systemd deploy installs it (upstream on loopback)."""
    main = _nginx_site(tmp_path)
    done = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(main), "-e", str(tmp_path / "error.log")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "syntax is ok" in done.stderr
    warnings = [line for line in done.stderr.splitlines() if "[warn]" in line and HTTP2_DEPRECATION not in line]
    assert not warnings, done.stderr


@needs_nginx
def test_nginx_site_in_front_of_the_receiver(tmp_path):
    """A real nginx with the site, before `partnerkit serve`, on loopback ports: a signed delivery passes over
    TLS; a body over 1 MiB is refused by nginx before the receiver; /readyz and /metrics are not public; the
    receiver sees 127.0.0.1 and logs the X-Forwarded-For nginx extends; no query string reaches nginx's log."""
    from tests.receiver.conftest import TOKEN, VOUCHER_KEY, envelope, signed_headers
    from tests.receiver.servers import ServedReceiver, free_port

    from partnerkit.store import open_db

    env = {"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_WEBHOOK_TOKENS": TOKEN,
           "PARTNERKIT_VOUCHER_KEY": VOUCHER_KEY}
    http_port, https_port = free_port(), free_port()
    with ServedReceiver(env, tmp_path / "serve.log") as served:
        main = _nginx_site(tmp_path, served.port, {"listen 80;": f"listen 127.0.0.1:{http_port};",
                                                   "listen 443 ssl": f"listen 127.0.0.1:{https_port} ssl"})
        nginx = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(main), "-e", str(tmp_path / "error.log"),
                                  "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        base, verify = f"https://127.0.0.1:{https_port}", str(tmp_path / "tls" / "fullchain.pem")
        try:
            for _ in range(150):  # nginx starts in milliseconds; bounded at 15 s
                try:
                    healthz = requests.get(base + "/healthz", verify=verify, timeout=2)
                    break
                except requests.ConnectionError:
                    assert nginx.poll() is None, nginx.stderr.read().decode()
                    time.sleep(0.1)
            else:
                pytest.fail("nginx did not answer in 15 s")
            body = envelope("evt_nginx_1")
            headers = signed_headers(body)
            accepted = requests.post(base + "/webhooks/partner", data=body, headers=headers, verify=verify,
                                     timeout=10)
            forged = requests.post(base + "/webhooks/partner?token=query-secret-12345", data=b"{}",
                                   headers={**signed_headers(b"{}", token="whsec_not_the_token"),
                                            "X-Forwarded-For": "203.0.113.9"}, verify=verify, timeout=10)
            too_large = requests.post(base + "/webhooks/partner", data=b"x" * (1024 * 1024 + 1),
                                      headers=signed_headers(b"x"), verify=verify, timeout=10)
            inside = {path: requests.get(base + path, verify=verify, timeout=10) for path in ("/readyz", "/metrics")}
            direct = requests.get(served.base_url + "/readyz", timeout=10)
            get_webhook = requests.get(base + "/webhooks/partner", verify=verify, timeout=10)
            plain = requests.post(f"http://127.0.0.1:{http_port}/webhooks/partner", data=body,
                                  allow_redirects=False, timeout=10)
        finally:
            nginx.terminate()
            nginx.wait(timeout=15)
            nginx.stderr.close()
    assert healthz.json() == {"status": "ok"}
    assert (accepted.status_code, accepted.json()) == (200, {"status": "accepted"})
    db = open_db(tmp_path / "pk.db")
    assert db.execute("SELECT COUNT(*) FROM inbox").fetchone() == (1,)
    assert (forged.status_code, forged.json()["reason"]) == (401, "signature_mismatch")
    assert too_large.status_code == 413 and "application/json" not in too_large.headers.get("Content-Type", "")
    assert {path: r.status_code for path, r in inside.items()} == {"/readyz": 404, "/metrics": 404}
    assert direct.json() == {"status": "ready"}  # on the receiver's own port, as compose's healthcheck reads it
    assert get_webhook.status_code == 403
    assert plain.status_code == 301 and plain.headers["Location"].startswith("https://")
    log = served.log()
    (rejected,) = [json.loads(line) for line in log.splitlines() if '"webhook rejected"' in line]
    assert rejected["remote"] == "127.0.0.1" and rejected["forwarded_for"] == "203.0.113.9, 127.0.0.1"
    # The 1 MiB + 1 body never reached the receiver: two POSTs in its access log, the accepted and the forged.
    assert log.count('"POST /webhooks/partner"') == 2
    access = (tmp_path / "partnerkit.access.log").read_text()
    assert access.count('"POST /webhooks/partner ') == 4  # the three over TLS and the one over plain http
    assert "query-secret" not in access and headers["X-Signature"] not in access and "203.0.113.9" not in access


def test_compose_runs_receiver_and_worker_on_one_volume_behind_nginx():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"receiver", "worker", "nginx"}
    assert services["receiver"]["command"][:2] == ["partnerkit", "serve"]
    assert services["worker"]["command"] == ["partnerkit", "worker"]
    assert services["worker"]["hostname"], "a recreated worker container keeps its host name (no false takeover)"
    for name in ("receiver", "worker"):
        assert "partnerkit-data:/var/lib/partnerkit" in services[name]["volumes"]
        assert services[name]["cap_drop"] == ["ALL"]
        assert services[name]["init"] is True, "as PID 1 a stop during start-up would wait for SIGKILL"
    assert "partnerkit-data" in compose["volumes"]
    assert services["nginx"]["ports"] == ["443:443"]
    # nginx resolves `receiver` once: restarted with a recreated receiver, it follows its new address.
    assert services["nginx"]["depends_on"]["receiver"] == {"condition": "service_healthy", "restart": True}
    assert services["worker"]["stop_grace_period"] == "60s"  # the worker unit's TimeoutStopSec


@pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(["docker", "compose", "version"],
                    capture_output=True).returncode != 0, reason="docker compose is not installed here")
def test_docker_compose_config_accepts_the_file(tmp_path):
    # env_file must exist for `config`; use an empty one beside a copy of the file.
    (tmp_path / "partnerkit.env").write_text("")
    (tmp_path / "compose.yaml").write_text((DEPLOY / "compose.yaml").read_text())
    result = subprocess.run(["docker", "compose", "-f", str(tmp_path / "compose.yaml"), "config", "--quiet"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_dockerfile_is_slim_non_root_with_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "USER partnerkit" in text
    assert "HEALTHCHECK" in text and "/readyz" in text


def test_the_build_context_leaves_out_local_state_and_secrets():
    """compose builds from the repository: a try-out's database, key file and .venv are not sent to the builder."""
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    # Patterns match from the context root: "**/" reaches a database or key file in any folder.
    for entry in (".venv", "var", ".git", "**/*.db", "**/*.db-*", "**/*.key", "deploy/partnerkit.env", "deploy/tls"):
        assert entry in ignored
    copied = re.findall(r"^COPY (?!--from)(\S+)", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert copied and not set(copied) & set(ignored), "the Dockerfile copies what .dockerignore leaves out"


def test_gunicorn_conf_loads_with_the_receivers_own_settings(monkeypatch):
    from receiver.gunicorn_app import ACCESS_LOG_FORMAT
    from tests.receiver.servers import deploy_gunicorn_config

    monkeypatch.setenv("RECEIVER_WORKERS", "3")
    cfg = deploy_gunicorn_config(monkeypatch)
    assert cfg.workers == 3
    assert cfg.timeout == 30  # the document's receiver timeout
    assert cfg.bind == ["127.0.0.1:8000"]
    assert cfg.access_log_format == ACCESS_LOG_FORMAT
    assert "%({" not in cfg.access_log_format  # no request or response header is ever logged
    assert cfg.preload_app is False
    from receiver.gunicorn_app import gunicorn_options

    for name, value in gunicorn_options(workers=3).items():  # every setting, hooks included (post_fork once missed)
        if name in cfg.settings and name != "bind":
            assert cfg.settings[name].value == value, name


def test_gunicorn_conf_takes_the_log_level_of_the_file_partnerkit_config_names(monkeypatch, tmp_path):
    """Plain gunicorn's own log level is the app's: PARTNERKIT_LOG_LEVEL from the --config file too."""
    from tests.receiver.servers import deploy_gunicorn_config

    env_file = tmp_path / "partnerkit.env"
    env_file.write_text("PARTNERKIT_LOG_LEVEL=WARNING\n")
    monkeypatch.delenv("PARTNERKIT_LOG_LEVEL", raising=False)
    monkeypatch.setenv("PARTNERKIT_CONFIG", str(env_file))
    assert deploy_gunicorn_config(monkeypatch).loglevel == "warning"
    monkeypatch.setenv("PARTNERKIT_LOG_LEVEL", "ERROR")  # the environment overrides the file
    assert deploy_gunicorn_config(monkeypatch).loglevel == "error"
