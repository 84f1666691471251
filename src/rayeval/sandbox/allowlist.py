"""What of the host a sandboxed unit sees: an allow-list, the way Flatpak builds with bubblewrap.

The unit runner's file system starts empty (a read-only tmpfs) and gets, read-only and each at
its own path: the system folders programs need (``/usr`` and its merged links, a few files of
``/etc``), the Python environment the worker runs (its prefixes and interpreter), the agent's
own code (of the folders on ``sys.path`` that are not installed libraries, and of its module's
package, the code only: a package's data files are not code), rayeval's package, the files its
options name and its program's install folder, and what the user names (``--sandbox-bind``).
The work root (writable) and the data cache (read-only) are there for the runner only: each
unit covers them again and keeps its own work folder and inputs. Trusted folders inside what is
allowed (an evals folder inside a bound one, a repository's git folder, the results root) are
covered. Everything else of the host is absent.

Standard library only: computed in the worker, once per unit runner.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)

#: Top-level system folders, shown as they are on the host (or as its merged-/usr links).
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: What of ``/etc`` programs need: users and groups, name resolution, the dynamic linker,
#: time zone, certificates, Debian's alternatives (``/usr/bin/awk`` leads there), system
#: Python's configuration, fonts and terminal descriptions. Never keys (``/etc/ssl/private``).
ETC_ENTRIES = (
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "resolv.conf", "gai.conf", "services",
    "protocols", "networks", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
    "pki/ca-trust", "crypto-policies", "alternatives", "os-release", "debian_version", "mime.types",
    "fonts", "terminfo", "gitconfig", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}",
)  # fmt: skip

#: What of ``/sys`` programs read to size their thread pools (numpy, Node.js).
SYS_ENTRIES = ("/sys/devices/system/cpu",)

#: Variables whose value names a certificate file or folder the agent's programs read.
CERTIFICATE_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")

#: Files and folders of a code folder that are code: modules, compiled modules and stubs, their
#: caches and the metadata of packages installed from source; in a package, its markers too.
#: Anything else (data, templates, reports, copies of evals) stays out unless bound by name.
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pyi")
METADATA_SUFFIXES = (".dist-info", ".egg-info")
PACKAGE_MARKERS = ("py.typed",)

#: Folders never shown whole, wherever they come from (a prefix of ``/``, the home folder):
#: they would bring the host back.
TOO_BROAD = ("/", "/home", "/root", "/tmp", "/var", "/var/tmp", "/dev/shm", "/run", "/mnt", "/media", "/srv", "/opt")

#: More names than this under one code folder (its packages' included), or folders deeper
#: than this in it: the rest is not looked at, with a warning (for the names).
MAX_CODE_ENTRIES = 20_000
MAX_CODE_DEPTH = 32

#: More paths of code than this in a view: the rest is left out, with a warning. Each is a
#: mount: bubblewrap takes 9,000 arguments (three a mount) and its start grows with their
#: square; every unit's mount namespace copies them.
MAX_CODE_PATHS = 1000

#: rayeval's own package, shown whole wherever it lies (its agents read the data it ships).
OWN_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FileSystemView(BaseModel):
    """The unit runner's file system, as bubblewrap builds it."""

    model_config = ConfigDict(frozen=True)

    #: host paths shown read-only at their own path
    read_only: tuple[str, ...]
    #: ``(target, link)``: merged-/usr links such as ``usr/bin`` at ``/bin``
    links: tuple[tuple[str, str], ...]
    #: trusted paths inside shown ones, covered by an empty folder (or file)
    covered: tuple[str, ...]

    def paths_of(self, real: str) -> list[str]:
        """Every path at which this view shows the host file at the real path ``real``: a
        shown path is its host path's content under the shown name, which a link on the way
        (a tools folder linked from elsewhere) makes another name than ``real``."""
        found = []
        for shown in self.read_only:
            source = os.path.realpath(shown)
            if inside(real, source):
                found.append(os.path.normpath(os.path.join(shown, os.path.relpath(real, source))))
        return [path for path in found if not any(inside(path, covered) for covered in self.covered)]


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.normpath(os.path.abspath(path))


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (by name)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _broad(path: str) -> bool:
    return path in TOO_BROAD or path == _absolute(Path.home())


def system_paths() -> tuple[list[str], list[tuple[str, str]]]:
    """The system folders and ``/etc`` files that exist here, and the merged-/usr links."""
    shown: list[str] = []
    links: list[tuple[str, str]] = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            links.append((os.readlink(folder), folder))
        elif os.path.isdir(folder):
            shown.append(folder)
    for name in ETC_ENTRIES:
        path = f"/etc/{name}"
        if os.path.exists(path):
            shown.append(path)
    shown += [path for path in SYS_ENTRIES if os.path.isdir(path)]
    return shown, links


