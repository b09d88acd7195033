"""The session registry in Redis: sessions, leases, turns; its Lua scripts in ``lua/``.

The scripts of the worker's own operations live in the wire contract
(``sandgrid/wire/lua/``); those here are the control plane's alone.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LUA_DIR", "lua_source"]

#: The control plane's Lua scripts (package data).
LUA_DIR = Path(__file__).with_name("lua")


def lua_source(name: str) -> str:
    """The text of the control plane's script ``lua/<name>.lua``.

    Raises:
        FileNotFoundError: no such script.
    """
    return (LUA_DIR / f"{name}.lua").read_text()
