"""Exclusive runs: one driver at a time writes a run, through a lease on the run's folder.

``<root>/run_id=<id>/_lease.json`` names the driver holding the run (host, pid, a random token),
since when, when it last renewed the lease (its heartbeat) and when the lease expires unless it
is renewed again: ``RAYEVAL_LEASE_TTL`` seconds after the renewal (30 by default), renewed every
third of that by a daemon thread.  The leading ``_`` keeps dataset discovery away from it.

Taking, renewing and releasing are atomic:

* local root: the holder keeps an exclusive ``flock`` on ``_lease.lock`` beside the record for
  its whole life, and replaces the record by rename while holding it.  A driver that dies
  (SIGKILL included) drops the lock with its process, so the next ``--resume`` on the same
  machine takes the run over at once; a driver on another machine sharing the folder, where the
  lock may not be seen, waits for the record's expiry.  Two takers of one expired lease cannot
  both win: only one gets the lock.
* S3: the lease object is created with ``If-None-Match: *`` and replaced (renewal, take-over of
  an expired lease) with ``If-Match: <ETag read>``: of two drivers taking over one expired lease
  one PUT fails (412) and that driver is refused.  A lease whose process is gone from this
  machine (same boot, same pid namespace, no process with that pid and start time) is taken over
  without waiting for its expiry.

The holder's writes are fenced (:meth:`RunLease.check_writable`): nothing may be stored once
the lease is lost (another driver holds it now) or has lapsed (not renewed within 90% of the TTL
after its last renewal began, on this process's monotonic clock; the rest absorbs clock skew
between machines).  A lapsed lease that a later renewal finds unchanged (same token; on S3 the
same ETag) is valid again: nobody took the run over meanwhile.  A lost lease is never renewed;
:meth:`RunLease.stop_if_lost` stops the run's loop, which checks it on each pass.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import write_atomic
from .._messages import option, options
from ..errors import RayevalError
from .layout import LEASE_NAME, LOCK_NAME
from .manifest import utcnow
from .wal import remove_dir_if_empty, try_lock

if TYPE_CHECKING:
    from .store import ResultStore

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TTL_S",
    "LEASE_NAME",
    "LOCK_NAME",
    "TTL_ENV",
    "LeaseError",
    "LeaseHeld",
    "LeaseLapsed",
    "LeaseLost",
    "LeaseLostInterrupt",
    "LeaseRecord",
    "LocalLease",
    "RunLease",
    "S3Lease",
    "lease_ttl",
    "run_lease",
]

TTL_ENV = "RAYEVAL_LEASE_TTL"
DEFAULT_TTL_S = 30.0
#: share of the TTL after the start of its last renewal during which the holder may write
VALID_SHARE = 0.9
_PRECONDITION = ("PreconditionFailed", "412")
_MISSING = ("NoSuchKey", "404", "NotFound")


class LeaseError(RayevalError, OSError):
    """The run's lease cannot be taken or kept (an OSError: the run's root cannot be written).
    ``holder``: the other driver's record, when one holds the run and its record could be read."""

    def __init__(self, message: str, holder: LeaseRecord | None = None):
        super().__init__(message)
        self.holder = holder


class LeaseHeld(LeaseError):
    """Another driver holds the run: the message names it and says what to do."""


class LeaseLost(LeaseError):
    """Another driver holds the run now (it took over after this driver's lease expired):
    this driver must not write the run any more."""


class LeaseLapsed(LeaseError):
    """The lease was not renewed in time (storage unreachable, or the driver stalled): nothing
    is stored until a renewal succeeds."""


class LeaseLostInterrupt(KeyboardInterrupt):
    """Raised by the loop running a run when its lease is lost (see :meth:`RunLease.stop_if_lost`).
    A KeyboardInterrupt, so that no ``except Exception`` on the way swallows it."""


def lease_ttl(value: float | str | None = None) -> float:
    """The lease TTL in seconds: the argument, else ``$RAYEVAL_LEASE_TTL``, else 30."""
    raw = value if value is not None else (os.environ.get(TTL_ENV) or DEFAULT_TTL_S)
    try:
        ttl = float(raw)
    except (TypeError, ValueError):
        ttl = math.nan
    if not (ttl > 0 and math.isfinite(ttl)):
        raise LeaseError(f"{TTL_ENV} must be a number of seconds > 0, got {raw!r}")
    return ttl


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _when(moment: datetime) -> str:
    return f"{moment.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


