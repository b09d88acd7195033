"""``/v1/templates``: build a sandbox type from a base and steps, and follow its build (25.2).

``POST /v1/templates`` checks the template (422 naming the field), records it
``building`` and sends its build to a node (202); ``GET /v1/templates/{name}``
answers its state and log. A tenant sees only its own templates (another's is
404, as an unknown name); the operator's token sees every one. A ``ready``
template is a private sandbox type of its tenant: sessions name it as
``type``. docs/templates.md.
"""

from __future__ import annotations

from fastapi import APIRouter

from sandgrid.errors import InfrastructureError
from sandgrid.templates import TemplateInfo, TemplateSpec
from sandgrid.wire.builds import TemplateStore
from scheduler.api.deps import CurrentTenant, Svc
from scheduler.api.types import Caller
from scheduler.templates import BuildSender, TemplateService, celery_sender

__all__ = ["build_template", "get_template", "router"]

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
    return TemplateService(store, svc.types, svc.admission.nodes, _sender(svc))


@router.post("", response_model=TemplateInfo, status_code=202)
def build_template(spec: TemplateSpec, svc: Svc, tenant: CurrentTenant) -> TemplateInfo:
    """Check the template and start its build on a node; its state is ``building``."""
    return _service(svc).build(tenant, spec)


@router.get("/{name}", response_model=TemplateInfo)
def get_template(name: str, svc: Svc, caller: Caller) -> TemplateInfo:
    """The template's state (``building``, ``ready``, ``failed``), its log, and why it failed."""
    return _service(svc).get(caller, name)
