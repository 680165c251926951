"""Render a reconciliation report as finance sees it: headless Chromium at laptop width, and printed.

    python scripts/report_screenshot.py [--html REPORT.html] [--out docs/]

Uses Debian's chromium package, installing it (apt-get, as root) when it is missing. Without
--html it takes the newest report of the last `partnerkit demo` run (var/demo/reports). Writes
report-screenshot.png (1366 px wide: a laptop) and report-print.pdf, plus report-print-page1.png
when pdftoppm (poppler-utils) is available, so a person can look at both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def ensure_chromium() -> str:
    """The chromium binary, installed from Debian's packages when missing (needs root)."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("chromium is not installed; run `sudo apt-get install chromium` (Debian) and retry")
    print("installing Debian's chromium package ...", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
    return shutil.which("chromium") or "/usr/bin/chromium"


def newest_demo_report() -> Path:
    reports = sorted((ROOT / "var" / "demo" / "reports").glob("partnerkit-report-*.html"))
    if not reports:
        raise SystemExit("no report found: run `make demo` first, or pass --html PATH")
    return reports[-1]


def chromium(binary: str, *args: str) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, help="the report to render (default: newest demo report)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where to write the images")
    parser.add_argument("--width", type=int, default=1366)
    parser.add_argument("--height", type=int, default=1800)
    args = parser.parse_args(argv)
    html = (args.html or newest_demo_report()).resolve()
    if not html.is_file():
        raise SystemExit(f"{html} does not exist")
    binary = ensure_chromium()
    args.out.mkdir(parents=True, exist_ok=True)
    shot, pdf = args.out / "report-screenshot.png", args.out / "report-print.pdf"
    chromium(binary, f"--window-size={args.width},{args.height}", f"--screenshot={shot}", html.as_uri())
    chromium(binary, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", html.as_uri())
    made = [shot, pdf]
    if shutil.which("pdftoppm"):
        subprocess.run(["pdftoppm", "-png", "-r", "60", "-f", "1", "-l", "1", str(pdf), str(args.out / "report-print-page")],
                       check=True)
        page = next(args.out.glob("report-print-page*1.png"), None)
        if page:
            made.append(page.rename(args.out / "report-print-page1.png"))
    for path in made:
        if not path.exists() or path.stat().st_size == 0:
            raise SystemExit(f"chromium did not produce {path}")
    print(f"rendered {html.name}:")
    for path in made:
        print(f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
