"""Which release this is: the package version, the schema version it migrates a database to, and the git
commit it was built from (`partnerkit --version`).

The version number alone does not tell two builds apart, and releases are known by commit (docs/upgrade.md).
The commit is read from the checkout the package runs from (an editable install, `make`'s .venv), else from
COMMIT_FILE, which setup.py writes into the wheel when it is built from a checkout (`pip install
/path/to/partnerkit`). Both read the .git directory's files directly: no git binary, and none of its
refusals of a checkout owned by another user (`sudo pip install`).
"""

from __future__ import annotations

import re
from pathlib import Path

from partnerkit import __version__

COMMIT_FILE = "_commit.txt"
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def git_head(root: Path) -> str | None:
    """The commit checked out in `root` (a git work tree), or None when there is none or it cannot be read."""
    try:
        git = root / ".git"
        if git.is_file():  # a linked work tree: ".git" names the real directory
            text = git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            git = (root / text[len("gitdir:"):].strip()).resolve()
        if not git.is_dir():
            return None
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head if _OBJECT_ID.fullmatch(head) else None  # a detached HEAD
        ref = head[len("ref:"):].strip()
        common = git
        if (git / "commondir").is_file():  # a linked work tree keeps its branches in the main one
            common = (git / (git / "commondir").read_text(encoding="utf-8").strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                commit = (base / ref).read_text(encoding="utf-8").strip()
                return commit if _OBJECT_ID.fullmatch(commit) else None
        packed = common / "packed-refs"  # after `git gc`, refs live in one file
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                commit, _, name = line.partition(" ")
                if name == ref and _OBJECT_ID.fullmatch(commit):
                    return commit
    except (OSError, UnicodeDecodeError):
        pass
    return None


def source_commit() -> str | None:
    """The commit this package comes from: its checkout's, else the one recorded at build time, else None."""
    package = Path(__file__).resolve().parent
    commit = git_head(package.parent)
    if commit:
        return commit
    try:
        recorded = (package / COMMIT_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return recorded if _OBJECT_ID.fullmatch(recorded) else None


def schema_version() -> int:
    """The schema version this release migrates a database to (`PRAGMA user_version`)."""
    from partnerkit.store.migrations import discover

    return discover()[-1].version


def describe() -> str:
    """One line: `partnerkit 0.1.0 (schema 9, commit 0123abcd4567)`; the commit only when it is known."""
    commit = source_commit()
    return f"partnerkit {__version__} (schema {schema_version()}" + (f", commit {commit[:12]})" if commit else ")")
