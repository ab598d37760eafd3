"""Run bundles: an effect executor, as the Rust host's (host/src/bundle/mod.rs).

The policy module composes every byte of a bundle (WIT ``bundle-create``, ``bundle-change``,
``bundle-end``, ``recorded.record-line``) from facts the host passes in: the run id, Unix-millisecond
times, the working directory's git state, the host's name and version, the hashes of the files written.
This module only carries the returned effects out, in order, under the runs root, and stops at the first
that fails:

- ``create-dir``: the run's directory; an existing one is an error;
- ``write``: a temporary file in the same directory, written and fsync'd, renamed over the name, then the
  directory fsync'd;
- ``append``: one whole record in one write, fdatasync'd; a write that fails has the file truncated back
  to its last whole record;
- ``sign``: the receipt's DSSE signature, which needs a receipt key: this package holds none, so a bundle
  whose run.json names one is refused (fail closed).

A path is taken only when it has one or two components, each a safe name (no absolute path, no ``..``):
the module never writes another, and a host never follows one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._types import Effect, EffectOp, PolicyError

_HAS_DIR_FD = all(f in os.supports_dir_fd for f in (os.open, os.rename, os.mkdir, os.unlink, os.rmdir))
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def new_run_id() -> str:
    """``r-<UTC time, basic format>-<12 random hex>``, from the operating system's random source."""
    return "r-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(6)


