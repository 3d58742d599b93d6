"""open_store's failures, offline: one line, a library error, the fix named, no secret shown.

The server is faked at the HTTP layer (``httpx.MockTransport``): what is checked here is what
open_store sends and says, before any real server answers. The real server, a credential-
checking proxy and IPv6 loopback are in ``tests/stores/test_open_store_servers.py``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from window_retriever import ConfigurationError, StoreError, open_store
from window_retriever.cli._parser import main
from window_retriever.stores._address import _address, _public

PASSWORD = "hunter2"  # noqa: S105 - a test's password
TOKEN = "s3cret-token"  # noqa: S105 - a test's token
ENV_URL, ENV_TOKEN = "WINDOW_RETRIEVER_CHROMA_URL", "WINDOW_RETRIEVER_CHROMA_TOKEN"


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message and "\r" not in message
    return message


def refused(kind: type[Exception] = ConfigurationError, **kwargs: Any) -> str:
    """open_store's message for ``kwargs``, which must fail with ``kind`` and show no secret."""
    kwargs.setdefault("environ", {})
    with pytest.raises(kind) as raised:
        open_store(**kwargs)
    assert type(raised.value) is kind  # not a library's exception, nor a subclass of ours
    message = one_line(raised.value)
    for secret in (PASSWORD, TOKEN, "hun/ter2", "hun#ter2", "hun?ter2"):
        assert secret not in message
    return message


Requests = list[httpx.Request]


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Requests]:
    """Answer open_store's probe with ``handler`` (no network); return the requests it sent."""

    real = httpx.Client

    def install(handler: Callable[[httpx.Request], httpx.Response]) -> Requests:
        seen: Requests = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return handler(request)

        def client(**kwargs: Any) -> httpx.Client:
            return real(transport=httpx.MockTransport(record), **kwargs)

        monkeypatch.setattr(httpx, "Client", client)
        return seen

    return install


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


# ---- secrets --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown", "fix"),
    [
        ("http://ann:hunter2@127.0.0.1:80x0", "http://ann:***@127.0.0.1:80x0", "a PORT from 1"),
        ("http://ann:hunter2@127.0.0.1:99999", "http://ann:***@127.0.0.1:99999", "a PORT from 1"),
        ("http://ann:hunter2@127.0.0.1:0", "http://ann:***@127.0.0.1:0", "a PORT from 1"),
        ("htpp://ann:hunter2@127.0.0.1:8000", "htpp://ann:***@127.0.0.1:8000", "http://HOST:PORT"),
        ("ann:hunter2@127.0.0.1:8000", "ann:***@127.0.0.1:8000", "http://HOST:PORT"),
        ("http://ann:hunter2@[::1:8000", "http://ann:***@[::1:8000", "http://HOST:PORT"),
        ("http://ann:hun/ter2@127.0.0.1:8000", "http://ann:***@127.0.0.1:8000", "percent-encode"),
        ("http://ann:hun#ter2@127.0.0.1:8000", "http://ann:***@127.0.0.1:8000", "percent-encode"),
        ("http://ann:hun?ter2@127.0.0.1:8000", "http://ann:***@127.0.0.1:8000", "percent-encode"),
        ("http://ann:123/hunter2@10.0.0.1:8000", "http://ann:***@10.0.0.1:8000", "percent-encode"),
        ("http://hunter2@127.0.0.1:80x0", "http://***@127.0.0.1:80x0", "a PORT from 1"),
    ],
)
def test_a_malformed_url_is_shown_without_its_password(url: str, shown: str, fix: str) -> None:
    message = refused(url=url)
    assert message.startswith("url must look like http://")
    assert repr(shown) in message and fix in message


def test_the_variable_is_named_when_the_url_came_from_it() -> None:
    message = refused(environ={ENV_URL: "http://ann:hunter2@127.0.0.1:80x0"})
    assert message.startswith(f"{ENV_URL} must look like http://HOST:PORT")


@pytest.mark.parametrize(
    ("token", "flaw"),
    [
        (f"{TOKEN}\r", "a line break"),
        (f"{TOKEN}\n", "a line break"),
        (f"{TOKEN} ", "a space"),
        (f" {TOKEN}", "a space"),
        (f"{TOKEN}\x00", "a control character"),
        (f"{TOKEN}é", "a non-ASCII character"),
    ],
)
def test_a_token_no_header_can_carry_is_refused_before_anything_is_sent(
    token: str, flaw: str, fake_server: Callable[..., Requests]
) -> None:
    sent = fake_server(unreachable)
    message = refused(url="http://127.0.0.1:8000", token=token)
    assert message == f"token holds {flaw}, which no token has; set it to the token alone"
    message = refused(url="http://127.0.0.1:8000", environ={ENV_TOKEN: token})
    assert message.startswith(f"{ENV_TOKEN} holds {flaw}")
    assert sent == []


