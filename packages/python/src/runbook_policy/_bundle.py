"""Run bundles, written byte-compatibly with the Rust host (host/src/bundle/mod.rs), so that
``runbook-host verify`` checks a bundle made here exactly as one made by the CLI.

```text
<runs_root>/                 latest.json, history.ndjson
  <run-id>/                  run.json, runbook.yaml | runbook.json, envelope.json, events.ndjson,
                             report.json, receipt.json
```

Every file but the two appended ones (``events.ndjson``, ``history.ndjson``) is replaced atomically: a
temporary file in the same directory, written and fsync'd, then renamed over the name (and the directory
fsync'd). Appends are fsync'd before the call returns. No absolute path is written into ``run.json``,
``latest.json``, ``history.ndjson``, the report or the receipt.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

RUN_SCHEMA = "runbook-run-bundle/v1"
RECEIPT_SCHEMA = "runbook-receipt/v1"
LATEST_SCHEMA = "runbook-latest-run/v1"
HISTORY_SCHEMA = "runbook-run-history-entry/v1"

#: What each adapter sees, as published in run.json (its exact blind spots come from the start claim).
ADAPTER_SEES = {
    "library": "what the embedding client feeds",
    "claude-agent-sdk": "every tool call the Claude Agent SDK's agent loop sends through its hooks",
    "pydantic-ai": "tool calls through the wrapped toolsets of a Pydantic AI agent",
    "mcp-proxy": "MCP tool calls only",
    "hook": "every tool invocation of the agent CLI, shell included",
    "replay": "a recorded event stream",
}

_HAS_DIR_FD = all(f in os.supports_dir_fd for f in (os.open, os.rename, os.mkdir, os.unlink))
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def sha256_hex(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def now_rfc3339() -> str:
    """Now, as UTC RFC 3339 with milliseconds (``2026-11-30T12:34:56.789Z``)."""
    t = datetime.now(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


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


def public_reference(reference: str) -> str:
    """A reference as a bundle may hold it: ``id@version`` as is, a file by its name only."""
    if "/" in reference or "\\" in reference:
        return reference.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    return reference


def pretty(value: Any) -> bytes:
    """serde_json's ``to_string_pretty`` of a map with sorted keys, and a newline."""
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def compact_sorted(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# ---- events.ndjson lines -------------------------------------------------------------------------------------


def _json_object_line(raw: str) -> bool:
    """Whether serde_json (which the Rust host's ``embed`` uses) reads ``raw`` as one JSON value.

    Python's ``json`` accepts more than serde_json does: NaN and Infinity, and nesting past serde's 128
    levels; both are refused here. Numbers are not converted (serde's ``IgnoredAny`` only scans them)."""

    def refuse(_: str) -> Any:
        raise ValueError("not JSON")

    try:
        json.loads(raw, parse_constant=refuse, parse_int=lambda s: 0, parse_float=lambda s: 0)
    except (ValueError, RecursionError):
        return False
    depth = deepest = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest < 128


def embed(raw: str) -> str:
    """The text stored under a key of an ``events.ndjson`` line: the line itself when it is a JSON object
    without a newline, else the JSON string holding it (the Rust host's ``embed``)."""
    if raw.lstrip().startswith("{") and "\n" not in raw and _json_object_line(raw):
        return raw
    return json.dumps(raw, ensure_ascii=False)


def event_record_line(h: str, event_line: str, decision_line: str) -> str:
    """One line of ``events.ndjson``, as written: ``{"h":..,"decision":..,"event":..}`` and a newline."""
    return f'{{"h":"{h}","decision":{embed(decision_line)},"event":{embed(event_line)}}}\n'


# ---- git state ------------------------------------------------------------------------------------------------


def git_state(cwd: Optional[str] = None) -> Dict[str, Any]:
    """The working directory's git state as counts only (never a branch, a file name or a path), as
    host/src/bundle/git.rs measures it; ``unavailable`` when git is missing or slow."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
    try:
        p = subprocess.run(
            # No fsmonitor hook: reading the state of a checkout must not run a program its config names.
            ["git", "-c", "core.fsmonitor=false", "status", "--porcelain=v1", "-z", "--", ":/", ":(exclude).runbook"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=10,  # bounded: a huge checkout must not hold a run up
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {"status": "unavailable"}
    if p.returncode == 128:
        return {"status": "not-a-checkout"}
    if p.returncode != 0:
        return {"status": "unavailable"}
    staged = unstaged = untracked = total = 0
    fields = [f for f in p.stdout.split(b"\0") if f]
    i = 0
    while i < len(fields):
        f = fields[i]
        i += 1
        if len(f) < 3:
            continue
        x, y = f[0:1], f[1:2]
        total += 1
        if x == b"?":
            untracked += 1
            continue
        if x != b" ":
            staged += 1
        if y != b" ":
            unstaged += 1
        if x in (b"R", b"C"):
            i += 1  # the rename's source
    return {
        "status": "clean" if total == 0 else "dirty",
        "staged": staged,
        "unstaged": unstaged,
        "untracked": untracked,
        "total": total,
    }


# ---- a directory held open -----------------------------------------------------------------------------------


class _Dir:
    """A directory opened once: every name is resolved in it (through its descriptor where the platform
    has ``dir_fd``), so a directory renamed or removed under the run fails the next write instead of
    writing somewhere else, and no file name is followed through a symlink."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: Optional[int] = None
        if _HAS_DIR_FD:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)

    def _p(self, name: str) -> Any:
        return name if self.fd is not None else os.fspath(self.path / name)

    def open(self, name: str, flags: int, mode: int = 0o666) -> int:
        flags |= _NOFOLLOW | _CLOEXEC
        if self.fd is not None:
            return os.open(name, flags, mode, dir_fd=self.fd)
        return os.open(self._p(name), flags, mode)

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
                if self.fd is not None:
                    os.unlink(tmp, dir_fd=self.fd)
                else:
                    os.unlink(self._p(tmp))
            except OSError:
                pass
            raise
        self.sync()

    def append(self, name: str, data: bytes, create: bool = True) -> None:
        flags = os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0)
        fd = self.open(name, flags)
        try:
            _write_all(fd, data)
            _fdatasync(fd)
        finally:
            os.close(fd)

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


