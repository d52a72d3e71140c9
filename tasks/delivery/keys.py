"""API keys, the one thing both ends of the wire hold: from the environment or a 0600 file.

The broker checks them on every request and the trading client sends them as Alpaca's two
headers, so they sit beside both parts rather than inside either (docs/delivery.md, Keys).
Never from ``params.yaml``, never in a log line, an MLflow param, tag or artifact. The
local broker creates a key file with random keys on its first start, readable by its
owner only, and the trading client reads the same file; Alpaca's keys come from
``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY`` (or a key file written by hand).
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


def load_keys(file: Path, *, create: bool = False, env: Mapping[str, str] = os.environ) -> Keys:
    """The environment's keys if both are set; else ``file`` (which must be 0600); else, with
    ``create``, new random keys written to ``file`` with mode 0600."""
    given = [env.get(name) for name in KEY_VARS]
    if all(given):
        return Keys(*given)  # type: ignore[arg-type]
    if any(given):
        raise ConfigError(f"set both {' and '.join(KEY_VARS)}, or neither (then keys come from {file})")
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
        raise ConfigError(f"no API keys: set {' and '.join(KEY_VARS)}, or write them to {file} (chmod 600)")
    keys = Keys(_random("PK", 20), _random("", 40))
    write_private(file, json.dumps({"key_id": keys.key_id, "secret_key": keys.secret}))
    return keys


def key_file(params: Params) -> Path:
    """The local broker's key file: ``broker.key_file``, else ``data/broker/keys.json``."""
    return params.broker.key_file or params.dirs.broker / KEY_FILE


def local_keys(params: Params) -> Keys:
    """The local broker's keys (created on first use, 0600)."""
    return load_keys(key_file(params), create=True)