@pytest.mark.parametrize("password", ["hunter2%0D", "hunter2%0A", "hun%00ter2"])
def test_a_password_with_a_control_character_is_refused(password: str) -> None:
    message = refused(url=f"http://ann:{password}@127.0.0.1:8000")
    assert message == (
        "the user:password in url holds a control character (a line break?); remove it"
    )


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000\r", "http://127.0.0.1:8000\n", " http://h"])
def test_a_url_with_a_line_break_or_space_is_refused(url: str) -> None:
    assert refused(environ={ENV_URL: url}) == (
        f"{ENV_URL} holds a space, a line break or a control character; remove it"
    )


def test_a_header_no_request_can_carry_is_refused_by_name() -> None:
    message = refused(url="http://127.0.0.1:8000", headers={"X-Key": f"{TOKEN}\r"})
    assert message == "the header 'X-Key' in headers holds a line break; fix it"


def test_a_non_ascii_password_is_sent_as_utf8_basic_auth(
    fake_server: Callable[..., Requests],
) -> None:
    sent = fake_server(unreachable)
    refused(StoreError, url="http://ann:h%C3%BCnter2@127.0.0.1:8000")
    expected = "Basic " + base64.b64encode("ann:hünter2".encode()).decode()
    assert sent[0].headers["Authorization"] == expected


def test_the_last_guard_hides_the_token_and_the_password_whatever_the_message(
    fake_server: Callable[..., Requests],
) -> None:
    def echo(request: httpx.Request) -> httpx.Response:  # a server that echoes credentials
        return httpx.Response(500, text=f"bad header {request.headers['Authorization']!r}")

    fake_server(echo)
    message = refused(StoreError, url="http://127.0.0.1:8000", token=TOKEN)
    assert "bad header '***'" in message
    message = refused(StoreError, url=f"http://ann:{PASSWORD}@127.0.0.1:8000")
    basic = base64.b64encode(f"ann:{PASSWORD}".encode()).decode()
    assert basic not in message and "bad header 'Basic ***'" in message

    def decode(request: httpx.Request) -> httpx.Response:  # one that echoes them decoded
        pair = base64.b64decode(request.headers["Authorization"].removeprefix("Basic "))
        return httpx.Response(500, text=f"no user:password {pair.decode()}")

    fake_server(decode)
    message = refused(StoreError, url=f"http://ann:{PASSWORD}@127.0.0.1:8000")
    assert "(no user:password ann:***)" in message


def test_the_last_guard_does_not_mangle_words_that_hold_a_short_token() -> None:
    message = refused(url="http://ann:pw@127.0.0.1:8000", environ={ENV_TOKEN: "t"})
    assert message == f"{ENV_TOKEN} and a user:password in url both give credentials; keep one"
    message = refused(url="http://ann:pw@127.0.0.1:8000", token="t")  # noqa: S106
    assert message.startswith("token and a user:password in url both give credentials")


@settings(max_examples=300, deadline=None)
@given(
    user=st.text(st.characters(blacklist_characters="@:/?#[]"), max_size=8),
    password=st.text(min_size=1, max_size=24),
    address=st.sampled_from(["127.0.0.1:8000", "[::1]:80x0", "h:99999/x?y#z", "host"]),
)
def test_public_never_shows_what_stands_before_the_last_at(
    user: str, password: str, address: str
) -> None:
    url = f"http://{user}:{password}@{address}"
    shown = _public(url)
    head = address.split("?")[0].split("#")[0]
    assert shown.endswith(f"***@{head}")
    assert shown.removesuffix(f"***@{head}") in ("http://", f"http://{user}:")


# ---- IPv6, the port tried, a query ------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "base", "shown"),
    [
        ("http://[::1]:8123", "http://[::1]:8123", "http://[::1]:8123"),
        ("http://ann:pw@[::1]:8123/", "http://[::1]:8123", "http://ann:***@[::1]:8123/"),
        ("https://[2001:db8::7]", "https://[2001:db8::7]:443", "https://[2001:db8::7]"),
        ("http://127.0.0.1", "http://127.0.0.1:8000", "http://127.0.0.1"),
    ],
)
def test_an_ipv6_host_keeps_its_brackets(url: str, base: str, shown: str) -> None:
    address = _address(url, "url")
    assert (address.base, address.shown) == (base, shown)


