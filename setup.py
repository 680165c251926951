"""Build hook: record the git commit a wheel is built from, for `partnerkit --version`.

Everything else about the package is in pyproject.toml. Built from a checkout (`pip install
/path/to/partnerkit`), the wheel carries partnerkit/_commit.txt; built from anything else, it carries
none and `--version` names no commit.
"""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent))  # partnerkit.release needs only the standard library
from partnerkit.release import COMMIT_FILE, git_head  # noqa: E402


class BuildPyWithCommit(build_py):
    """build_py, plus the checkout's commit in partnerkit/_commit.txt."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "partnerkit" / COMMIT_FILE
        commit = git_head(Path(__file__).resolve().parent)
        if commit:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n", encoding="utf-8")
        else:
            target.unlink(missing_ok=True)  # never a stale commit from an earlier build in the same tree


setup(cmdclass={"build_py": BuildPyWithCommit})