# -- where a holder lives ---------------------------------------------------------------------
def _read_text(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _machine() -> str:
    """This machine: host name and, on Linux, the boot id (a reboot makes another machine)."""
    boot = _read_text("/proc/sys/kernel/random/boot_id")
    host = socket.gethostname()
    return f"{host}/{boot}" if boot else host


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, Linux), None if there is none."""
    stat = _read_text(f"/proc/{pid}/stat")
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class LeaseRecord:
    """The content of ``_lease.json``."""

    run_id: str
    token: str
    host: str
    pid: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    ttl_s: float
    #: host name and boot id: where ``pid`` names a process
    machine: str = ""
    #: pid namespace and start time of the holder (Linux): tell a dead holder from a live one
    pid_namespace: str = ""
    process_start: int | None = None

    def expired(self, now: datetime | None = None) -> bool:
        return (now or utcnow()) >= self.expires_at

    def gone_from_here(self) -> bool:
        """The holder ran on this machine, in this pid namespace, and its process is gone."""
        if not self.machine or self.machine != _machine() or self.process_start is None:
            return False
        if not self.pid_namespace or self.pid_namespace != _pid_namespace():
            return False
        return _process_start(self.pid) != self.process_start

    def describe(self, now: datetime | None = None, *, note: str = "") -> str:
        """``host h, pid 12{note}, since ...; last renewed ..., expires ... (in 25 s)``."""
        now = now or utcnow()
        left = (self.expires_at - now).total_seconds()
        expiry = (
            f"expires {_when(self.expires_at)} (in {left:.0f} s)"
            if left > 0
            else f"expired {_when(self.expires_at)} ({-left:.0f} s ago)"
        )
        return f"host {self.host}, pid {self.pid}{note}, since {_when(self.acquired_at)}; last renewed {_when(self.renewed_at)}, {expiry}"

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = asdict(self)
        for name in ("acquired_at", "renewed_at", "expires_at"):
            data[name] = data[name].isoformat()
        return json.dumps({"kind": "rayeval-run-lease", **data}, indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, modified: datetime | None, ttl_s: float) -> LeaseRecord:
        """The record; one that cannot be read counts as held by an unknown driver until
        ``ttl_s`` after the file's modification time."""
        try:
            value = json.loads(data)
            return cls(
                run_id=str(value["run_id"]),
                token=str(value["token"]),
                host=str(value["host"]),
                pid=int(value["pid"]),
                acquired_at=_aware(datetime.fromisoformat(value["acquired_at"])),
                renewed_at=_aware(datetime.fromisoformat(value["renewed_at"])),
                expires_at=_aware(datetime.fromisoformat(value["expires_at"])),
                ttl_s=float(value["ttl_s"]),
                machine=str(value.get("machine") or ""),
                pid_namespace=str(value.get("pid_namespace") or ""),
                process_start=None if value.get("process_start") is None else int(value["process_start"]),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            stamp = modified or utcnow()
            return cls(run_id="?", token="", host="unknown (unreadable lease record)", pid=0, acquired_at=stamp,
                       renewed_at=stamp, expires_at=stamp + timedelta(seconds=ttl_s), ttl_s=ttl_s)  # fmt: skip


class RunLease:
    """One driver's lease on one run: :meth:`take`, then :meth:`start_renewing`; :meth:`release`
    at the end (also as a context manager).  Backends: :class:`LocalLease`, :class:`S3Lease`."""

    def __init__(self, run_id: str, where: str, root: str, *, ttl_s: float | None = None):
        self.run_id = run_id
        #: the lease file's path or URI, and the results root, for messages
        self.where = where
        self.root = root
        self.ttl_s = lease_ttl(ttl_s)
        self.renew_every_s = self.ttl_s / 3
        self.token = secrets.token_hex(16)
        #: the record as this driver last stored it
        self.record: LeaseRecord | None = None
        #: set once another driver holds the run
        self.lost: LeaseLost | None = None
        self._valid_until = -math.inf  # monotonic
        self._released = False
        self._io = threading.Lock()  # one lease request at a time (renewal, release)
        self._mutex = threading.Lock()  # ``lost`` and whether a run loop watches for it
        self._watched = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where!r}, held={self.held})"

    def __enter__(self) -> RunLease:  # noqa: PYI034 - typing.Self needs Python 3.11; we support 3.10
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    # -- backend ----------------------------------------------------------------------------------
    @staticmethod
    def refusal(exc: Exception) -> str | None:
        """What in ``exc`` says the root may not be written (its permissions, a read-only
        file system), in a few words; None for any other fault."""
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc.strerror)
        return None

    def read(self) -> LeaseRecord | None:
        """The record stored now, whoever holds it (None: nobody)."""
        raise NotImplementedError

    def _acquire(self, record: LeaseRecord) -> None:
        """Store ``record`` if the lease is free, expired or its holder gone; else LeaseHeld."""
        raise NotImplementedError

    def _replace(self, record: LeaseRecord) -> None:
        """Store ``record`` if this driver's record is still the one stored; else LeaseLost.
        Any other exception: a passing fault, retried."""
        raise NotImplementedError

    def _delete(self) -> None:
        """Remove this driver's record (not another driver's) and let go of the lease."""
        raise NotImplementedError

    # -- the holder ---------------------------------------------------------------------------
    @property
    def held(self) -> bool:
        return self.record is not None and not self._released and self.lost is None

    def take(self) -> RunLease:
        """Take the lease, or raise :class:`LeaseHeld` naming its holder."""
        if self.record is not None:
            raise LeaseError(f"the lease of run {self.run_id!r} was already taken by this object")
        started = time.monotonic()
        now = utcnow()
        record = LeaseRecord(
            run_id=self.run_id,
            token=self.token,
            host=socket.gethostname(),
            pid=os.getpid(),
            acquired_at=now,
            renewed_at=now,
            expires_at=now + timedelta(seconds=self.ttl_s),
            ttl_s=self.ttl_s,
            machine=_machine(),
            pid_namespace=_pid_namespace(),
            process_start=_process_start(os.getpid()),
        )
        try:
            self._acquire(record)
        except LeaseError:
            raise
        except Exception as exc:
            refused = self.refusal(exc)
            if refused is not None:  # the first write of a run: the root is not this user's to write
                raise LeaseError(
                    f"results root {self.root} cannot be written ({refused}): "
                    "give --output a folder (or bucket) this user may write to"
                ) from exc
            raise LeaseError(
                f"results root {self.root}: cannot take the lease of run {self.run_id!r} ({self.where}): {exc}"
            ) from exc
        self.record = record
        self._valid_until = started + VALID_SHARE * self.ttl_s
        return self

    def renew(self) -> None:
        """Store a new heartbeat and expiry.  :class:`LeaseLost` if another driver holds the run;
        any other exception is a fault to retry."""
        with self._io:
            if self.lost is not None:
                raise self._lost_again()
            if self.record is None or self._released:
                raise LeaseError(f"the lease of run {self.run_id!r} is not held")
            started = time.monotonic()
            now = utcnow()
            record = replace(self.record, renewed_at=now, expires_at=now + timedelta(seconds=self.ttl_s))
            try:
                self._replace(record)
            except LeaseLost as exc:
                self._lose(exc)
                raise
            self.record = record
            self._valid_until = started + VALID_SHARE * self.ttl_s

    def check_writable(self) -> None:
        """Raise unless this driver may write the run now: :class:`LeaseLost`, or
        :class:`LeaseLapsed` while the lease waits for a renewal."""
        if self.lost is not None:
            raise self._lost_again()
        if self.record is None or self._released:
            raise LeaseError(f"this driver does not hold the lease of run {self.run_id!r}")
        if time.monotonic() > self._valid_until:
            raise LeaseLapsed(
                f"run {self.run_id!r}: this driver's lease ({self.where}) was last renewed at "
                f"{_when(self.record.renewed_at)} and not since (storage unreachable, or the driver stalled); "
                "nothing is stored until it is renewed"
            )

    def _lost_again(self) -> LeaseLost:
        """What a write refused after the loss says (short: the writer's logs repeat it)."""
        assert self.lost is not None
        holder = self.lost.holder
        to = f" to host {holder.host}, pid {holder.pid}" if holder is not None else ""
        return LeaseLost(f"run {self.run_id!r}: this driver lost its lease{to}; it stores nothing more", holder)

    def start_renewing(self) -> RunLease:
        """Renew from a daemon thread every third of the TTL (sooner after a failure) until
        :meth:`release`, or until the lease is lost."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._renew_loop, name=f"rayeval-lease-{self.run_id}", daemon=True)
            self._thread.start()
        return self

    def _renew_loop(self) -> None:
        wait = self.renew_every_s
        failing = False
        while not self._stop.wait(wait):
            try:
                self.renew()
            except LeaseLost:
                return
            except Exception as exc:  # noqa: BLE001 - storage unreachable: retried until it is back
                if self._released:
                    return
                if not failing:
                    assert self.record is not None
                    log.warning(
                        "run %s: cannot renew the lease %s (%s); retrying. Unless renewed, it expires at %s and "
                        "nothing more is stored until it is", self.run_id, self.where, exc, _when(self.record.expires_at),
                    )  # fmt: skip
                failing = True
                wait = min(self.renew_every_s, max(0.2, self.ttl_s / 20))
                continue
            if failing:
                log.warning("run %s: lease %s renewed again", self.run_id, self.where)
            failing = False
            wait = self.renew_every_s

    def _lose(self, exc: LeaseLost) -> None:
        with self._mutex:
            self.lost = exc
            if self._watched:
                return  # the run loop stops at its next check, and says why
        log.error("%s", exc)

    @contextmanager
    def interrupts(self) -> Iterator[None]:
        """While inside, the thread's loop calls :meth:`stop_if_lost` on each pass: once the lease
        is lost the run stops instead of going on as a second writer."""
        with self._mutex:
            self.stop_if_lost()
            self._watched = True
        try:
            yield
        finally:
            with self._mutex:
                self._watched = False

    def stop_if_lost(self) -> None:
        """Raise :class:`LeaseLostInterrupt` if another driver holds the run now."""
        if self.lost is not None:
            raise LeaseLostInterrupt(str(self.lost))

    def release(self) -> None:
        """Stop renewing and give the lease up (unless another driver holds it now): the next
        driver takes the run at once.  Idempotent; errors are logged (the lease then expires)."""
        self._stop.set()
        with self._io:
            if self._released:
                return
            self._released = True
            if self.record is None:
                return
            try:
                self._delete()
            except Exception as exc:  # noqa: BLE001 - it expires by itself
                log.warning("run %s: cannot release the lease %s (%s); it expires at %s",
                            self.run_id, self.where, exc, _when(self.record.expires_at))  # fmt: skip

    # -- messages -----------------------------------------------------------------------------
    def _held(self, holder: LeaseRecord | None, *, locked: bool = False) -> LeaseHeld:
        """``locked``: the holder's process holds the run's lock (a local root), so it is alive."""
        run = f"run {self.run_id!r} under {self.root}"
        resume = f"the same run with {options(('--resume', True), ('--run-id', self.run_id))} finishes it"
        if holder is None:
            return LeaseHeld(
                f"{run} is being taken by another driver right now ({self.where}). "
                f"Two drivers would run every unit twice: let that one run; once it has finished or stopped, {resume}."
            )
        note = " (alive on this machine)" if locked and holder.machine == _machine() else ""
        if locked and holder.expired():
            advice = (f"That driver no longer renews its lease but its process still holds the run's lock (stopped "
                      f"or hung?): end it (pid {holder.pid} on {holder.host}), then {resume}.")  # fmt: skip
        else:
            advice = (
                f"Two drivers would run every unit twice: wait for that driver to finish, or stop it; then {resume}."
            )
            if not locked:
                advice += (
                    f" If that driver died, {option('--resume', True)} takes the run over once its lease has expired."
                )
        return LeaseHeld(
            f"{run} is held by another driver: {holder.describe(note=note)}. {advice} Lease: {self.where}", holder
        )

    def _taking_over(self, previous: LeaseRecord) -> None:
        """Say that this driver takes over a lease whose holder let it expire or is gone."""
        why = "expired" if previous.expired() else "its driver is gone from this machine"
        log.warning("run %s: taking over the lease of %s (%s)", self.run_id, previous.describe(), why)

    def _lost(self, current: LeaseRecord | None, why: str) -> LeaseLost:
        assert self.record is not None
        holder = f"; it is held now by {current.describe()}" if current is not None else ""
        return LeaseLost(
            f"run {self.run_id!r}: this driver lost its lease ({self.where}): {why}{holder}. This driver's lease was "
            f"last renewed at {_when(self.record.renewed_at)} (it stalled, or could not reach the storage). It stops "
            "and stores nothing more; rows it had not stored stay in its write-ahead log. The run belongs to the "
            f"other driver now: let it finish, or {option('--resume', True)} once it has stopped.",
            current,
        )


class LocalLease(RunLease):
    """The lease of a run under a local (or mounted) results root."""

    def __init__(self, run_dir: str | Path, run_id: str, *, root: str | None = None, ttl_s: float | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LEASE_NAME
        self.lock_path = self.run_dir / LOCK_NAME
        super().__init__(run_id, str(self.path), root or str(self.run_dir.parent), ttl_s=ttl_s)
        self._fd: int | None = None

    def read(self) -> LeaseRecord | None:
        try:
            with open(self.path, "rb") as handle:  # its time and content from the one file opened
                modified = datetime.fromtimestamp(os.fstat(handle.fileno()).st_mtime, timezone.utc)
                data = handle.read()
        except FileNotFoundError:
            return None
        return LeaseRecord.from_bytes(data, modified=modified, ttl_s=self.ttl_s)

    def _write(self, record: LeaseRecord) -> None:
        write_atomic(self.path, record.to_bytes(), durable=True)

    def _lock(self) -> int | None:
        """An fd holding the flock of the lock file now at ``lock_path``; None if held elsewhere."""
        for _ in range(100):
            self.run_dir.mkdir(parents=True, exist_ok=True)
            try:
                fd = try_lock(self.lock_path)
            except FileNotFoundError:  # a releasing holder removed the empty folder meanwhile
                continue
            if fd is None:
                return None
            if self._at_lock_path(fd):
                return fd
            os.close(fd)  # a releasing holder unlinked this one: lock the file at the path now
        raise LeaseError(f"cannot lock {self.lock_path}: it keeps being replaced")

    def _at_lock_path(self, fd: int) -> bool:
        """Whether ``fd`` is the lock file now at ``lock_path`` (not one a releasing holder unlinked)."""
        try:
            return os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
        except FileNotFoundError:
            return False

    def _settled_holder(self) -> LeaseRecord | None:
        """The holder's record; a driver that has just taken the lock may not have written it yet."""
        deadline = time.monotonic() + 1.0
        while True:
            current = self.read()
            if (current is not None and not current.expired()) or time.monotonic() > deadline:
                return current
            time.sleep(0.05)

    def _acquire(self, record: LeaseRecord) -> None:
        fd = self._lock()
        if fd is None:
            raise self._held(self._settled_holder(), locked=True)
        try:
            current = self.read()
            if current is not None and not current.expired() and current.machine != record.machine:
                raise self._held(current)  # a driver on another machine, whose lock we may not see
            if current is not None:
                self._taking_over(current)
            self._write(record)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _replace(self, record: LeaseRecord) -> None:
        current = self.read()
        if current is None or current.token != self.token:
            why = "its lease file was removed" if current is None else "another driver took the run over"
            raise self._lost(current, why)
        self._write(record)

    def _delete(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            current = self.read()
            if current is not None and current.token == self.token:
                self.path.unlink(missing_ok=True)
                if self._at_lock_path(fd):  # a driver waiting on it notices it is unlinked, and locks a new one
                    self.lock_path.unlink(missing_ok=True)
                remove_dir_if_empty(self.run_dir)  # a run that stopped before writing anything leaves none
        finally:
            os.close(fd)


class S3Lease(RunLease):
    """The lease of a run under an ``s3://`` results root: one object, written conditionally."""

    def __init__(self, bucket: str, key: str, run_id: str, *, root: str | None = None, client: Any = None,
                 s3_endpoint_url: str | None = None, ttl_s: float | None = None):  # fmt: skip
        super().__init__(run_id, f"s3://{bucket}/{key}", root or f"s3://{bucket}", ttl_s=ttl_s)
        self.bucket = bucket
        self.key = key
        if client is None:
            from ..filesystem import s3_client

            client = s3_client(s3_endpoint_url)
        self.client = client
        self.etag: str | None = None

    @staticmethod
    def _code(exc: Exception) -> str:
        from botocore.exceptions import ClientError

        if not isinstance(exc, ClientError):
            return ""
        code = exc.response.get("Error", {}).get("Code")
        return str(code or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))

    @classmethod
    def refusal(cls, exc: Exception) -> str | None:
        code = cls._code(exc)
        if code in ("AccessDenied", "AllAccessDisabled", "403", "NoSuchBucket"):
            return str(exc)
        return None

    def _get(self) -> tuple[LeaseRecord | None, str | None]:
        from botocore.exceptions import ClientError

        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except ClientError as exc:
            if self._code(exc) in _MISSING:
                return None, None
            raise
        data = obj["Body"].read()
        return LeaseRecord.from_bytes(data, modified=obj.get("LastModified"), ttl_s=self.ttl_s), obj["ETag"]

    def read(self) -> LeaseRecord | None:
        return self._get()[0]

    def _put(self, record: LeaseRecord, **condition: str) -> str:
        response = self.client.put_object(
            Bucket=self.bucket, Key=self.key, Body=record.to_bytes(), ContentType="application/json", **condition
        )
        return response["ETag"]

    def _acquire(self, record: LeaseRecord) -> None:
        from botocore.exceptions import ClientError

        for _ in range(5):
            current, etag = self._get()
            if current is not None and not current.expired() and not current.gone_from_here():
                raise self._held(current)
            try:
                if current is None:
                    self.etag = self._put(record, IfNoneMatch="*")
                else:
                    assert etag is not None
                    self.etag = self._put(record, IfMatch=etag)
            except ClientError as exc:
                # 412: another driver wrote the lease since we read it; 404: it was released;
                # 409: a concurrent conditional write. Look again: refused if theirs is live.
                if self._code(exc) in (*_PRECONDITION, *_MISSING, "ConditionalRequestConflict", "409"):
                    continue
                raise
            if current is not None:
                self._taking_over(current)
            return
        raise self._held(self.read())

    def _replace(self, record: LeaseRecord) -> None:
        from botocore.exceptions import ClientError

        assert self.etag is not None
        try:
            self.etag = self._put(record, IfMatch=self.etag)
        except ClientError as exc:
            code = self._code(exc)
            if code not in (*_PRECONDITION, *_MISSING):
                raise  # 409 (a concurrent conditional write) included: the next attempt tells
            try:
                current = self.read()
            except Exception:  # noqa: BLE001 - only for the message
                current = None
            raise self._lost(
                current, "its lease object was removed" if code in _MISSING else "another driver took the run over"
            ) from None

    def _delete(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
        except ClientError as exc:
            code = self._code(exc)
            if code in (*_PRECONDITION, *_MISSING):
                return  # not ours any more
            # a store without conditional deletes: delete it if it is still ours
            current, _ = self._get()
            if current is None or current.token != self.token:
                return
            self.client.delete_object(Bucket=self.bucket, Key=self.key)


def run_lease(store: ResultStore, run_id: str, *, ttl_s: float | None = None) -> RunLease:
    """The lease of ``run_id`` under ``store``'s root (not taken yet: call :meth:`RunLease.take`)."""
    if store.is_s3:
        bucket, _, key = store.layout.lease(run_id).partition("/")
        return S3Lease(
            bucket,
            key,
            run_id,
            root=store.root,
            s3_endpoint_url=store.s3_endpoint_url,
            ttl_s=ttl_s,
        )
    return LocalLease(store.run_path(run_id), run_id, root=store.root, ttl_s=ttl_s)


def driver_gone(store: ResultStore, run_id: str) -> bool:
    """Whether no driver holds ``run_id`` any longer: its lease is released, expired, or held by
    a process gone from this machine. A run whose manifest still says ``running`` then stopped
    without saying so (killed, or its disk full before the manifest could be marked)."""
    record = run_lease(store, run_id).read()
    return record is None or record.expired() or record.gone_from_here()