def test_an_ipv6_server_is_asked_and_opened_in_brackets(
    fake_server: Callable[..., Requests], monkeypatch: pytest.MonkeyPatch
) -> None:
    import chromadb

    sent = fake_server(lambda request: httpx.Response(200, json={}))
    given: dict[str, Any] = {}

    def http_client(**kwargs: Any) -> Any:
        given.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(chromadb, "HttpClient", http_client)
    message = refused(StoreError, url="http://[::1]:8123")
    assert message == "the Chroma server at http://[::1]:8123 failed: stop here"
    assert str(sent[0].url) == "http://[::1]:8123/api/v2/auth/identity"
    assert (given["host"], given["port"]) == ("[::1]", 8123)


@pytest.mark.parametrize(("scheme", "port"), [("http", 8000), ("https", 443)])
def test_unreachable_without_a_port_names_the_port_tried(
    scheme: str, port: int, fake_server: Callable[..., Requests]
) -> None:
    sent = fake_server(unreachable)
    message = refused(StoreError, url=f"{scheme}://db.example")
    assert message.startswith(
        f"cannot reach the Chroma server at {scheme}://db.example on its default port {port} "
        "([Errno 111] Connection refused); start one with 'chroma run"
    )
    assert message.endswith(", or check url")
    assert sent[0].url == httpx.URL(f"{scheme}://db.example:{port}/api/v2/auth/identity")
    message = refused(StoreError, url=f"{scheme}://db.example:{port}")
    assert "default port" not in message


@pytest.mark.parametrize("host", ["a..b", "a" * 64, ".example"])
def test_a_host_that_cannot_be_looked_up_is_a_url_error_not_a_header_error(host: str) -> None:
    message = refused(url=f"http://ann:hunter2@{host}:8000")
    assert message == (
        "url has a host name that cannot be looked up (an empty or over-long label), "
        f"got 'http://ann:***@{host}:8000'"
    )


@pytest.mark.parametrize(
    ("raised", "message"),
    [
        (UnicodeError("label empty or too long"), "url is not a URL HTTP can reach, got"),
        (httpx.InvalidURL("Invalid port"), "url is not a URL HTTP can reach, got"),
        (httpx.LocalProtocolError("Illegal header value"), "a header is not valid HTTP"),
        (UnicodeEncodeError("ascii", "é", 0, 1, "no"), "a header is not valid HTTP"),
    ],
)
def test_what_httpx_cannot_send_is_told_apart_from_an_unreachable_server(
    raised: Exception, message: str, fake_server: Callable[..., Requests]
) -> None:
    """The probe's last guard, behind the checks of the URL and the headers."""

    def fail(request: httpx.Request) -> httpx.Response:
        raise raised

    fake_server(fail)
    assert refused(url="http://127.0.0.1:8000").startswith(message)


@pytest.mark.parametrize("url", ["http://h:1/?tenant=x", "http://h:1#db", "http://h:1/?token=abc"])
def test_a_query_or_fragment_is_refused(url: str) -> None:
    message = refused(url=url)
    assert message == (
        "url cannot have a query ('?...') or a fragment ('#...'): nothing is read from them; "
        "pass tenant= and database="
    )


# ---- the timeout --------------------------------------------------------------------------------

ENV_TIMEOUT = "WINDOW_RETRIEVER_CHROMA_TIMEOUT"


