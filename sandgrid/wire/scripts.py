"""Lua scripts run by name: how both sides make a compare-and-set atomic in Redis.

Each ``*.lua`` file of a folder is registered once on a client (``EVALSHA``
with a fallback to ``EVAL``, as redis-py's ``Script`` does) and run by its file
stem. The wire's ledger has its folder (``sandgrid/wire/lua``), the control
plane's registry its own (``scheduler/registry/lua``); each holds a
``LuaScripts`` of its folder, so neither reaches into the other's privates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis

__all__ = ["LuaScripts"]


class LuaScripts:
    """Every ``*.lua`` file of ``directory``, registered on ``client``, run by name.

    Args:
        client: a Redis client created with ``decode_responses=True``.
        directory: the folder of the scripts; a script's name is its file stem.
    """

    def __init__(self, client: redis.Redis[str], directory: Path) -> None:
        self._scripts = {
            p.stem: client.register_script(p.read_text()) for p in sorted(directory.glob("*.lua"))
        }

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script ``name`` with ``keys`` (KEYS) and ``args`` (ARGV); its reply.

        Raises:
            KeyError: no script of that name in the folder.
            redis.RedisError: Redis refused or did not answer.
        """
        return self._scripts[name](keys=keys, args=args)
