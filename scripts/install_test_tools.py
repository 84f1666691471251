#!/usr/bin/env python3
"""Install what the test suite drives besides Python packages: the agent CLIs (Claude Code,
Codex, pi, see ``scripts/install_agent_clis.py``) and, for the viewer's browser tests, Debian's
``chromium`` and ``chromium-driver``.

Idempotent: installed pieces are left alone; ``apt-get update`` runs only when a package is
missing and apt does not know it yet.  Installing Chromium needs root on Debian (CI runs as
root); elsewhere the script says what to install and exits 2.

    python scripts/install_test_tools.py            # install or verify
    python scripts/install_test_tools.py --force    # reinstall the agent CLIs
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

try:
    from rayeval.agents import _tools
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from rayeval.agents import _tools
from rayeval.agents.resolve import npm_programs

BROWSER_PACKAGES = ("chromium", "chromium-driver")
BROWSER_PROGRAMS = ("chromium", "chromedriver")


def _apt_knows(package: str) -> bool:
    """Whether apt has a candidate version for ``package`` (its lists are present)."""
    shown = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, check=False)
    return "Candidate:" in shown.stdout and "Candidate: (none)" not in shown.stdout


def install_browser() -> int:
    """Install chromium and chromium-driver with apt-get when a program is missing."""
    missing = [program for program in BROWSER_PROGRAMS if shutil.which(program) is None]
    if not missing:
        print(f"browser: {', '.join(BROWSER_PROGRAMS)} present")
        return 0
    if shutil.which("apt-get") is None or not Path("/etc/debian_version").is_file():
        print(
            f"error: {', '.join(missing)} missing and this is not Debian: install Chromium and its "
            "WebDriver (chromedriver) with your system's package manager",
            file=sys.stderr,
        )
        return 2
    if os.geteuid() != 0:
        print(
            f"error: {', '.join(missing)} missing; installing needs root: "
            f"sudo apt-get install -y {' '.join(BROWSER_PACKAGES)}",
            file=sys.stderr,
        )
        return 2
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not all(_apt_knows(package) for package in BROWSER_PACKAGES):
        subprocess.run(["apt-get", "update"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *BROWSER_PACKAGES],
        check=True,
        env=env,
    )
    still = [program for program in BROWSER_PROGRAMS if shutil.which(program) is None]
    if still:
        print(
            f"error: apt-get installed {', '.join(BROWSER_PACKAGES)} but {', '.join(still)} is not on PATH",
            file=sys.stderr,
        )
        return 2
    print(f"browser: installed {', '.join(BROWSER_PACKAGES)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    agents = _tools.main(npm_programs(), argv)
    if agents != 0:
        return agents
    try:
        return install_browser()
    except subprocess.CalledProcessError as exc:
        print(
            f"error: {' '.join(map(str, exc.cmd))} failed with exit code {exc.returncode}",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
