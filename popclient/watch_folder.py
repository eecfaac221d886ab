"""Watch folders: fire a trigger once for each file that appears in a directory and stops
growing (``pop watch --dir``; popclient/README.md, "Watch folders").

A file is *settled* once this process has seen its size and mtime unchanged for
``settle_seconds``; a file still being written keeps moving its clock forward. A settled file
fires the trigger with ``{path, name, relative_path, size, mtime}``, oldest first, one at a
time. What fired (or was refused) is kept in a state file, keyed by the file's version
(relative path, size, mtime_ns), so a restart never fires a file twice and a file replaced by
another version fires again. The state file is written at most every ``STATE_SAVE_SECONDS``
(by the pass that finds it due), and on exit, not after every file (a whole-file rewrite per
file grows with the square of the files). Each firing's ``Idempotency-Key`` is derived from
the same version, so a crash between the server's answer and the state-file write (up to
``STATE_SAVE_SECONDS`` of firings) submits nothing new when the firings are repeated: the
server answers ``duplicate``.

A file name that is not valid UTF-8 fires too: its key is derived from the name's bytes, and
the event carries the name with each undecodable byte written ``\\xNN``. A file that cannot be
fired for any other reason than the network or the filesystem (a bug, an event the client
cannot encode) is recorded as refused with the reason, and the others go on.

Change detection: ``watchfiles`` (inotify and friends) wakes the loop early; a full scan runs
at least every ``settle_seconds`` anyway, which is all there is with ``poll=True``, without
watchfiles, or on a filesystem that sends no events (NFS, SMB).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import random
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

__all__ = [
    "DEFAULT_STATE_NAME",
    "FIRED",
    "REFUSED",
    "FileVersion",
    "FolderWatcher",
    "StateFileError",
    "WatchState",
    "file_event",
    "firing_key",
    "safe_text",
]

log = logging.getLogger("popclient.watch_folder")

DEFAULT_STATE_NAME = ".pop-watch-state.json"
STATE_VERSION = 1
FIRED = "fired"
REFUSED = "refused"
# Besides every 5xx: answers that say "later", not "never".
RETRYABLE_STATUSES = frozenset({408, 425, 429})
RETRY_FIRST_SECONDS = 1.0
RETRY_CAP_SECONDS = 60.0
# A scan finds nothing new sooner than this, however small the settle time.
SHORTEST_WAIT_SECONDS = 0.05
# The state file is written at most this often (and on exit): what a crash loses of it is
# fired again with the same Idempotency-Key, which the server answers as a duplicate.
STATE_SAVE_SECONDS = 5.0

# ``fire(event, idempotency_key) -> (HTTP status, JSON answer)``; raises httpx.HTTPError (or
# OSError) when no answer came back.
FireFunction = Callable[[dict[str, Any], str], tuple[int, dict[str, Any]]]
# ``on_outcome(version, outcome, http_status, answer)`` after each answered firing.
OutcomeListener = Callable[["FileVersion", str, int, dict[str, Any]], None]


class StateFileError(Exception):
    """The state file exists but cannot be read: starting afresh would fire everything again."""


@dataclass(frozen=True)
class FileVersion:
    """One version of a file under the watched directory: a replacement of another size or
    mtime is another version."""

    relative_path: str
    size: int
    mtime_ns: int


def _raw(text: str) -> bytes:
    """The bytes a file name (or any text) stands for: the filesystem's own for a name that
    is not UTF-8 (Python keeps its undecodable bytes as lone surrogates)."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate no file name decodes to
        return text.encode("utf-8", "surrogatepass")


def safe_text(text: str) -> str:
    """``text`` as valid Unicode: each byte of a name that is not UTF-8 written ``\\xNN``."""
    return _raw(text).decode("utf-8", "backslashreplace")


def firing_key(trigger_id: str, version: FileVersion) -> str:
    """The Idempotency-Key of firing ``trigger_id`` for ``version``: the same on every try.
    Derived from the name's bytes, so a name that is not UTF-8 has one too."""
    identity = f"{trigger_id}\0{version.relative_path}\0{version.size}\0{version.mtime_ns}"
    return "pop-watch-" + hashlib.sha256(_raw(identity)).hexdigest()


def file_event(directory: Path, version: FileVersion) -> dict[str, Any]:
    """The event a settled file fires: where it is, how big, when it last changed (UTC).
    Names are valid Unicode (:func:`safe_text`)."""
    path = directory / version.relative_path
    changed = datetime.fromtimestamp(version.mtime_ns / 1e9, UTC)
    return {
        "path": safe_text(str(path)),
        "name": safe_text(path.name),
        "relative_path": safe_text(version.relative_path),
        "size": version.size,
        "mtime": changed.isoformat(),
    }


