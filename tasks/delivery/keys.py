"""API keys, the one thing both ends of the wire hold: from the environment or a 0600 file.

The broker checks them on every request and the trading client sends them as Alpaca's two
headers, so they sit beside both parts rather than inside either (docs/delivery.md, Keys).
Never from ``params.yaml``, never in a log line, an MLflow param, tag or artifact. The
local broker creates a key file with random keys on its first start, readable by its
owner only, and the trading client reads the same file; Alpaca's keys come from
``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY`` (or a key file written by hand).

One key pair is one paper account, as at Alpaca. A broker serves one account per **role**:
the champion's, and the shadow's (the registry alias ``shadow``: docs/delivery.md, Shadow
accounts). The shadow's keys and files carry its role in their names (``keys-shadow.json``,
``APCA_SHADOW_API_KEY_ID`` / ``APCA_SHADOW_API_SECRET_KEY``); the champion's are unchanged.
"""

from __future__ import annotations

import json
import os
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tasks.config import Params
from tasks.errors import ConfigError
from tasks.storage import write_private

KEY_VARS = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY")
KEY_FILE = "keys.json"
CHAMPION, SHADOW = "champion", "shadow"
ROLES = (CHAMPION, SHADOW)
"""The accounts a broker serves, named after the registry aliases that trade in them."""


def key_vars(role: str = CHAMPION) -> tuple[str, str]:
    """The two environment variables of a role's keys: ``APCA_API_*``, or ``APCA_SHADOW_API_*``."""
    prefix = "APCA_" if role == CHAMPION else f"APCA_{role.upper()}_"
    return f"{prefix}API_KEY_ID", f"{prefix}API_SECRET_KEY"


def role_path(path: Path, role: str) -> Path:
    """A role's file beside the champion's: ``keys.json`` is the champion's, ``keys-shadow.json`` the shadow's."""
    return path if role == CHAMPION else path.with_name(f"{path.stem}-{role}{path.suffix}")


@dataclass(frozen=True, repr=False)
class Keys:
    key_id: str
    secret: str

    def __repr__(self) -> str:  # never print a secret
        return f"Keys(key_id={self.key_id[:4]}…)"

    def headers(self) -> dict[str, str]:
        """Alpaca's two authentication headers, as every request to a broker carries them."""
        return {"APCA-API-KEY-ID": self.key_id, "APCA-API-SECRET-KEY": self.secret}


def _random(prefix: str, length: int) -> str:
    alphabet = string.ascii_uppercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length - len(prefix)))


def load_keys(file: Path, *, create: bool = False, env: Mapping[str, str] = os.environ,
              names: tuple[str, str] = KEY_VARS) -> Keys:
    """The keys in the environment variables ``names`` if both are set; else ``file`` (which
    must be 0600); else, with ``create``, new random keys written to ``file`` with mode 0600."""
    given = [env.get(name) for name in names]
    if all(given):
        return Keys(*given)  # type: ignore[arg-type]
    if any(given):
        raise ConfigError(f"set both {' and '.join(names)}, or neither (then keys come from {file})")
    if file.exists():
        mode = file.stat().st_mode & 0o777
        if mode & 0o077:
            raise ConfigError(f"{file}: mode {mode:o}; a key file must be readable by its owner only "
                              f"(chmod 600 {file})")
        try:
            raw = json.loads(file.read_text())
            return Keys(str(raw["key_id"]), str(raw["secret_key"]))
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f'{file}: expected JSON {{"key_id": ..., "secret_key": ...}}') from None
    if not create:
        raise ConfigError(f"no API keys: set {' and '.join(names)}, or write them to {file} (chmod 600)")
    keys = Keys(_random("PK", 20), _random("", 40))
    write_private(file, json.dumps({"key_id": keys.key_id, "secret_key": keys.secret}))
    return keys


def key_file(params: Params, role: str = CHAMPION) -> Path:
    """The local broker's key file of ``role``: ``broker.key_file``, else ``data/broker/keys.json``
    (the shadow's: ``keys-shadow.json`` beside it)."""
    return role_path(params.broker.key_file or params.dirs.broker / KEY_FILE, role)


def local_keys(params: Params, role: str = CHAMPION) -> Keys:
    """The local broker's keys of ``role`` (from :func:`key_vars` if set, else the key file,
    created on first use, 0600)."""
    return load_keys(key_file(params, role), create=True, names=key_vars(role))