# ---- the bundle -----------------------------------------------------------------------------------------------


class Bundle:
    """A run bundle being written: create it before the first event, record every event and its decision
    as they happen, say whether the run was admitted, finish with the module's report."""

    def __init__(
        self,
        runs_root: Path,
        run_id: str,
        document: bytes,
        reference: str,
        envelope: Optional[str],
        module_sha256: str,
        adapter: str,
        host: Dict[str, str],
        pinned_sha256: Optional[str] = None,
    ) -> None:
        if not is_safe_name(run_id):
            raise ValueError(f"`{run_id}` is not a usable run id (letters, digits, `.`, `_`, `-`; not starting with `.`)")
        self.run_id = run_id
        self.path = runs_root / run_id
        self.document_file = file_name_for(document)
        self.has_envelope = envelope is not None
        self.finished = False
        self.head = sha256_hex(envelope.encode("utf-8")) if envelope is not None else sha256_hex(document)
        self.lines = 0
        # Measured before the bundle exists, so the run's own files do not count.
        git = git_state()
        os.makedirs(runs_root, exist_ok=True)
        self.root = _Dir(runs_root)
        try:
            if self.root.fd is not None:
                os.mkdir(run_id, dir_fd=self.root.fd)
            else:
                os.mkdir(self.path)
            self.dir = _Dir(self.path)
        except BaseException:
            self.root.close()
            raise
        created = now_rfc3339()
        self.dir.write_atomic(self.document_file, document)
        if envelope is not None:
            self.dir.write_atomic("envelope.json", envelope.encode("utf-8"))
        fd = self.dir.open("events.ndjson", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.fsync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        # events.ndjson is reopened for each line (so a removed directory or a replaced file fails the
        # write, where a descriptor kept open would append to an unlinked inode): this is its identity.
        self.events_id = (st.st_dev, st.st_ino)
        runbook_id = version = None
        if envelope is not None:
            doc = json.loads(envelope)["document"]
            runbook_id, version = doc.get("runbook_id"), doc.get("version")
        pub = public_reference(reference)
        self.manifest: Dict[str, Any] = {
            "schema": RUN_SCHEMA,
            "run_id": run_id,
            "artifacts": {
                "run": "run.json",
                "document": self.document_file,
                "envelope": "envelope.json" if envelope is not None else None,
                "events": "events.ndjson",
                "report": "report.json",
                "receipt": "receipt.json",
            },
            "channels": {"pending": "pending", "approvals": "approvals", "consumed": "consumed"},
            "document": {
                "reference": pub,
                # T2: resolved from a registry whose index pins these bytes (checked by the caller); T1: a file.
                "trust": "T2" if pinned_sha256 else "T1",
                "sha256": sha256_hex(document),
                "pinned_sha256": pinned_sha256 or None,
                "file": self.document_file,
                "runbook_id": runbook_id,
                "version": version,
            },
            "envelope_sha256": sha256_hex(envelope.encode("utf-8")) if envelope is not None else None,
            "chain_h0": self.head,
            "module_sha256": module_sha256,
            "host": dict(host),
            "adapter": {"name": adapter, "sees": ADAPTER_SEES.get(adapter, "unknown"), "coverage": None},
            "lifecycle": [{"event": "created", "at": created}],
            "outcome": None,
            "source": {"git": git},
        }
        self.write_manifest()
        self.write_latest(created)
        self.append_history(
            {"schema": HISTORY_SCHEMA, "event": "created", "run_id": run_id, "at": created, "path": run_id, "reference": pub, "trust": "T2" if pinned_sha256 else "T1", "adapter": adapter}
        )

    def record(self, event_line: str, decision_line: str, h: str) -> None:
        """Appends one event, its decision and its chain link in one write, fsync'd before returning. The
        ``start`` claim's coverage is copied into run.json's adapter (written at the next lifecycle change)."""
        if self.finished:
            raise OSError("the bundle is finished")
        line = event_record_line(h, event_line, decision_line).encode("utf-8")
        fd = self.dir.open("events.ndjson", os.O_WRONLY | os.O_APPEND)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self.events_id or not stat.S_ISREG(st.st_mode):
                raise OSError(f"{self.path / 'events.ndjson'} was replaced since the run began")
            _write_all(fd, line)
            _fdatasync(fd)
        finally:
            os.close(fd)
        self.head = h
        self.lines += 1
        if self.lines == 1:
            try:
                ev = json.loads(event_line)
            except ValueError:
                ev = None
            if isinstance(ev, dict) and ev.get("type") == "start":
                self.manifest["adapter"]["coverage"] = ev.get("coverage")

    def admitted(self, admitted: bool) -> None:
        self.manifest["lifecycle"].append({"event": "admitted" if admitted else "refused", "at": now_rfc3339()})
        self.write_manifest()

    def finish(self, report: str, canonicalize: Callable[[str], str]) -> None:
        """report.json (the module's bytes), run.json (ended, outcome), receipt.json, latest.json (when it
        still names this run) and an ``ended`` line in history.ndjson."""
        if self.finished:
            raise OSError("the bundle is already finished")
        outcome = json.loads(report).get("outcome")
        ended = now_rfc3339()
        self.dir.write_atomic("report.json", report.encode("utf-8"))
        self.manifest["lifecycle"].append({"event": "ended", "at": ended})
        self.manifest["outcome"] = outcome
        self.write_manifest()
        self.dir.write_atomic("receipt.json", self.receipt(report, canonicalize).encode("utf-8"))
        self.finished = True
        if self.latest_is_me():
            self.write_latest(ended)
        self.append_history({"schema": HISTORY_SCHEMA, "event": "ended", "run_id": self.run_id, "at": ended, "path": self.run_id, "outcome": outcome})
        self.close()

    def end_without_report(self, code: str) -> None:
        """Ends a bundle that has no report to end with (the module trapped: a report it cannot vouch for is
        never made up). ``verify`` refuses such a bundle, while its events stay."""
        if self.finished:
            raise OSError("the bundle is already finished")
        ended = now_rfc3339()
        self.manifest["lifecycle"].append({"event": "ended", "at": ended})
        self.manifest["ended_without_report"] = code
        self.finished = True
        try:
            self.write_manifest()
            if self.latest_is_me():
                self.write_latest(ended)
            self.append_history(
                {"schema": HISTORY_SCHEMA, "event": "ended", "run_id": self.run_id, "at": ended, "path": self.run_id, "outcome": None, "ended_without_report": code}
            )
        finally:
            self.close()

    def receipt(self, report: str, canonicalize: Callable[[str], str]) -> str:
        """``runbook-receipt/v1``, canonical JSON (through the module), pinning every other file as it is on
        disk now."""
        files: List[str] = ["run.json", self.document_file, "events.ndjson", "report.json"]
        if self.has_envelope:
            files.append("envelope.json")
        artifacts = {f: sha256_hex(self.dir.read(f)) for f in files}
        host = self.manifest["host"]
        text = (
            f'{{"artifacts":{compact_sorted(artifacts)},"chain_head":"{self.head}",'
            f'"host":{{"name":{json.dumps(host["name"])},"version":{json.dumps(host["version"])}}},'
            f'"module_sha256":{json.dumps(self.manifest["module_sha256"])},"report":{report},'
            f'"report_sha256":"{sha256_hex(report.encode("utf-8"))}","schema":"{RECEIPT_SCHEMA}"}}'
        )
        return canonicalize(text)

    def write_manifest(self) -> None:
        self.dir.write_atomic("run.json", pretty(self.manifest))

    def latest_is_me(self) -> bool:
        try:
            v = json.loads(self.root.read("latest.json"))
        except (OSError, ValueError):
            return False
        return isinstance(v, dict) and v.get("run_id") == self.run_id

    def write_latest(self, at: str) -> None:
        self.root.write_atomic("latest.json", pretty({"schema": LATEST_SCHEMA, "run_id": self.run_id, "path": self.run_id, "updated_at": at}))

    def append_history(self, entry: Dict[str, Any]) -> None:
        self.root.append("history.ndjson", (compact_sorted(entry) + "\n").encode("utf-8"))

    def close(self) -> None:
        for d in (getattr(self, "dir", None), getattr(self, "root", None)):
            if d is not None:
                d.close()


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
