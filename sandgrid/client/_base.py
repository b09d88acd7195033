"""The SDK's pure base: a client's configuration and the methods that are one call each.

``Client`` and ``AsyncClient`` (``_sync``, ``_async``) are thin shells over
``BaseClient``; ``Session`` and ``AsyncSession`` over ``SessionHandle``;
``BackgroundProcess`` and ``AsyncBackgroundProcess`` over ``ProcessHandle``. The
tables below list every method that sends one call, each once for both shells
(``_shell``: an ``Op`` is a plain method on a sync shell and a coroutine method
on an async one); the builders they name (``_requests``, ``_files``,
``_batches``, ``_lifecycle``, ``_process_calls``, ``_network``, ``_templates``) hold
the signatures and docstrings. A shell writes only how a call is sent, and the methods whose I/O
is more than one send. Imports only httpx, pydantic and the contract modules:
never ``docker``, ``minio``, ``celery`` or ``redis``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sandgrid.client import _batches as batches
from sandgrid.client import _browser as browser
from sandgrid.client import _files as files
from sandgrid.client import _lifecycle as lifecycle
from sandgrid.client import _network as net
from sandgrid.client import _ports as ports
from sandgrid.client import _process_calls as procs
from sandgrid.client import _requests as api
from sandgrid.client import _templates as tpl
from sandgrid.client import _types as catalog
from sandgrid.client._process_calls import ProcessRef
from sandgrid.client._retry import DEFAULT_RETRIES, RetryPolicy
from sandgrid.client._shell import BoundOp, Op
from sandgrid.models import SessionInfo
from sandgrid.processes import ProcessInfo
from sandgrid.settings import DEFAULT_API_URL, get_client_settings

__all__ = ["DEFAULT_TIMEOUT_S", "BaseClient", "ProcessHandle", "SessionHandle"]

C = TypeVar("C")
Transport = TypeVar("Transport")

DEFAULT_TIMEOUT_S = 60.0


class BaseClient(Generic[Transport]):
    """Configuration and the one-call methods shared by ``Client`` and ``AsyncClient``.

    Args:
        base_url: the API, e.g. ``http://127.0.0.1:8700``; ``SANDGRID_API_URL``.
        token: the tenant's bearer token; ``SANDGRID_TOKEN``.
        timeout: seconds for calls other than exec (which waits for its deadline).
        retries: how many times a call is retried when that is safe, or a
            ``RetryPolicy``; 0 never retries.
        transport: an httpx transport of the shell's kind (tests mount the app
            in-process).
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: RetryPolicy | int = DEFAULT_RETRIES,
        transport: Transport | None = None,
    ) -> None:
        if base_url is None or token is None:
            settings = get_client_settings()
            base_url = base_url or settings.api_url or DEFAULT_API_URL
            token = token if token is not None else settings.token
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry = RetryPolicy.of(retries)
        self._connect(transport)

    @property
    def templates(self) -> tpl.Templates:
        """Templates (25.2): ``client.templates.build({...})``, ``client.templates.get(name)``."""
        return tpl.Templates(self)

    def _connect(self, transport: Transport | None) -> None:
        """Open the shell's pooled HTTP client (``self._http``) with ``_http_options``."""
        raise NotImplementedError

    def _http_options(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "headers": self._headers(), "timeout": self.timeout}

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": "sandgrid-sdk/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    # sessions
    create_session = Op(api.create_session)
    create_session_from = Op(lifecycle.create_session_from)
    get_session = Op(api.get_session)
    list_sessions = Op(api.list_sessions)
    find_sessions = Op(lifecycle.find_sessions)
    types = Op(api.types)
    get_type = Op(catalog.get_type)
    add_type = Op(catalog.add_type)
    remove_type = Op(catalog.remove_type)
    build_template = Op(tpl.build_template)  # 25.2
    get_template = Op(tpl.get_template)
    close_session = Op(api.close_session)
    audit = Op(api.audit)
    health = Op(api.health)
    # turns and background processes
    run_code = Op(api.run_code)
    cancel = Op(api.cancel)
    processes = Op(procs.list_call)
    # files
    write_files = Op(files.write_files)
    read_file = Op(files.read_file)
    list_files = Op(files.list_files)
    delete_file = Op(files.delete_file)
    upload_tar = Op(files.upload_tar)
    download_tar = Op(files.download_tar)
    # the lifecycle
    checkpoint = Op(lifecycle.checkpoint)
    checkpoints = Op(lifecycle.checkpoints)
    delete_checkpoint = Op(lifecycle.delete_checkpoint)
    restore = Op(lifecycle.restore)
    pause = Op(lifecycle.pause)
    fork = Op(lifecycle.fork)  # 24.2
    # network egress
    network = Op(net.network)
    set_network = Op(net.set_network)
    # exposed ports (issue 21.1)
    port_url = Op(ports.port_url)
    revoke_port_urls = Op(ports.revoke_port_urls)
    cdp = Op(browser.cdp)  # issue 21.3
    # batches
    create_batch = Op(batches.create_batch)
    get_batch = Op(batches.get_batch)
    batch_results = Op(batches.batch_results)
    cancel_batch = Op(batches.cancel_batch)
    resume_batch = Op(batches.resume_batch)


class _Handle(Generic[C]):
    client: C

    @property
    def _client(self) -> C:
        return self.client


class SessionHandle(_Handle[C]):
    """What ``Session`` and ``AsyncSession`` share: the session's data, and its one-call
    methods (the client's, with the session's id filled in)."""

    def __init__(self, client: C, info: SessionInfo) -> None:
        self.client = client
        self.info = info

    run_code = BoundOp(api.run_code)
    cancel = BoundOp(api.cancel)
    processes = BoundOp(procs.list_call)
    write_file = BoundOp(files.write_file)
    write_files = BoundOp(files.write_files)
    read_file = BoundOp(files.read_file)
    list_files = BoundOp(files.list_files)
    delete = BoundOp(files.delete_file)
    upload_tar = BoundOp(files.upload_tar)
    download_tar = BoundOp(files.download_tar)
    checkpoint = BoundOp(lifecycle.checkpoint)
    checkpoints = BoundOp(lifecycle.checkpoints)
    delete_checkpoint = BoundOp(lifecycle.delete_checkpoint)
    restore = BoundOp(lifecycle.restore)
    pause = BoundOp(lifecycle.pause)
    network = BoundOp(net.network)
    set_network = BoundOp(net.set_network)
    port_url = BoundOp(ports.port_url)
    revoke_port_urls = BoundOp(ports.revoke_port_urls)
    cdp = BoundOp(browser.cdp)  # issue 21.3

    @property
    def id(self) -> str:
        return self.info.id

    _ref = id


class ProcessHandle(_Handle[C]):
    """What ``BackgroundProcess`` and ``AsyncBackgroundProcess`` share: where the process
    is, what it was last seen as, and its one-call methods.

    A handle is plain data (session, pid, sandbox), so any client or process that
    has those can steer the process: build one with ``client.process(session_id,
    pid, sandbox)``. Its shells write only ``wait`` (bounded waits in a loop,
    ``_process_calls.Waiting``) and ``kill`` (which keeps the answer).
    """

    def __init__(self, client: C, session_id: str, info: ProcessInfo) -> None:
        self.client, self.session_id, self.info = client, session_id, info

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def sandbox(self) -> str:
        return self.info.sandbox

    @property
    def _ref(self) -> ProcessRef:
        return ProcessRef(self.session_id, self.info.pid, self.info.sandbox)

    send_stdin = BoundOp(procs.stdin_call)
    logs = BoundOp(procs.logs_call)
