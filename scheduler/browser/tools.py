"""The browser tools over CDP: navigate, screenshot, click, type, snapshot (docs/browser.md).

Each call opens the browser's WebSocket (``scheduler.browser.cdp``), attaches to
the browser's first page (opening one when there is none) and acts on it; the
page stays between calls, so a navigate then a click act on the same page
whichever API process serves them. Elements are named by a ``ref`` from the
last snapshot (``e<backend node id>``: stable while the page lives, no state
kept on the API) or by a CSS selector.
"""

from __future__ import annotations

import base64
from typing import Any

from scheduler.browser.cdp import CdpClient, CdpError

__all__ = [
    "LOAD_TIMEOUT_S",
    "MAX_SNAPSHOT_LINES",
    "attach_page",
    "click",
    "navigate",
    "render_tree",
    "screenshot",
    "snapshot",
    "type_text",
]

#: How long a navigate waits for the page's load event.
LOAD_TIMEOUT_S = 20.0
#: The longest accessibility snapshot returned (a line per node); the rest is cut, said so.
MAX_SNAPSHOT_LINES = 2000
_SKIP_ROLES = frozenset({"none", "generic", "InlineTextBox", "LineBreak"})


async def attach_page(cdp: CdpClient) -> str:
    """The CDP session id of the browser's first page (one is opened when none is)."""
    targets = (await cdp.send("Target.getTargets"))["targetInfos"]
    pages = [t for t in targets if t.get("type") == "page"]
    if pages:
        target = pages[0]["targetId"]
    else:
        target = (await cdp.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
    attached = await cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})
    cdp.page_target = target
    return str(attached["sessionId"])


async def _title(cdp: CdpClient, page: str) -> dict[str, Any]:
    js = "({url: location.href, title: document.title})"
    value = await cdp.send(
        "Runtime.evaluate", {"expression": js, "returnByValue": True}, session=page
    )
    result: dict[str, Any] = value["result"].get("value") or {}
    return result


async def navigate(cdp: CdpClient, page: str, url: str) -> dict[str, Any]:
    """Load ``url``; its final URL and title.

    Raises:
        CdpError: the load failed (a refused host names the browser's net error).
    """
    await cdp.send("Page.enable", session=page)
    done = await cdp.send("Page.navigate", {"url": url}, session=page)
    if done.get("errorText"):
        raise CdpError(f"navigation to {url} failed: {done['errorText']}")
    loaded = await cdp.wait_event("Page.loadEventFired", timeout=LOAD_TIMEOUT_S)
    info = await _title(cdp, page)
    return {**info, "loaded": loaded is not None}


async def screenshot(cdp: CdpClient, page: str, *, full_page: bool = False) -> bytes:
    """The page as PNG bytes (the viewport, or the whole page)."""
    params = {"format": "png", "captureBeyondViewport": full_page}
    shot = await cdp.send("Page.captureScreenshot", params, session=page, timeout=60)
    return base64.b64decode(shot["data"])


async def _node(cdp: CdpClient, page: str, ref: str | None, selector: str | None) -> dict[str, int]:
    """The element's DOM address: ``{"backendNodeId": n}`` from a ref, ``{"nodeId": n}``
    from a selector.

    Raises:
        CdpError: neither given, a malformed ref, or no element matches.
    """
    if ref:
        if not (ref.startswith("e") and ref[1:].isdigit()):
            raise CdpError(f"ref {ref!r} is not a snapshot ref (e<number>)")
        return {"backendNodeId": int(ref[1:])}
    if not selector:
        raise CdpError("name the element: a ref from browser_snapshot, or a CSS selector")
    root = (await cdp.send("DOM.getDocument", {"depth": 0}, session=page))["root"]["nodeId"]
    found = await cdp.send(
        "DOM.querySelector", {"nodeId": root, "selector": selector}, session=page
    )
    if not found.get("nodeId"):
        raise CdpError(f"no element matches the selector {selector!r}")
    return {"nodeId": int(found["nodeId"])}


async def click(cdp: CdpClient, page: str, *, ref: str | None, selector: str | None) -> None:
    """Click the element's centre with the mouse (as a user would: events, focus)."""
    node = await _node(cdp, page, ref, selector)
    await cdp.send("DOM.scrollIntoViewIfNeeded", node, session=page)
    quads = (await cdp.send("DOM.getContentQuads", node, session=page)).get("quads") or []
    if not quads:
        raise CdpError("the element has no visible box to click")
    q = quads[0]
    x, y = sum(q[0::2]) / 4, sum(q[1::2]) / 4
    for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
        event = {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
        await cdp.send("Input.dispatchMouseEvent", event, session=page)


async def type_text(
    cdp: CdpClient, page: str, text: str, *, ref: str | None, selector: str | None, submit: bool
) -> None:
    """Focus the element, insert ``text``; with ``submit`` press Enter after."""
    node = await _node(cdp, page, ref, selector)
    await cdp.send("DOM.focus", node, session=page)
    await cdp.send("Input.insertText", {"text": text}, session=page)
    if submit:
        key = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}
        await cdp.send("Input.dispatchKeyEvent", {"type": "keyDown", **key}, session=page)
        await cdp.send("Input.dispatchKeyEvent", {"type": "keyUp", **key}, session=page)


async def snapshot(cdp: CdpClient, page: str) -> str:
    """The page's accessibility tree as indented lines ``- role "name" [ref=e<n>]``."""
    nodes = (await cdp.send("Accessibility.getFullAXTree", session=page, timeout=60))["nodes"]
    info = await _title(cdp, page)
    lines = [f"Page URL: {info.get('url', '')}", f"Page Title: {info.get('title', '')}"]
    lines += render_tree(nodes)
    return "\n".join(lines)


def render_tree(nodes: list[dict[str, Any]]) -> list[str]:
    """The lines of an ``Accessibility.getFullAXTree`` answer: ignored and unnamed
    generic nodes are skipped (their children kept); at most ``MAX_SNAPSHOT_LINES``."""
    by_id = {n["nodeId"]: n for n in nodes}
    out: list[str] = []
    stack: list[tuple[str, int]] = [(nodes[0]["nodeId"], 0)] if nodes else []
    while stack and len(out) <= MAX_SNAPSHOT_LINES:
        node_id, depth = stack.pop()
        node = by_id.get(node_id)
        if node is None:
            continue
        role = str((node.get("role") or {}).get("value", ""))
        name = str((node.get("name") or {}).get("value", "")).strip()
        shown = not node.get("ignored") and not (role in _SKIP_ROLES and not name)
        if shown:
            ref = f" [ref=e{node['backendDOMNodeId']}]" if "backendDOMNodeId" in node else ""
            label = f' "{name[:200]}"' if name else ""
            out.append(f"{'  ' * depth}- {role}{label}{ref}")
        child_depth = depth + 1 if shown else depth
        stack.extend((c, child_depth) for c in reversed(node.get("childIds", [])))
    if len(out) > MAX_SNAPSHOT_LINES:
        out = [*out[:MAX_SNAPSHOT_LINES], f"... (cut at {MAX_SNAPSHOT_LINES} lines)"]
    return out
