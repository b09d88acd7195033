"""agentscope-runtime's ``BrowserSandbox`` against a grid: run with the python of its venv.

``python agentscope_browser_client.py API_URL TOKEN OUT.json``: opens a
``BrowserSandbox`` (remote mode, ``base_url=`` the grid's API), drives a form
page with its ``browser_*`` tools and writes what they answered as JSON for
``tests/integration/test_browser_grid.py``. It imports nothing of sandgrid.
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import quote

from agentscope_runtime.sandbox import BrowserSandbox
from mcp.types import CallToolResult

__all__ = ["PAGE", "main"]

PAGE = (
    "<title>Scope form</title><h1>Sign up</h1>"
    "<input id=name aria-label=Name>"
    "<button onclick=\"document.getElementById('out').textContent="
    "'hi '+document.getElementById('name').value\">Send</button><p id=out>none</p>"
)


def _ref(snapshot: str, role: str) -> str:
    line = next(x for x in snapshot.splitlines() if f"- {role}" in x)
    return line.rsplit("[ref=", 1)[1].rstrip("]")


def _texts(result: Any) -> str:
    CallToolResult.model_validate(result)
    return "\n".join(c.get("text", "") for c in result["content"])


def main(argv: list[str]) -> None:
    url, token, path = argv
    out: dict[str, Any] = {}
    with BrowserSandbox(base_url=url, bearer_token=token) as box:
        out["sandbox_id"] = box.sandbox_id
        out["navigate"] = _texts(box.browser_navigate("data:text/html," + quote(PAGE)))
        snap = _texts(box.browser_snapshot())
        out["snapshot"] = snap
        typed = box.browser_type(element="Name", ref=_ref(snap, "textbox"), text="scope")
        out["type"] = typed["isError"]
        clicked = box.browser_click(element="Send", ref=_ref(snap, "button"))
        out["click"] = clicked["isError"]
        out["after"] = _texts(box.browser_snapshot())
        shot = box.browser_take_screenshot()
        CallToolResult.model_validate(shot)
        out["shot"] = {k: shot["content"][0][k] for k in ("type", "mimeType")}
        out["shot_png"] = shot["content"][0]["data"][:12]
        out["unserved"] = box.browser_tab_list()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1:])
