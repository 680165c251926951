"""The developer's entry points answer: `make help`, `python -m bench --help`, CONTRIBUTING.md naming every
test area (linked from the README's Layout), and partnerkit.errors' docstring drawing every exception."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed here")


def _phony() -> list[str]:
    [line] = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith(".PHONY:")]
    return line.split(":", 1)[1].split()


@needs_make
def test_make_help_lists_every_target_with_what_it_does():
    done = subprocess.run(["make", "--no-print-directory", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    listed = dict(re.findall(r"^  make (\S+) +(\S.*)$", done.stdout, flags=re.M))
    assert sorted(listed) == sorted(_phony())


@needs_make
def test_bare_make_still_only_creates_the_venv():
    done = subprocess.run(["make", "--no-print-directory", "-n"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert ".venv" in done.stdout + done.stderr and "make demo" not in done.stdout


def test_bench_help_answers_with_usage_and_runs_nothing(capsys):
    from bench.__main__ import available, main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m bench [NAME ...]")
    for name in available():
        assert re.search(rf"^  {name} +\S", out, flags=re.M), f"bench.{name} has no line in --help (ABOUT)"


def test_contributing_names_every_test_area_and_the_readme_links_it():
    areas = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    text = (ROOT / "CONTRIBUTING.md").read_text()
    assert [a for a in areas if f"`tests/{a}`" not in text] == []
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1]
    assert "[CONTRIBUTING.md](CONTRIBUTING.md)" in layout


def test_the_exception_tree_draws_every_partnerkit_error():
    """STYLE rule 1: one exception tree, drawn in partnerkit.errors' docstring; five subclasses raised outside
    it (DecryptionError among them) were missing (findings-dev F2). Those outside errors.py go by module."""
    import importlib
    import itertools
    import pkgutil

    from partnerkit import errors

    for package in ("partnerkit", "receiver", "reconcile"):
        for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            if module.name.rpartition(".")[2] != "__main__":
                importlib.import_module(module.name)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    def drawn_as(cls) -> str:
        """How the tree names a class: bare in partnerkit.errors, else by its public module (no _private part)."""
        public = ".".join(itertools.takewhile(lambda part: not part.startswith("_"), cls.__module__.split(".")))
        return cls.__name__ if public == "partnerkit.errors" else f"{public}.{cls.__name__}"

    ours = [c for c in subclasses(errors.PartnerKitError) if c.__module__.split(".")[0] in ("partnerkit", "receiver",
                                                                                         "reconcile")]
    missing = sorted({drawn_as(c) for c in ours if not re.search(rf"── {re.escape(drawn_as(c))}\b", errors.__doc__)})
    assert len(ours) > 30 and missing == [], f"not drawn in partnerkit.errors' docstring: {missing}"
