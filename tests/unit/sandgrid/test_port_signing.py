"""Preview tokens and the API-worker hello (issue 21.1): signed, checked, and what they refuse."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from sandgrid.errors import Forbidden, LimitExceeded, PortUnreachable
from sandgrid.wire.portkeys import port_key
from sandgrid.wire.portlink import MAX_SKEW_S, Hello, answer_line, parse_answer, read_hello
from sandgrid.wire.preview import (
    MAX_TOKEN_CHARS,
    Preview,
    check_epochs,
    epochs_of,
    sign,
    verify,
)
from sandgrid.wire.settings import Settings

KEY = b"k" * 32
NOW = 1_000_000.0


def _preview(**kw: object) -> Preview:
    base: dict[str, object] = {
        "tenant": "acme",
        "session": "s-abc",
        "port": 8000,
        "expires_at": int(NOW) + 60,
        "read_only": False,
    }
    return Preview(**{**base, **kw})  # type: ignore[arg-type]


def _code(token: str, method: str = "GET", key: bytes = KEY, now: float = NOW) -> str:
    with pytest.raises(Forbidden) as info:
        verify(key, token, method, now=now)
    assert info.value.http_status == 403
    return str(info.value.code)


def test_round_trip_and_methods() -> None:
    token = sign(KEY, _preview())
    assert verify(KEY, token, "post", now=NOW) == _preview()
    ro = sign(KEY, _preview(read_only=True))
    assert verify(KEY, ro, "HEAD", now=NOW).methods == ("GET", "HEAD")
    assert _code(ro, "POST") == "method_not_allowed"
    assert _code(ro, "DELETE") == "method_not_allowed"


def test_expiry_is_exact() -> None:
    token = sign(KEY, _preview(expires_at=int(NOW) + 1))
    verify(KEY, token, "GET", now=NOW + 0.999)
    assert _code(token, now=NOW + 1) == "url_expired"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # signature tampered
        lambda t: "x" + t,  # payload tampered
        lambda t: t.split(".")[0],  # no signature
        lambda t: "." + t.split(".")[1],  # no payload
        lambda t: t + ".extra",
        lambda t: "a" * (MAX_TOKEN_CHARS + 1),
        lambda t: "",
    ],
)
def test_tampered_tokens_are_refused(mangle: object) -> None:
    token = sign(KEY, _preview())
    assert _code(mangle(token)) == "signature_invalid"  # type: ignore[operator]


def test_a_payload_re_pointed_at_another_session_or_port_is_refused() -> None:
    sig = sign(KEY, _preview()).split(".")[1]
    other = sign(KEY, _preview(session="s-other", port=9000)).split(".")[0]
    assert _code(f"{other}.{sig}") == "signature_invalid"


def test_another_key_or_purpose_does_not_verify() -> None:
    token = sign(KEY, _preview())
    assert _code(token, key=b"other" * 8) == "signature_invalid"
    settings = Settings()
    preview, link = port_key(settings, "preview"), port_key(settings, "link")
    assert preview != link and len(preview) == 32
    assert _code(sign(link, _preview()), key=preview) == "signature_invalid"


def test_the_key_follows_the_grid_secret() -> None:
    a = Settings.model_validate({"minio": {"secret_key": "one"}})
    b = Settings.model_validate({"minio": {"secret_key": "two"}})
    c = Settings.model_validate({"minio": {"secret_key": "two"}, "ports": {"secret": "own"}})
    keys = {port_key(s, "preview") for s in (a, b, c)}
    assert len(keys) == 3


def test_the_token_carries_no_credential() -> None:
    token = sign(KEY, _preview())
    body = json.loads(__import__("base64").urlsafe_b64decode(token.split(".")[0] + "=="))
    assert set(body) == {"v", "t", "s", "p", "e", "m", "g"}


def test_epochs_are_signed_and_a_raised_one_revokes() -> None:
    """A token names the session's revocation epochs it was made under (every port's,
    its port's); it holds while the session's are the same, and only then."""
    epochs = {"*": 2, "8000": 5, "9000": 1}
    token = sign(KEY, _preview(epochs=epochs_of(epochs, 8000)))
    made = verify(KEY, token, "GET", now=NOW)
    assert made.epochs == (2, 5)
    check_epochs(made, epochs)
    check_epochs(made, {**epochs, "9000": 2})  # another port's revocation
    for raised in ({**epochs, "8000": 6}, {"*": 3}):
        with pytest.raises(Forbidden) as info:
            check_epochs(made, raised)
        assert info.value.code == "url_revoked" and info.value.http_status == 403
    tampered = sign(KEY, _preview(epochs=(2, 6))).split(".")[0]  # the epochs re-pointed
    assert _code(f"{tampered}.{token.split('.')[1]}") == "signature_invalid"


def test_a_token_made_before_epochs_is_of_epochs_zero() -> None:
    body = {"v": 1, "t": "acme", "s": "s-abc", "p": 8000, "e": int(NOW) + 60, "m": "w"}
    payload = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    mac = hmac.new(KEY, payload.encode(), hashlib.sha256).digest()
    token = payload + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    old = verify(KEY, token, "GET", now=NOW)
    assert old.epochs == (0, 0)
    check_epochs(old, {})
    with pytest.raises(Forbidden):
        check_epochs(old, {"*": 1})


def test_hello_round_trip_and_refusals() -> None:
    hello = Hello("s-abc", 8000, NOW, "n1")
    line = hello.line(KEY)
    assert line.endswith(b"\n")
    assert read_hello(KEY, line.strip(), now=NOW + 1) == hello
    with pytest.raises(ValueError, match="signature"):
        read_hello(b"x" * 32, line.strip(), now=NOW)
    with pytest.raises(ValueError, match="stale"):
        read_hello(KEY, line.strip(), now=NOW + MAX_SKEW_S + 1)
    forged = json.loads(line)
    forged["p"] = 22
    with pytest.raises(ValueError, match="signature"):
        read_hello(KEY, json.dumps(forged).encode(), now=NOW)
    with pytest.raises(ValueError):
        read_hello(KEY, b"x" * 5000, now=NOW)


def test_answers() -> None:
    assert parse_answer(answer_line().strip()) is None
    err = parse_answer(answer_line(PortUnreachable("nothing", operation="ports")).strip())
    assert isinstance(err, PortUnreachable) and err.http_status == 502
    limit = parse_answer(answer_line(LimitExceeded("cap", retry_after=1.0)).strip())
    assert isinstance(limit, LimitExceeded)
    assert parse_answer(b"garbage") is not None
