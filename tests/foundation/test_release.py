"""`partnerkit --version` tells releases apart: version, schema version and the commit it was built from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.release import git_head, schema_version
from partnerkit.store.migrations import discover

CHECKOUT = Path(__file__).resolve().parents[2]
A = "0123456789abcdef0123456789abcdef01234567"
B = "fedcba9876543210fedcba9876543210fedcba98"


def test_version_names_the_schema_and_the_commit_without_any_configuration(tmp_path):
    result = CliRunner().invoke(cli, ["--version"], env={"PARTNERKIT_CONFIG": str(tmp_path / "missing.env"),
                                                         "PARTNERKIT_TOLERANCE_S": "soon"})
    assert result.exit_code == 0, result.output
    assert schema_version() == discover()[-1].version
    commit = git_head(CHECKOUT)  # run from a checkout (make test): its commit; from an sdist: none
    expected = f"partnerkit 0.1.0 (schema {schema_version()}" + (f", commit {commit[:12]})" if commit else ")")
    assert result.output == expected + "\n"


def _git(root: Path, head: str) -> Path:
    git = root / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    return git


def test_the_commit_is_read_from_a_branch_a_packed_ref_or_a_detached_head(tmp_path):
    git = _git(tmp_path / "loose", "ref: refs/heads/main")
    (git / "refs" / "heads" / "main").write_text(A + "\n")
    assert git_head(tmp_path / "loose") == A

    git = _git(tmp_path / "packed", "ref: refs/heads/release")  # after `git gc`
    (git / "packed-refs").write_text(f"# pack-refs with: peeled fully-peeled sorted\n{B} refs/heads/main\n"
                                     f"{A} refs/heads/release\n")
    assert git_head(tmp_path / "packed") == A

    _git(tmp_path / "detached", B)
    assert git_head(tmp_path / "detached") == B


def test_a_linked_work_tree_reads_its_branch_from_the_main_repository(tmp_path):
    main = _git(tmp_path / "main", "ref: refs/heads/main")
    (main / "refs" / "heads" / "topic").write_text(B + "\n")
    linked = main / "worktrees" / "topic"
    linked.mkdir(parents=True)
    (linked / "HEAD").write_text("ref: refs/heads/topic\n")
    (linked / "commondir").write_text("../..\n")
    (tmp_path / "topic").mkdir()
    (tmp_path / "topic" / ".git").write_text(f"gitdir: {linked}\n")
    assert git_head(tmp_path / "topic") == B


def test_no_commit_when_there_is_none_to_read(tmp_path):
    assert git_head(tmp_path) is None  # an installed package: no .git beside it
    _git(tmp_path / "unborn", "ref: refs/heads/main")  # a branch with no commit yet
    assert git_head(tmp_path / "unborn") is None
    _git(tmp_path / "garbage", "not a ref")
    assert git_head(tmp_path / "garbage") is None


def test_the_checkouts_commit_is_what_git_says():
    import shutil
    import subprocess

    if shutil.which("git") is None or not (CHECKOUT / ".git").exists():
        pytest.skip("not a git checkout, or no git here: the tests above cover the reading")
    said = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if said.returncode != 0:
        pytest.skip(f"git cannot read this checkout: {said.stderr.strip()}")
    assert re.fullmatch(r"[0-9a-f]{40}", said.stdout.strip())
    assert git_head(CHECKOUT) == said.stdout.strip()


def test_the_upgrade_and_internals_pages_name_the_newest_migration():
    """docs/upgrade.md's sample `--version` said schema 13 and docs/internals.md's list of migrations stopped at
    13 while m0014 shipped: a developer adding m0015 updates both."""
    newest = discover()[-1]
    upgrade = (CHECKOUT / "docs" / "upgrade.md").read_text()
    assert f"(schema {newest.version}, commit" in upgrade and f"m{newest.version:04d} " in upgrade
    internals = (CHECKOUT / "docs" / "internals.md").read_text()
    assert re.search(rf"\b{newest.version} {newest.name.replace('_', ' ')} \(", internals)
    # Its migration example is the next module: it said VERSION = 15, "m0014 is the newest", while m0015 shipped.
    assert (f"VERSION = {newest.version + 1}  # the newest module's VERSION + 1 (m{newest.version:04d}_{newest.name} "
            "is the newest as this is written)") in internals
