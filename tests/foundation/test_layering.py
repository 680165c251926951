"""Dependencies flow one way (README, "Layout"): `receiver` and `reconcile` use `partnerkit`, never the reverse.

A fork may vendor `partnerkit/` alone (its own web app, the client, the store and the crypto): the core must
import without the receiver, the worker or the sandbox. Checked in a fresh interpreter in which importing
any of them fails, so a module-level import anywhere in the chain shows up as the error it would be there.
The demo (`partnerkit/demo/`) runs the sandbox, the receiver and the worker together, and is left out (as are
the `__main__` modules, which run the command line when imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from partnerkit.config import load_config
from partnerkit.crypto import load_cipher, token_context
from partnerkit.store import open_db, webhook_tokens

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("receiver", "reconcile", "sandbox")
# Run first in the child: importing any of OUTSIDE raises ImportError from then on.
BLOCK = f"import sys\nfor name in {OUTSIDE!r}:\n    sys.modules[name] = None\n"
LOADED = ("print(sorted(m for m in sys.modules if m.split('.')[0] in "
          f"{OUTSIDE!r} and sys.modules[m] is not None))")


def _child(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_load_cipher_loads_no_receiver_module(tmp_path):
    """`load_cipher` checks the key against a stored value (`crypto.refuse_a_stranger` -> `rotation.opens_any`),
    and key rotation's timing comes from partnerkit (store.db.RECEIVER_BUSY_TIMEOUT_MS, crypto.TOKEN_REFRESH_S),
    not from receiver.state: before, this loaded receiver, its metrics and prometheus_client."""
    env = {"PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_VOUCHER_KEY": "vk-layering-16-bytes-key"}
    config = load_config(environ=env)
    db = open_db(config.db_path)
    sealed = load_cipher(config).encrypt("whsec_layering", context=token_context("7"))
    webhook_tokens.save(db, "7", sealed, now=datetime(2025, 1, 15, tzinfo=timezone.utc))
    db.conn.close()
    done = _child("from partnerkit.config import load_config\n"
                  "from partnerkit.crypto import load_cipher, token_context\n"
                  "from partnerkit.store import open_db, webhook_tokens\n"
                  "config = load_config()\n"
                  "cipher = load_cipher(config)\n"
                  "(_, sealed), = webhook_tokens.sealed(open_db(config.db_path))\n"
                  "print(cipher.decrypt(sealed, context=token_context('7')))\n"
                  + LOADED + "\nprint('prometheus_client' in sys.modules)\n", env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["whsec_layering", "[]", "False"]


def test_every_partnerkit_module_imports_without_receiver_reconcile_or_sandbox():
    """The CLI's commands import the receiver and the worker inside their bodies, when they run: only there."""
    done = _child("import pkgutil, importlib, partnerkit\n"
                  "names = [m.name for m in pkgutil.walk_packages(partnerkit.__path__, 'partnerkit.')\n"
                  "         if not m.name.startswith('partnerkit.demo') and not m.name.endswith('.__main__')]\n"
                  "for name in names:\n"
                  "    importlib.import_module(name)\n"
                  "print(len(names))\n" + LOADED + "\n")
    assert done.returncode == 0, done.stderr[-2000:]
    imported, loaded = done.stdout.splitlines()
    assert int(imported) > 80 and loaded == "[]"


def test_no_sql_is_run_outside_the_store():
    """All SQL lives in partnerkit/store/ (README, "Layout"), transaction handling included (BEGIN, ROLLBACK, a
    snapshot's first read, PRAGMAs): no `execute` call anywhere else in the three packages."""
    import ast

    calls = []
    for package in ("partnerkit", "receiver", "reconcile"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "partnerkit" / "store"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("execute", "executemany", "executescript")):
                    calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert calls == []
