"""``verify`` of a run bundle directory: a thin IO shell around the module's ``verify-bundle``, as the Rust
host's (host/src/verify.rs, ``entries`` and ``verify_dir_with``). Every check is the module's; this file
only lists the directory and reads its files."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import Any, List, Optional, Tuple, Union

from ._policy import Policy, load
from ._types import PolicyError, Verification

#: How much of a bundle ``verify`` reads, in all (the Rust host's bound): a larger bundle is refused, not read.
MAX_BUNDLE_BYTES = 256 << 20

UNCHECKED_SIGNATURE = "the SSH signature is not checked by this package: verify the bundle with runbook-host verify"
UNCHECKED_RECEIPT_SIGNATURE = "the receipt's signature is not checked by this package: verify the bundle with runbook-host verify"

_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class _Failed(Exception):
    """A bundle that cannot be read as verify reads it: (place, sentence)."""


def verify(run_dir: Union[str, "os.PathLike[str]"], *, policy: Optional[Policy] = None) -> Verification:
    """Every consistency check of the run bundle in ``run_dir`` (``.runbook/runs/<run-id>``), by the module
    (``policy``, else :func:`load`), which replays it: what ``runbook-host verify`` checks, with the same
    ``checks`` and the same ``failure`` (place, sentence). The directory's top-level entries are read
    without following symbolic links (a link is passed as "not a regular file"), at most 256 MiB in all.

    Fail closed: this package cannot check SSH signature bytes, so a bundle with signed approvals
    (``signatures.ndjson``) never passes here, even when their payloads do: its ``failure`` names the first
    signed answer and says to verify the bundle with ``runbook-host verify``; likewise a bundle whose
    receipt is signed (``receipt.dsse.json``): it fails at that file. Raises ``OSError`` when ``run_dir`` cannot be opened
    as a directory; a trap of the module is a failure at ``(module)``.
    """
    if policy is None:
        policy = load()
    try:
        entries = _entries(os.fspath(run_dir))
    except _Failed as e:
        return Verification(failure=(e.args[0], e.args[1]))
    try:
        v = policy.verify_bundle(entries, policy.module_sha256)
    except PolicyError as e:
        return Verification(failure=("(module)", str(e)))
    if v.failure is None and v.signed_answers:
        # As the Rust host does when a signature does not verify: the `signatures` check did not pass.
        checks = v.checks[: v.checks.index("signatures")] if "signatures" in v.checks else v.checks
        v = replace(v, checks=checks, failure=(v.signed_answers[0].place, UNCHECKED_SIGNATURE), reasons=[])
    elif v.failure is None and v.receipt_signed:
        v = replace(v, failure=("receipt.dsse.json", UNCHECKED_RECEIPT_SIGNATURE), reasons=[])
    return v


def _entries(root: str) -> List[Tuple[str, Any]]:
    """The top-level entries as ``verify-bundle`` takes them, sorted by name: a regular file's bytes, a
    directory's entry count, None for anything else (never read)."""
    out: List[Tuple[str, Any]] = []
    total = 0
    with os.scandir(root) as it:
        try:
            listing = list(it)
        except OSError as e:
            raise _Failed(".", f"cannot be listed: {e}") from None
    # The order a directory lists its entries in is the file system's; the module's answer (and which file
    # crosses the bound) must not be.
    listing.sort(key=lambda e: e.name)
    for entry in listing:
        name = entry.name
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            continue  # not a name any bundle holds (the Rust host skips it too)
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError as e:
            raise _Failed(name, f"cannot be read: {e}") from None
        item: Any = None
        if stat.S_ISREG(mode):
            item = _read(entry.path, name, MAX_BUNDLE_BYTES - total)
            total += len(item)
        elif stat.S_ISDIR(mode):
            try:
                with os.scandir(entry.path) as d:
                    item = min(sum(1 for _ in d), (1 << 32) - 1)
            except OSError:
                item = 0
        out.append((name, item))
    return out


def _read(path: str, name: str, limit: int) -> bytes:
    """A regular file's bytes, without following a link; more than ``limit`` is refused, not read."""
    try:
        fd = os.open(path, _OPEN)
    except OSError as e:
        raise _Failed(name, f"cannot be read: {e}") from None
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Failed(name, "not a regular file")
            data = f.read(limit + 1) if st.st_size <= limit else None
        except OSError as e:
            raise _Failed(name, f"cannot be read: {e}") from None
    if data is None or len(data) > limit:
        raise _Failed(name, f"the bundle holds more than {MAX_BUNDLE_BYTES} bytes, which verify does not read")
    return data