def no_answer(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "30"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(timeout: Any) -> None:
    message = refused(url="http://127.0.0.1:8000", timeout=timeout)
    assert message == f"timeout must be a positive number of seconds, e.g. 30, got {timeout!r}"


def test_the_timeout_variable_is_named_when_it_is_wrong() -> None:
    message = refused(url="http://127.0.0.1:8000", environ={ENV_TIMEOUT: "soon"})
    assert message == f"{ENV_TIMEOUT} must be a number of seconds, e.g. 30, got 'soon'"
    message = refused(url="http://127.0.0.1:8000", environ={ENV_TIMEOUT: "0"})
    assert message == f"{ENV_TIMEOUT} must be a positive number of seconds, e.g. 30, got 0.0"


@pytest.mark.parametrize(
    ("options", "read", "connect"),
    [({}, 30.0, 5.0), ({"timeout": 2.5}, 2.5, 2.5), ({"environ": {ENV_TIMEOUT: "60"}}, 60.0, 5.0)],
)
def test_the_server_is_waited_for_as_long_as_the_timeout_says(
    fake_server: Callable[..., Requests], options: dict[str, Any], read: float, connect: float
) -> None:
    sent = fake_server(no_answer)
    message = refused(StoreError, url="http://127.0.0.1:8000", **options)
    assert message == (
        f"the Chroma server at http://127.0.0.1:8000 did not answer within {read:g} s; check "
        f"that it is running and not overloaded, or raise timeout ({ENV_TIMEOUT})"
    )
    waits = {"connect": connect, "read": read, "write": read, "pool": read}
    assert sent[0].extensions["timeout"] == waits


# ---- the command line ---------------------------------------------------------------------------


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """Run the CLI with only ``env`` of the store's variables set; return its one error line."""
    for name in ("DB", "CHROMA_URL", "CHROMA_TOKEN", "CHROMA_TOKEN_HEADER", "CHROMA_TIMEOUT"):
        monkeypatch.delenv(f"WINDOW_RETRIEVER_{name}", raising=False)
    monkeypatch.delenv("WINDOW_RETRIEVER_CHROMA_DATABASE", raising=False)
    monkeypatch.delenv("WINDOW_RETRIEVER_CHROMA_TENANT", raising=False)

    def run(argv: list[str], **env: str) -> str:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert PASSWORD not in err and TOKEN not in err
        for name in env:
            monkeypatch.delenv(name)
        return err.removeprefix("window-retriever: error: ").rstrip("\n")

    return run


def test_the_cli_names_the_variable_or_the_flag_the_url_came_from(
    cli: Callable[..., str], fake_server: Callable[..., Requests]
) -> None:
    bad = "http://ann:hunter2@127.0.0.1:1873l"
    line = cli(["query", "q"], WINDOW_RETRIEVER_CHROMA_URL=bad)
    assert line.startswith(f"{ENV_URL} must look like http://HOST:PORT, a PORT from 1 to 65535")
    assert "--chroma-url" not in line
    line = cli(["query", "q", "--chroma-url", bad])
    assert line.startswith("--chroma-url must look like http://HOST:PORT")
    assert "'http://ann:***@127.0.0.1:1873l'" in line

    fake_server(unreachable)
    line = cli(["query", "q"], WINDOW_RETRIEVER_CHROMA_URL="http://127.0.0.1")
    assert line.endswith(f", or check {ENV_URL}") and "on its default port 8000" in line
    line = cli(["query", "q", "--chroma-url", "http://127.0.0.1:8123"])
    assert line.endswith(", or check --chroma-url")


def test_the_cli_names_the_token_variable_and_the_url_source(cli: Callable[..., str]) -> None:
    url = "http://ann:hunter2@127.0.0.1:8000"
    line = cli(["query", "q"], **{ENV_URL: url, ENV_TOKEN: "t"})
    assert line == f"{ENV_TOKEN} and a user:password in {ENV_URL} both give credentials; keep one"
    line = cli(["query", "q", "--chroma-url", url], **{ENV_TOKEN: "t"})
    assert (
        line == f"{ENV_TOKEN} and a user:password in --chroma-url both give credentials; keep one"
    )
    line = cli(["query", "q"], **{ENV_URL: "http://127.0.0.1:8000", ENV_TOKEN: f"{TOKEN}\r"})
    assert line == f"{ENV_TOKEN} holds a line break, which no token has; set it to the token alone"


def test_the_cli_takes_the_timeout_and_names_its_flag(
    cli: Callable[..., str], fake_server: Callable[..., Requests]
) -> None:
    sent = fake_server(no_answer)
    line = cli(["query", "q", "--chroma-url", "http://127.0.0.1:8000", "--chroma-timeout", "2"])
    assert line == (
        "the Chroma server at http://127.0.0.1:8000 did not answer within 2 s; check that it is "
        f"running and not overloaded, or raise --chroma-timeout ({ENV_TIMEOUT})"
    )
    assert sent[0].extensions["timeout"]["read"] == 2
    line = cli(["query", "q", "--chroma-url", "http://127.0.0.1:8000", "--chroma-timeout", "0"])
    assert line == "--chroma-timeout must be a positive number of seconds, e.g. 30, got 0.0"


def test_the_cli_says_which_options_replace_a_query(cli: Callable[..., str]) -> None:
    line = cli(["query", "q", "--chroma-url", "http://127.0.0.1:8000/?tenant=acme"])
    assert line == (
        "--chroma-url cannot have a query ('?...') or a fragment ('#...'): nothing is read "
        "from them; pass --chroma-tenant and --chroma-database"
    )