def is_safe_name(name: str) -> bool:
    """A single path component: ASCII letters, digits, ``.``, ``_``, ``-``, not starting with ``.``, at most
    128 bytes (the Rust host's ``is_safe_name``)."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 128
        and not name.startswith(".")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )


def file_name_for(data: bytes) -> str:
    """``runbook.json`` when the bytes are JSON (first non-blank byte ``{``, after a BOM), else ``runbook.yaml``."""
    b = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    first = b.lstrip(b" \t\n\r\x0c")[:1]
    return "runbook.json" if first == b"{" else "runbook.yaml"


def git_status(cwd: Optional[str] = None) -> Tuple[Optional[int], bytes]:
    """Runs ``git status --porcelain=v1 -z`` in the working directory, bounded in time: its exit code (None
    when it could not run or did not finish) and its output, which the module turns into counts only
    (``git-state``), as host/src/bundle/git.rs does."""
    try:
        p = subprocess.run(
            # No fsmonitor hook: reading the state of a checkout must not run a program its config names.
            ["git", "-c", "core.fsmonitor=false", "status", "--porcelain=v1", "-z", "--", ":/", ":(exclude).runbook"],
            cwd=cwd,
            env=dict(os.environ, GIT_OPTIONAL_LOCKS="0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=10,  # bounded: a huge checkout must not hold a run up
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None, b""
    # A process killed by a signal has no exit code (the Rust host's `ExitStatus::code()` is None).
    return (p.returncode if p.returncode >= 0 else None), p.stdout


# ---- a directory held open -----------------------------------------------------------------------------------


class _Dir:
    """A directory opened once: every name is resolved in it (through its descriptor where the platform
    has ``dir_fd``), so a directory renamed or removed under the run fails the next write instead of
    writing somewhere else, and no file name is followed through a symlink."""

    def __init__(self, path: Path, parent: Optional["_Dir"] = None) -> None:
        self.path = path
        self.fd: Optional[int] = None
        if _HAS_DIR_FD:
            flags = os.O_RDONLY | _DIRECTORY | _CLOEXEC
            if parent is not None and parent.fd is not None:
                self.fd = os.open(path.name, flags | _NOFOLLOW, dir_fd=parent.fd)
            else:
                self.fd = os.open(path, flags)

    def _p(self, name: str) -> Any:
        return name if self.fd is not None else os.fspath(self.path / name)

    def _at(self) -> Dict[str, int]:
        return {"dir_fd": self.fd} if self.fd is not None else {}

    def open(self, name: str, flags: int, mode: int = 0o666) -> int:
        return os.open(self._p(name), flags | _NOFOLLOW | _CLOEXEC, mode, **self._at())

    def subdir(self, name: str) -> "_Dir":
        return _Dir(self.path / name, self)

    def mkdir(self, name: str) -> None:
        """Creates ``name``; an existing one is an error (``FileExistsError``)."""
        os.mkdir(self._p(name), **self._at())
        self.sync()

    def read(self, name: str) -> bytes:
        fd = self.open(name, os.O_RDONLY)
        try:
            chunks: List[bytes] = []
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    return b"".join(chunks)
                chunks.append(b)
        finally:
            os.close(fd)

    def is_file(self, name: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(self._p(name), follow_symlinks=False, **self._at()).st_mode)
        except OSError:
            return False

    def write_atomic(self, name: str, data: bytes) -> None:
        """A temporary file, written and fsync'd, renamed over ``name``; then the directory fsync'd."""
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if self.fd is not None:
                os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            else:
                os.replace(self._p(tmp), self._p(name))
        except BaseException:
            try:
                os.unlink(self._p(tmp), **self._at())
            except OSError:
                pass
            raise
        self.sync()

    def append(self, name: str, data: bytes, create: bool = True, identity: Optional[Tuple[int, int]] = None) -> None:
        """Appends one whole record in one write and fdatasyncs it. A write that fails has the file cut back
        to its last whole record, so nothing half written is ever read as evidence. With ``identity``, the
        file must still be that (device, inode) and a regular file."""
        fd = self.open(name, os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (identity is not None and (st.st_dev, st.st_ino) != identity):
                raise OSError(f"{self.path / name} was replaced since the run began")
            whole = st.st_size
            try:
                _write_all(fd, data)
                _fdatasync(fd)
            except BaseException:
                try:
                    os.ftruncate(fd, whole)
                    _fdatasync(fd)
                except OSError:
                    pass
                raise
        finally:
            os.close(fd)

    def identity(self, name: str) -> Tuple[int, int]:
        st = os.stat(self._p(name), follow_symlinks=False, **self._at())
        return st.st_dev, st.st_ino

    def remove_flat(self, name: str) -> None:
        """Removes the directory ``name`` and the files in it (a run directory that never became a bundle)."""
        sub = self.subdir(name)
        try:
            for entry in os.listdir(sub.fd if sub.fd is not None else sub.path):
                try:
                    os.unlink(sub._p(entry), **sub._at())
                except OSError:
                    pass
        finally:
            sub.close()
        os.rmdir(self._p(name), **self._at())

    def sync(self) -> None:
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            except OSError as e:
                # Some filesystems cannot fsync a directory; the files themselves were synced.
                if e.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
                    raise

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __del__(self) -> None:
        # A run that was never ended still gives its descriptors back.
        try:
            self.close()
        except OSError:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fdatasync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


class EffectFailed(OSError):
    """An effect could not be carried out: ``index`` is its position in the list."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.index = index
        self.__cause__ = error


def apply(root: _Dir, effects: Sequence[Effect], dirs: Dict[str, _Dir], sign: Optional[Callable[[bytes], bytes]] = None) -> None:
    """Carries out ``effects`` under ``root``, in order, stopping at the first that fails
    (:class:`EffectFailed`). ``dirs`` holds the subdirectories already open (by name); a directory
    created here is added to it. ``sign`` makes a DSSE envelope of a statement's bytes; without it a
    ``sign`` effect fails (this package holds no receipt key)."""
    for i, e in enumerate(effects):
        try:
            parts = e.path.split("/")
            if not 1 <= len(parts) <= 2 or not all(is_safe_name(p) for p in parts):
                raise OSError(errno.EINVAL, f"the module named the path `{e.path}`")
            if e.op is EffectOp.CREATE_DIR:
                if len(parts) != 1:
                    raise OSError(errno.EINVAL, f"the module named the directory `{e.path}`")
                root.mkdir(parts[0])
                dirs[parts[0]] = root.subdir(parts[0])
                continue
            d = root
            if len(parts) == 2:
                d = dirs.get(parts[0]) or dirs.setdefault(parts[0], root.subdir(parts[0]))
            name = parts[-1]
            if e.op is EffectOp.WRITE:
                d.write_atomic(name, e.bytes)
            elif e.op is EffectOp.APPEND:
                d.append(name, e.bytes)
            elif e.op is EffectOp.SIGN:
                if sign is None:
                    raise OSError(errno.EPERM, "run.json names a receipt key, and this host holds none: it cannot sign the receipt")
                d.write_atomic(name, sign(e.bytes))
            else:  # pragma: no cover - the enum has no other member
                raise OSError(errno.EINVAL, f"an effect this host does not know: {e.op}")
        except OSError as err:
            raise EffectFailed(i, err) from err


# ---- the bundle -----------------------------------------------------------------------------------------------


class Bundle:
    """A run bundle being written: :meth:`create` it before the first event, :meth:`append_record` every
    event's record as it happens, say whether the run was :meth:`admitted`, :meth:`finish` with the module's
    report (or :meth:`end_without_report`). Every byte comes from the module; this only writes it."""

    root: _Dir
    dir: _Dir
    path: Path
    run_id: str
    head: str
    lines: int
    finished: bool

    def __init__(self) -> None:
        raise TypeError("use Bundle.create(...) or Bundle.open(...)")

    @classmethod
    def create(cls, policy: Any, runs_root: Path, run_id: str, document: bytes, facts: Dict[str, Any], clock: Callable[[], int]) -> "Bundle":
        """Creates ``<runs_root>/<run_id>/`` (refusing an existing one) from the module's ``bundle-create``
        effects; ``runs_root`` is created when missing. A failure before run.json is written leaves no
        directory behind; one after it ends the bundle without a report (``bundle-unwritable``)."""
        if not is_safe_name(run_id):
            raise ValueError(f"`{run_id}` is not a usable run id (letters, digits, `.`, `_`, `-`; not starting with `.`)")
        effects = policy.bundle_create(document, facts)
        run_json = f"{run_id}/run.json"
        manifest_at = next((i for i, e in enumerate(effects) if e.path == run_json), None)
        if manifest_at is None:
            raise PolicyError("the module wrote no run.json")
        os.makedirs(runs_root, exist_ok=True)
        b: Bundle = cls.__new__(cls)
        b._policy, b._clock = policy, clock
        b.root = _Dir(runs_root)
        b.path = runs_root / run_id
        b.run_id = run_id
        b._dirs = {}
        b.finished = False
        b.lines = 0
        b._start_line = None
        b._adopt(effects[manifest_at].bytes.decode("utf-8"))
        b.head = b._manifest["chain_h0"]
        try:
            apply(b.root, effects, b._dirs)
        except EffectFailed as f:
            if f.index <= manifest_at:
                # Until run.json is written the directory is no bundle: one that cannot be completed goes again.
                if f.index > 0:
                    b._close_dirs()
                    try:
                        b.root.remove_flat(run_id)
                    except OSError:
                        pass
            else:
                # The bundle exists: it says it ended without a report where the disk still takes it.
                try:
                    b.dir = b._dirs[run_id]
                    b.end_without_report("bundle-unwritable")
                except (OSError, PolicyError, ValueError, KeyError):
                    pass
            b.close()
            raise f.__cause__ or f from None
        b.dir = b._dirs[run_id]
        # events.ndjson is reopened for each record (so a removed directory or a replaced file fails the
        # write, where a descriptor kept open would append to an unlinked inode): this is its identity.
        b._events_id = b.dir.identity("events.ndjson")
        return b

    @classmethod
    def open(cls, policy: Any, runs_root: Path, run_id: str, clock: Callable[[], int]) -> "Bundle":
        """Reopens a bundle another process created (the Rust host's ``Bundle::open``), to record further
        events and finish it: reads run.json; the chain starts at its ``chain_h0`` with no line counted (the
        caller has the module check the recorded events, then sets :attr:`head` and :attr:`lines`). A bundle
        that has ended (an outcome, ``ended_without_report`` or a receipt) opens as :attr:`finished`.
        ``OSError`` when it cannot be read, ``ValueError`` when run.json is not this run's."""
        if not is_safe_name(run_id):
            raise ValueError(f"`{run_id}` is not a usable run id")
        b: Bundle = cls.__new__(cls)
        b._policy, b._clock, b.run_id, b.path = policy, clock, run_id, runs_root / run_id
        b.root = _Dir(runs_root)
        b._dirs = {}
        try:
            b.dir = b._dirs[run_id] = b.root.subdir(run_id)
            b._adopt(b.dir.read("run.json").decode("utf-8"))
            m = b._manifest
            if not isinstance(m, dict) or m.get("schema") != "runbook-run-bundle/v1" or m.get("run_id") != run_id:
                raise ValueError("run.json is not the runbook-run-bundle/v1 of this run")
            artifacts = m.get("artifacts")
            b._document_file = artifacts.get("document") if isinstance(artifacts, dict) else None
            if b._document_file not in ("runbook.yaml", "runbook.json"):
                raise ValueError("run.json names no document")
            b.head = m.get("chain_h0")
            if not isinstance(b.head, str) or len(b.head) != 64:
                raise ValueError("run.json has no chain_h0")
            b.finished = m.get("outcome") is not None or "ended_without_report" in m or b.dir.is_file("receipt.json")
            b._events_id = b.dir.identity("events.ndjson")
        except BaseException:
            b.close()
            raise
        b.lines, b._start_line = 0, None
        return b

    def document(self) -> Tuple[str, bytes]:
        """The document's file name and exact bytes, as run.json names them (the caller checks them)."""
        return self._document_file, self.dir.read(self._document_file)

    def events_bytes(self) -> bytes:
        """The bytes of ``events.ndjson`` as they are now."""
        return self.dir.read("events.ndjson")

    _policy: Any
    _clock: Callable[[], int]
    _document_file: str
    _dirs: Dict[str, _Dir]
    _manifest_text: str
    _manifest: Dict[str, Any]
    _start_line: Optional[str]
    _events_id: Tuple[int, int]

    def _adopt(self, manifest_text: str) -> None:
        """run.json as last written (the module changes these bytes), and what is read from it."""
        self._manifest_text = manifest_text
        self._manifest = json.loads(manifest_text)

    @property
    def manifest(self) -> Dict[str, Any]:
        """run.json as last written, parsed."""
        return self._manifest

    def append_record(self, event_line: str, record_line: str, link: str) -> None:
        """Appends the module's record of one event (``recorded.record_line``, whose link is ``link``) to
        ``events.ndjson`` in one write, fdatasync'd before returning: a crash loses at most the event in
        flight. The first event's line (the ``start`` claim) is kept: run.json publishes its coverage."""
        if self.finished:
            raise OSError("the bundle is finished")
        self.dir.append("events.ndjson", record_line.encode("utf-8"), create=False, identity=self._events_id)
        if self.lines == 0:
            self._start_line = event_line
        self.head = link
        self.lines += 1

    def admitted(self, admitted: bool) -> None:
        """Records admission (``admitted``) or refusal (``refused``) in run.json's lifecycle, with the
        ``start`` claim's coverage."""
        self._change({"lifecycle": "admitted" if admitted else "refused", "at": self._clock(), "start": self._start_line})

    def finish(self, report: str) -> None:
        """Ends the bundle: report.json, run.json (ended, outcome), receipt.json, latest.json (when it still
        names this run) and an ``ended`` history line, composed by the module from the files' hashes."""
        if self.finished:
            raise OSError("the bundle is already finished")
        files = [self._manifest["artifacts"]["document"], "events.ndjson"]
        if isinstance(self._manifest["artifacts"].get("envelope"), str):
            files.append("envelope.json")
        files += [f for f in ("signatures.ndjson", "shadow.ndjson") if self.dir.is_file(f)]
        hashes = {f: sha256_hex(self.dir.read(f)) for f in files}
        self._end_with(report, {"at": self._clock(), "chain_head": self.head, "hashes": hashes, "latest": self._latest_text()})

    def end_without_report(self, code: str) -> None:
        """Ends a bundle that has no report to end with (the module trapped: a report it cannot vouch for is
        never made up). run.json says ``ended_without_report: <code>``; ``verify`` refuses such a bundle,
        while its events stay."""
        if self.finished:
            raise OSError("the bundle is already finished")
        self._end_with(None, {"at": self._clock(), "ended_without_report": code, "latest": self._latest_text()})

    def has_receipt(self) -> bool:
        """Whether receipt.json is written (by :meth:`finish`, which may still have failed after it)."""
        return self.dir.is_file("receipt.json")

    def _end_with(self, report: Optional[str], facts: Dict[str, Any]) -> None:
        effects = self._policy.bundle_end(self._manifest_text, report, facts)
        try:
            self._carry_out(effects)
        except BaseException:
            # Once run.json says the run ended, it has: a later failure (latest.json, history) does not reopen it.
            if any(e.get("event") == "ended" for e in self._manifest.get("lifecycle") or []):
                self.finished = True
                self.close()
            raise
        self.finished = True
        self.close()

    def _latest_text(self) -> Optional[str]:
        try:
            return self.root.read("latest.json").decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _change(self, change: Dict[str, Any]) -> None:
        self._carry_out(self._policy.bundle_change(self._manifest_text, change))

    def _carry_out(self, effects: List[Effect]) -> None:
        try:
            apply(self.root, effects, self._dirs)
        except EffectFailed as f:
            raise f.__cause__ or f from None
        # What was written is what this bundle now holds (the last run.json of the effects).
        run_json = f"{self.run_id}/run.json"
        for e in reversed(effects):
            if e.path == run_json:
                self._adopt(e.bytes.decode("utf-8"))
                break

    def _close_dirs(self) -> None:
        for d in self._dirs.values():
            d.close()

    def close(self) -> None:
        self._close_dirs()
        self.root.close()


def read_events(data: bytes) -> List[Tuple[str, str, str]]:
    """``events.ndjson`` bytes as (h, event line, decision line) triples, each text exactly as recorded (the
    Rust host's ``parse_event_record``); ``ValueError`` names the 1-based line of a malformed one."""
    text = data.decode("utf-8")
    if not text:
        return []
    if not text.endswith("\n"):
        raise ValueError(f"events.ndjson:{text.count(chr(10)) + 1}: the last line does not end with a newline")
    decoder = json.JSONDecoder()
    out = []
    for n, line in enumerate(text[:-1].split("\n"), 1):
        pre, mid = '{"h":"', '","decision":'
        at = len(pre) + 64
        if not line.startswith(pre) or line[at : at + len(mid)] != mid:
            raise ValueError(f"events.ndjson:{n}: not a {{h, decision, event}} line")
        h = line[len(pre) : at]
        rest = line[at + len(mid) :]
        try:
            _, end = decoder.raw_decode(rest)
        except ValueError:
            raise ValueError(f"events.ndjson:{n}: `decision` is not JSON") from None
        decision_text, rest = rest[:end], rest[end:]
        if not rest.startswith(',"event":') or not rest.endswith("}"):
            raise ValueError(f"events.ndjson:{n}: `event` must follow `decision`")
        event_text = rest[len(',"event":') : -1]

        def unembed(t: str) -> str:
            return json.loads(t) if t.lstrip().startswith('"') else t

        out.append((h, unembed(event_text), unembed(decision_text)))
    return out