def python_paths() -> list[str]:
    """The Python environment this process runs: its prefixes and its interpreter's folder
    (a virtual environment's ``python`` links to its base's)."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    if sys.executable:
        found += [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    kept = []
    for path in map(_absolute, found):
        if _broad(path):
            log.warning("sandbox: the Python prefix %s is too broad to show whole: left out", path)
        elif os.path.exists(path):
            kept.append(path)
    return kept


def _library_folder(path: str) -> bool:
    """A folder of installed packages (shown whole), not a folder of the user's own code."""
    return os.path.basename(path) in ("site-packages", "dist-packages") or os.path.isfile(path)


def code_content(folder: str, hidden: Iterable[str] = ()) -> list[str]:
    """The code in a folder of the user's own code: modules, byte-code caches, package
    metadata, and packages (folders with an ``__init__``) by their code only (see
    :class:`_CodeWalk`). Nothing at or under a ``hidden`` path is looked at."""
    return _CodeWalk(folder, hidden).folder(folder, package=False, depth=0)[0]


def package_code(folder: str, hidden: Iterable[str] = ()) -> list[str]:
    """The code of the package (or namespace package portion) ``folder``: itself when all it
    holds is code, else its code by name."""
    found, whole = _CodeWalk(folder, hidden).folder(folder, package=True, depth=0)
    return [folder] if whole else found


class _CodeWalk:
    """The code under one folder, by name, looking at no more than ``MAX_CODE_ENTRIES`` names.

    Inside a package, its modules, stubs, markers, caches and metadata are code, and so is
    the code of every subfolder an import can name (a package, or a namespace subpackage:
    any identifier); its other files never are. A folder all of whose names are code (links
    aside, whose target is shown at their path) is shown as one path: fewer mounts."""

    def __init__(self, root: str, hidden: Iterable[str]) -> None:
        self.root = root
        self.hidden = frozenset(map(_absolute, hidden))
        self.left = MAX_CODE_ENTRIES
        self.cut = False  # the bound was reached (and said so)

    def folder(self, folder: str, *, package: bool, depth: int) -> tuple[list[str], bool]:
        """What to show of ``folder`` (a package, or the top of a code folder), and whether
        that is all of it."""
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            return [], False
        complete = len(entries) <= self.left
        if not complete:
            if not self.cut:
                log.warning("sandbox: %s holds more than %d names: the rest is left out", self.root, MAX_CODE_ENTRIES)
            self.cut = True
            entries = entries[: self.left]
        self.left -= len(entries)
        shown: list[str] = []
        for entry in entries:
            found, whole = self._entry(entry, package, depth)
            shown += found
            complete = complete and whole
        return shown, complete

    def _entry(self, entry: os.DirEntry[str], package: bool, depth: int) -> tuple[list[str], bool]:
        """What to show of ``entry``, and whether its parent may be shown as one for it."""
        try:
            link = entry.is_symlink()
            if entry.path in self.hidden:
                return [], False
            if entry.is_dir():
                if entry.name == "__pycache__" or entry.name.endswith(METADATA_SUFFIXES):
                    return [entry.path], not link
                importable = entry.name.isidentifier() if package else _is_package(entry.path)
                if not importable or depth >= MAX_CODE_DEPTH or os.path.realpath(entry.path) in self.hidden:
                    return [], False
                found, whole = self.folder(entry.path, package=True, depth=depth + 1)
                return ([entry.path] if whole else found), whole and not link
            if entry.is_file() and (entry.name.endswith(CODE_SUFFIXES) or (package and entry.name in PACKAGE_MARKERS)):
                return [entry.path], not link
        except OSError:
            pass
        return [], False


def _is_package(folder: str) -> bool:
    try:
        return any(name.startswith("__init__.") and name.endswith(CODE_SUFFIXES) for name in os.listdir(folder))
    except OSError:
        return False


def sys_path_code(entries: Iterable[str], shown: list[str], hidden: Iterable[str] = ()) -> list[str]:
    """What the unit needs of the import path: installed-library folders and archives whole,
    the user's own code folders (the working folder, ``PYTHONPATH``, Ray's ``working_dir`` and
    ``py_modules``, editable installs) by their code only. Entries inside ``shown`` add nothing."""
    found: list[str] = []
    for entry in dict.fromkeys(_absolute(e or ".") for e in entries):
        if not os.path.exists(entry) or any(inside(entry, folder) for folder in shown):
            continue
        if _library_folder(entry) and not _broad(entry):
            found.append(entry)
        else:
            found += code_content(entry, hidden)
    return found


