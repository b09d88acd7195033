"""``/v1/templates``: build a sandbox type from a base and steps, and follow its build (25.2).

``POST /v1/templates`` checks the template (422 naming the field), records it
``building`` and sends its build to a node (202); ``GET /v1/templates/{name}``
answers its state and log; ``GET /v1/templates/{name}/logs?follow=1`` streams
the log as it is written (SSE, the shape of a streamed exec: ``stdout`` chunks,
then ``result`` or, for a failed build, ``error`` with its step and exit code).
A tenant sees only its own templates (another's is 404, as an unknown name);
the operator's token sees every one. A ``ready`` template is a private sandbox
type of its tenant: sessions name it as ``type``. docs/templates.md.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from sandgrid.errors import InfrastructureError
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.streaming import EVENT_STREAM
from sandgrid.templates import TemplateInfo, TemplateSpec
from sandgrid.wire import turnstream
from sandgrid.wire.builds import TemplateStore, build_events, final_event
from scheduler.api.deps import NO_BODY, CurrentTenant, Svc
from scheduler.api.stream import events_response, frame
from scheduler.api.stream_slots import StreamSlots
from scheduler.api.types import Caller, require_admin
from scheduler.templates import BuildSender, TemplateService, celery_sender

__all__ = [
    "build_template",
    "get_template",
    "publish_template",
    "remove_template",
    "router",
    "template_logs",
]

router = APIRouter(prefix="/v1/templates", tags=["templates"])


def _sender(svc: Svc) -> BuildSender:
    """The dispatcher's own way to send a build (a test's fake worker), else its Celery app's."""
    own: BuildSender | None = getattr(svc.runner.dispatcher, "send_build", None)
    if own is not None:
        return own
    app = getattr(svc.runner.dispatcher, "app", None)
    if app is None:
        raise InfrastructureError("no Celery app in this API to send builds", operation="templates")
    return celery_sender(app)


def _service(svc: Svc) -> TemplateService:
    if svc.types is None:
        raise InfrastructureError("no catalog of types in this API", operation="templates")
    store = TemplateStore(svc.redis)
    registry = svc.settings.images.registry
    return TemplateService(store, svc.types, svc.admission.nodes, _sender(svc), registry)


@router.post("", response_model=TemplateInfo, status_code=202)
def build_template(spec: TemplateSpec, svc: Svc, tenant: CurrentTenant) -> TemplateInfo:
    """Check the template and start its build on a node; its state is ``building``."""
    return _service(svc).build(tenant, spec)


@router.get("/{name}", response_model=TemplateInfo)
def get_template(name: str, svc: Svc, caller: Caller) -> TemplateInfo:
    """The template's state (``building``, ``ready``, ``failed``), its log, and why it failed."""
    return _service(svc).get(caller, name)


@router.delete("/{name}", response_model=TemplateInfo)
def remove_template(name: str, svc: Svc, caller: Caller) -> TemplateInfo:
    """Remove a template (its tenant, or the operator): its type, its image's manifest in the
    grid's registry and its record; 409 while it builds or sessions of its type are open
    (their count in the error's context)."""
    return _service(svc).remove(caller, name)


@router.post(
    "/{name}/publish",
    response_model=SandboxTypeSpec,
    dependencies=[Depends(require_admin), NO_BODY],
)
def publish_template(name: str, svc: Svc) -> SandboxTypeSpec:
    """Make a ready template's type every tenant's (the admin token); 409 if not ready."""
    return _service(svc).publish(name)


_Follow = Annotated[bool, Query(description="stream the log as SSE until the build ends")]
_After = Annotated[str, Query(description="resume after this event id (0: from the start)")]


@router.get(
    "/{name}/logs",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, EVENT_STREAM: {}}}},
)
def template_logs(
    name: str, svc: Svc, caller: Caller, follow: _Follow = False, after: _After = "0"
) -> Response:
    """The build's log: its text so far, or with ``follow=1`` its events as SSE, the shape
    of a streamed exec (``stdout`` chunks, then ``result``, or ``error`` naming the failed
    step and its exit code), from ``after`` until the build ends."""
    info = _service(svc).get(caller, name)
    if not follow:
        return PlainTextResponse(info.log)
    stream = build_events(info.build_id)
    offset = turnstream.check_offset(after)
    if info.state != "building" and not turnstream.read(svc.redis, stream, "0").entries:
        # a build older than its stream's TTL: its record is the whole story
        head = frame("", {"type": "stdout", "data": info.log}) if info.log else ""
        text = head + frame("", final_event(info))
        return StreamingResponse(iter([text]), media_type=EVENT_STREAM)
    owner = caller or info.tenant
    slot = StreamSlots(svc.settings.streams).acquire(svc.redis, "stream", owner, stream)
    return events_response(svc, stream, offset, slot)