def retry_delay(failures: int) -> float:
    """Seconds before firing again after `failures` (1, 2, …) unanswered or 5xx tries:
    1 s doubling, at most a minute, jittered ±20 %."""
    base = min(RETRY_CAP_SECONDS, RETRY_FIRST_SECONDS * 2 ** min(failures - 1, 10))
    return base * random.uniform(0.8, 1.2)


class WatchState:
    """The state file: the versions fired (or refused) per relative path, as JSON, replaced
    atomically (a temporary file, then ``os.replace``) by :meth:`save`; changes only mark it
    ``dirty`` (the watcher decides when to write)."""

    def __init__(self, path: Path, trigger_id: str) -> None:
        self.path = path
        self.trigger_id = trigger_id
        self.files: dict[str, dict[str, Any]] = {}
        self.dirty = False

    @classmethod
    def load(cls, path: Path, trigger_id: str) -> WatchState:
        state = cls(path, trigger_id)
        try:
            document = json.loads(path.read_text())
        except FileNotFoundError:
            return state
        except (OSError, ValueError) as exc:
            raise StateFileError(
                f"cannot read the state file {path}: {exc}; fix or remove it (removed, every "
                "file there fires again)"
            ) from exc
        files = document.get("files") if isinstance(document, dict) else None
        if not isinstance(files, dict):
            raise StateFileError(f"the state file {path} has no 'files' object")
        state.files = {str(name): entry for name, entry in files.items() if isinstance(entry, dict)}
        return state

    def outcome(self, version: FileVersion) -> str | None:
        """``fired`` or ``refused`` when this very version was sent to this trigger."""
        entry = self.files.get(version.relative_path)
        if (
            entry is None
            or entry.get("trigger") != self.trigger_id
            or entry.get("size") != version.size
            or entry.get("mtime_ns") != version.mtime_ns
        ):
            return None
        return entry.get("status")

    def record(
        self, version: FileVersion, status: str, *, http_status: int, answer: dict[str, Any]
    ) -> None:
        self.files[version.relative_path] = {
            "trigger": self.trigger_id,
            "size": version.size,
            "mtime_ns": version.mtime_ns,
            "status": status,
            "http_status": http_status,
            "answer": answer,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self.dirty = True

    def forget(self, relative_paths: Iterable[str]) -> None:
        gone = [name for name in relative_paths if name in self.files]
        for name in gone:
            del self.files[name]
        if gone:
            self.dirty = True

    def forget_refused(self) -> int:
        refused = [name for name, entry in self.files.items() if entry.get("status") == REFUSED]
        self.forget(refused)
        return len(refused)

    def save(self) -> None:
        document = {"version": STATE_VERSION, "files": self.files}
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with open(temporary, "w") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        self.dirty = False


@dataclass
class _Pending:
    version: FileVersion
    unchanged_since: float  # the clock when this version was first seen


class FolderWatcher:
    """Fires ``fire`` once per settled file of ``directory``; :meth:`run` until :meth:`stop`,
    or :meth:`step` for one pass (tests drive it with their own clock)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        trigger_id: str,
        fire: FireFunction,
        *,
        settle_seconds: float = 10.0,
        patterns: Sequence[str] = ("*",),
        recursive: bool = False,
        state_file: str | os.PathLike[str] | None = None,
        move_to: str | os.PathLike[str] | None = None,
        mark_suffix: str | None = None,
        retry_refused: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_outcome: OutcomeListener | None = None,
    ) -> None:
        if settle_seconds <= 0:
            raise ValueError("settle_seconds must be more than 0")
        if move_to is not None and mark_suffix:
            raise ValueError("move_to and mark_suffix exclude each other")
        self.directory = Path(os.path.abspath(directory))
        self.trigger_id = trigger_id
        self.settle_seconds = settle_seconds
        self.patterns = tuple(patterns) or ("*",)
        self.recursive = recursive
        self.move_to = Path(os.path.abspath(move_to)) if move_to is not None else None
        self.mark_suffix = mark_suffix or None
        self.state_path = Path(os.path.abspath(state_file or self.directory / DEFAULT_STATE_NAME))
        if not os.access(self.state_path.parent, os.W_OK):
            raise StateFileError(f"cannot write the state file in {self.state_path.parent}")
        self.state = WatchState.load(self.state_path, trigger_id)
        if retry_refused and (count := self.state.forget_refused()):
            log.info("%d refused file(s) will be fired again", count)
        self._fire = fire
        self._clock = clock
        self._on_outcome = on_outcome
        self._pending: dict[str, _Pending] = {}
        self._failures = 0
        self._retry_at = float("-inf")
        self._finish_tried: set[FileVersion] = set()
        self._saved_at = float("-inf")
        self._stopping = threading.Event()
        self._wake = threading.Event()

    # -- one pass ---------------------------------------------------------------------

    def step(self) -> float:
        """Scan, start or reset the settle clock of each file, fire what has settled; the
        seconds until the next pass is due."""
        now = self._clock()
        try:
            found = self.scan()
        except OSError as exc:
            log.warning("cannot scan %s: %s; trying again", self.directory, exc)
            return self.settle_seconds
        self._forget_vanished(found)
        for name, version in found.items():
            outcome = self.state.outcome(version)
            if outcome is not None:
                self._pending.pop(name, None)
                if outcome == FIRED and version not in self._finish_tried:
                    self._finish_tried.add(version)
                    self._finish(version)  # moving it was cut short (a crash, a restart)
                continue
            pending = self._pending.get(name)
            if pending is None or pending.version != version:
                self._pending[name] = _Pending(version, now)
        for name in [name for name in self._pending if name not in found]:
            del self._pending[name]
        if now >= self._retry_at:
            settled = [
                pending
                for pending in self._pending.values()
                if now - pending.unchanged_since >= self.settle_seconds
            ]
            settled.sort(key=lambda p: (p.version.mtime_ns, p.version.relative_path))
            for pending in settled:
                if self._stopping.is_set() or not self._fire_settled(pending.version):
                    break
                self.save_state(when_due=True)
        self.save_state(when_due=True)
        return self._seconds_to_next_pass()

    def save_state(self, *, when_due: bool = False) -> None:
        """Write the state file if it changed; ``when_due``: only when the last write is
        ``STATE_SAVE_SECONDS`` old (one write per pass at most, however many files fired)."""
        now = self._clock()
        if not self.state.dirty or (when_due and now - self._saved_at < STATE_SAVE_SECONDS):
            return
        self.state.save()
        self._saved_at = now

    def scan(self) -> dict[str, FileVersion]:
        """Every file that may fire, by relative path (``/``-separated). Skipped: names
        starting with a dot (the state file, the temporary files of rsync and most copy
        tools), names not matching the patterns, marked files and ``move_to``."""
        found: dict[str, FileVersion] = {}
        folders = [self.directory]
        while folders:
            folder = folders.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                if folder == self.directory:
                    raise
                log.debug("skipping %s: %s", folder, exc)  # removed while scanning, unreadable
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                path = Path(entry.path)
                if entry.is_dir(follow_symlinks=False):
                    if self.recursive and path != self.move_to:
                        folders.append(path)
                    continue
                relative = path.relative_to(self.directory).as_posix()
                if path == self.state_path or not self._wanted(entry.name, relative):
                    continue
                try:
                    info = entry.stat()
                except FileNotFoundError:
                    continue  # gone between the listing and the stat
                if stat.S_ISREG(info.st_mode):
                    found[relative] = FileVersion(relative, info.st_size, info.st_mtime_ns)
        return found

    def _wanted(self, name: str, relative: str) -> bool:
        if self.mark_suffix and name.endswith(self.mark_suffix):
            return False
        return any(
            fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(relative, pattern)
            for pattern in self.patterns
        )

    def _forget_vanished(self, found: dict[str, FileVersion]) -> None:
        # An empty scan may be a share that came unmounted: keeping the records then means
        # its files do not all fire again once it is back.
        if found:
            self.state.forget([name for name in self.state.files if name not in found])

    def _seconds_to_next_pass(self) -> float:
        due = [self.settle_seconds]
        now = self._clock()
        if self.state.dirty:  # a pass then writes what the last one could not yet
            due.append(self._saved_at + STATE_SAVE_SECONDS - now)
        for pending in self._pending.values():
            settles_at = pending.unchanged_since + self.settle_seconds
            due.append(max(settles_at, self._retry_at) - now)
        return max(SHORTEST_WAIT_SECONDS, min(due))

    # -- firing ---------------------------------------------------------------------

    def _current_version(self, relative: str) -> FileVersion | None:
        try:
            info = os.stat(self.directory / relative)
        except FileNotFoundError:
            return None
        return FileVersion(relative, info.st_size, info.st_mtime_ns)

    def _fire_settled(self, version: FileVersion) -> bool:
        """Fire one settled file; False when the server did not answer (or answered 5xx),
        so the rest wait for the retry."""
        name = version.relative_path
        current = self._current_version(name)
        if current != version:  # changed or gone since the scan: settle it again
            self._pending.pop(name, None)
            return True
        try:
            status, answer = self._fire(file_event(self.directory, version), self._key(version))
        except (httpx.HTTPError, OSError) as exc:
            self._back_off(safe_text(name), f"{exc.__class__.__name__}: {exc}")
            return False
        except Exception as exc:  # this file only (a bug, an event it cannot encode): go on
            log.exception("%s: cannot be fired", safe_text(name))
            status, answer = 0, {"error": safe_text(f"{exc.__class__.__name__}: {exc}")}
        if 200 <= status < 300:
            self._failures = 0
            self.state.record(version, FIRED, http_status=status, answer=answer)
            self._pending.pop(name, None)
            log.info(
                "%s: %s (agenda %s, firing %s)",
                safe_text(name),
                answer.get("status", status),
                answer.get("agenda"),
                answer.get("firing"),
            )
            self._notify(version, FIRED, status, answer)
            self._finish_tried.add(version)
            self._finish(version)
            return True
        if status >= 500 or status in RETRYABLE_STATUSES:
            self._back_off(safe_text(name), f"HTTP {status}: {json.dumps(answer)[:200]}")
            return False
        self._failures = 0
        self.state.record(version, REFUSED, http_status=status, answer=answer)
        self._pending.pop(name, None)
        log.error(
            "%s: refused (HTTP %s): %s; recorded as refused in %s and not retried: change "
            "the file, or restart with --retry-refused, to fire it again",
            safe_text(name),
            status,
            json.dumps(answer)[:500],
            self.state_path,
        )
        self._notify(version, REFUSED, status, answer)
        return True

    def _key(self, version: FileVersion) -> str:
        return firing_key(self.trigger_id, version)

    def _back_off(self, name: str, reason: str) -> None:
        self._failures += 1
        delay = retry_delay(self._failures)
        self._retry_at = self._clock() + delay
        log.warning("%s: not fired (%s); trying again in %.1fs", name, reason, delay)

    def _notify(self, version: FileVersion, outcome: str, status: int, answer: dict) -> None:
        if self._on_outcome is None:
            return
        try:
            self._on_outcome(version, outcome, status, answer)
        except Exception:  # the listener's failure is not the file's: the watch goes on
            log.exception("%s: reporting the outcome failed", safe_text(version.relative_path))

    def _finish(self, version: FileVersion) -> None:
        """Move or rename a fired file when asked; its record goes with it."""
        if self.move_to is None and self.mark_suffix is None:
            return
        source = self.directory / version.relative_path
        if self.move_to is not None:
            target = self.move_to / version.relative_path
        else:
            target = source.with_name(source.name + (self.mark_suffix or ""))
        target = _unused_name(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
        except OSError as exc:
            log.error("%s: fired, but cannot move it to %s: %s", version.relative_path, target, exc)
            return
        self.state.forget([version.relative_path])
        log.info("%s: moved to %s", version.relative_path, target)

    # -- running ----------------------------------------------------------------------

    def run(self, *, poll: bool = False) -> None:
        """Pass after pass until :meth:`stop`: woken by file events (unless ``poll``), and
        at the latest when the next file settles or the settle time has passed. Once."""
        events = None if poll else self._start_event_thread()
        log.info(
            "watching %s for %s (settle %gs, %s); state in %s",
            self.directory,
            ", ".join(self.patterns),
            self.settle_seconds,
            "file events and scans" if events else "scans only",
            self.state_path,
        )
        try:
            while not self._stopping.is_set():
                timeout = self.step()
                self._wake.wait(timeout)
                self._wake.clear()
        finally:
            self._stopping.set()
            self.save_state()
            if events is not None:
                events.join(timeout=5)

    def stop(self) -> None:
        """End :meth:`run` after the firing under way (from a signal handler or a thread)."""
        self._stopping.set()
        self._wake.set()

    def _start_event_thread(self) -> threading.Thread | None:
        try:
            # Imported here: an optional dependency, and `import popclient.cli` stays
            # httpx-only (tests/popclient/test_package.py).
            import watchfiles
        except ImportError:
            log.warning("watchfiles is not installed: scanning every %gs", self.settle_seconds)
            return None

        def wake_on_changes() -> None:
            try:
                for _changes in watchfiles.watch(
                    self.directory,
                    watch_filter=_not_hidden,
                    debounce=200,
                    stop_event=self._stopping,
                    recursive=self.recursive,
                    raise_interrupt=False,
                ):
                    self._wake.set()
            except Exception as exc:  # the thread's outermost loop: scans go on without it
                log.warning("no file events (%s): scanning every %gs", exc, self.settle_seconds)

        thread = threading.Thread(target=wake_on_changes, name="pop-watch-events", daemon=True)
        thread.start()
        return thread


def _not_hidden(change: Any, path: str) -> bool:
    return not os.path.basename(path).startswith(".")


def _unused_name(target: Path) -> Path:
    """``target``, or ``name-1.ext``, ``name-2.ext``… when a file of that name is there."""
    if not target.exists():
        return target
    suffix = "".join(target.suffixes[-1:])
    stem = target.name[: len(target.name) - len(suffix)]
    for number in range(1, 10_000):
        candidate = target.with_name(f"{stem}-{number}{suffix}")
        if not candidate.exists():
            return candidate
    return target.with_name(f"{stem}-{time.time_ns()}{suffix}")
