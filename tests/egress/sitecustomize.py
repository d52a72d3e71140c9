"""Nothing reaches the internet at run time (docs/testing.md, Nothing leaves the machine): a
test puts this folder on ``PYTHONPATH`` and names a file in ``PODRACER_EGRESS_LOG``, and every
Python process started under it, however deep, runs this module when its interpreter starts.

It installs an audit hook (PEP 578) that writes to that file each name lookup and each
connection or datagram to an address other than loopback, with the process's command line
and the stack that made it; and it writes the process's command line to the file beside it
(``<log>.watched``), so that a test can tell a clean record from a hook that never ran. It
only records: the process goes on as it would have.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

LOG_VAR = "PODRACER_EGRESS_LOG"
WATCHED = ".watched"
LOOKUPS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr")
SENDS = ("socket.connect", "socket.sendto")


def loopback(host: object) -> bool:
    """Whether ``host`` (a name, an address, bytes or None) stays on this machine."""
    if host is None:
        return True
    name = (host.decode(errors="replace") if isinstance(host, bytes) else str(host)).split("%")[0]
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def destination(event: str, args: tuple[Any, ...]) -> tuple[bool, object]:
    """(whether ``event`` names a host, that host) for the socket audit events that reach out."""
    if event in LOOKUPS:
        return True, args[0]
    if event in SENDS and args[0].family in (socket.AF_INET, socket.AF_INET6):
        return True, args[1][0]
    return False, None


def watch(log: Path, command: str | None = None) -> None:
    """Record this process in ``<log>.watched`` and each of its reaches off the machine in ``log``;
    ``command`` names it where its interpreter's own command line would not (a forked command)."""
    command = " ".join((command or " ".join(sys.orig_argv)).split())[:300]  # one line, whatever ``-c`` held
    with open(str(log) + WATCHED, "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()} {command}\n")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not event.startswith("socket."):
            return
        named, host = destination(event, args)
        if named and not loopback(host):
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"{event} {host!r} by {os.getpid()} {command}\n{''.join(traceback.format_stack(limit=15))}\n")

    sys.addaudithook(hook)


if os.environ.get(LOG_VAR):
    watch(Path(os.environ[LOG_VAR]))