def module_location(module: str, hidden: Iterable[str] = ()) -> list[str]:
    """What to show of the top-level package or module of ``module``, found without importing
    it (a top-level spec runs no code of the module): an editable install's finder may put it
    outside ``sys.path``. A package in an installed-library folder whole, one of the user's own
    code by its code only."""
    top = module.partition(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        found: list[str] = []
        for folder in (_absolute(p) for p in spec.submodule_search_locations if os.path.isdir(p)):
            found += [folder] if _library_folder(os.path.dirname(folder)) else package_code(folder, hidden)
        return found
    if spec.origin and os.path.isfile(spec.origin):
        return [_absolute(spec.origin)]
    return []


def certificate_paths(environment: dict[str, str]) -> list[str]:
    return [environment[name] for name in CERTIFICATE_VARIABLES if environment.get(name)]


def file_system_view(
    *, sys_path: Iterable[str], modules: Iterable[str], bound: Iterable[str], trusted: Iterable[str]
) -> FileSystemView:
    """The view of a unit runner: system, Python, the code on ``sys_path``, the code of
    ``modules`` (a ``module:function`` agent's), rayeval's package, ``bound`` (the agent's
    files and install folders, ``--sandbox-bind``), with the ``trusted`` paths inside them
    covered (and left out of the code looked at)."""
    trusted = list(trusted)
    system, links = system_paths()
    shown = [*system, *python_paths(), OWN_PACKAGE]
    code = sys_path_code(sys_path, shown, trusted)
    for module in modules:
        code += module_location(module, trusted)
    shown += _bounded([path for path in dict.fromkeys(code) if not any(inside(path, s) for s in shown)])
    for path in certificate_paths(dict(os.environ)):
        if os.path.exists(path) and not any(inside(_absolute(path), s) for s in shown):
            shown.append(_absolute(path))
    for path in bound:
        if os.path.exists(path):
            shown.append(_absolute(path))
    shown = _outermost(shown)
    covered = sorted(
        {_absolute(p) for p in trusted if any(inside(_absolute(p), s) and _absolute(p) != s for s in shown)}
    )
    # a shown path that is itself trusted stays out (an agent's option naming the results root)
    trusted_set = {_absolute(p) for p in trusted}
    shown = [path for path in shown if path not in trusted_set]
    return FileSystemView(read_only=tuple(shown), links=tuple(links), covered=tuple(covered))


def _bounded(code: list[str]) -> list[str]:
    if len(code) > MAX_CODE_PATHS:
        log.warning(
            "sandbox: the code on the import path takes %d paths: only the first %d are shown (--sandbox-bind "
            "a package whole)", len(code), MAX_CODE_PATHS,
        )  # fmt: skip
    return code[:MAX_CODE_PATHS]


def _outermost(paths: Iterable[str]) -> list[str]:
    """``paths`` (absolute, normalized) without duplicates and without those inside another."""
    kept: list[str] = []
    seen: set[str] = set()
    for path in sorted(set(paths), key=lambda p: (p.count("/"), p)):
        if not any(folder in seen for folder in _ancestors(path)):
            kept.append(path)
            seen.add(path)
    return kept


def _ancestors(path: str) -> Iterable[str]:
    """``path`` and every folder above it."""
    while True:
        yield path
        if path in ("/", ""):
            return
        path = os.path.dirname(path)


def bwrap_mounts(view: FileSystemView, *, writable: str, read_only_extra: Iterable[str]) -> list[str]:
    """bubblewrap's arguments for ``view``, plus the ``writable`` work root and the
    ``read_only_extra`` folders (the data cache) that the runner needs and units cover.

    Mounts are made outer ones first, so a deeper one lies over a shallower one: a covered
    trusted folder over the shown folder holding it, and a shown folder inside a covered one
    (an environment inside Ray's session folder) over the cover."""
    operations: list[tuple[str, list[str]]] = [(path, ["--ro-bind", path, path]) for path in view.read_only]
    for path in view.covered:
        cover = ["--tmpfs", path, "--remount-ro", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
        operations.append((path, cover))
    operations += [(path, ["--ro-bind", path, path]) for path in read_only_extra]
    operations.append((writable, ["--bind", writable, writable]))
    arguments = ["--tmpfs", "/"]
    for target, link in view.links:
        arguments += ["--symlink", target, link]
    for _, mount in sorted(operations, key=lambda op: (op[0].count("/"), op[0])):
        arguments += mount
    arguments += ["--dev", "/dev", "--bind", "/proc", "/proc", "--dir", "/tmp", "--dir", "/dev/shm"]
    # nothing a unit writes outside its own folders reaches another: the root and /dev read-only
    return arguments + ["--remount-ro", "/dev", "--remount-ro", "/"]
