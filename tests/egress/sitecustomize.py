"""Nothing reaches the internet at run time (docs/testing.md, Nothing leaves the machine): a
test puts this folder on ``PYTHONPATH`` and names a file in ``PODRACER_EGRESS_LOG``, and every
Python process started under it, however deep, runs this module when its interpreter starts.

It wraps the socket module's name lookups and its sockets' ``connect``, ``connect_ex`` and
``sendto``, and writes to that file each lookup of a name, and each connection or datagram to
an address, other than loopback, with the process's command line and the stack that made it;
and it writes the process's command line to the file beside it (``<log>.watched``), so that a
test can tell a clean record from a watch that never ran. It only records: the call goes on
as it would have. Not an audit hook (PEP 578), which would see ``_socket`` called directly
too: Python calls a hook on every audited event, ``id()`` among them (714,848 calls in one
tiny ``podracer run``), and that made the services test a third slower.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOG_VAR = "PODRACER_EGRESS_LOG"
WATCHED = ".watched"
LOOKUPS = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr")
SENDS = ("connect", "connect_ex", "sendto")


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


def watch(log: Path, command: str | None = None) -> None:
    """Record this process in ``<log>.watched`` and each of its reaches off the machine in ``log``;
    ``command`` names it where its interpreter's own command line would not (a forked command)."""
    command = " ".join((command or " ".join(sys.orig_argv)).split())[:300]  # one line, whatever ``-c`` held
    with open(str(log) + WATCHED, "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()} {command}\n")

    def record(call: str, host: object) -> None:
        if not loopback(host):
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"socket.{call} {host!r} by {os.getpid()} {command}\n"
                          f"{''.join(traceback.format_stack(limit=15)[:-2])}\n")

    def lookup(call: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def looked_up(host: Any, *args: Any, **kwargs: Any) -> Any:
            record(call, host)
            return original(host, *args, **kwargs)
        return looked_up

    def send(call: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def sent(sock: socket.socket, *args: Any) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                record(call, args[-1][0])  # the address: connect's only argument, sendto's last
            return original(sock, *args)
        return sent

    for call in LOOKUPS:
        setattr(socket, call, lookup(call, getattr(socket, call)))
    for call in SENDS:
        setattr(socket.socket, call, send(call, getattr(socket.socket, call)))


if os.environ.get(LOG_VAR):
    watch(Path(os.environ[LOG_VAR]))
