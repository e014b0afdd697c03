"""`retrain.io.http`, the bounded request every HTTP client of retrain's goes through, against
servers on 127.0.0.1: its deadline covers the status line and headers as well as the body, a
redirect keeps the caller's headers only on the same origin, a body cut short or a refused
connection is one failure naming the URL, and `check_url` says what is wrong with a URL."""

from __future__ import annotations

import io
import socket
import time

import pytest
from faulty_http import FaultyServer

from retrain.io.http import DeadlineExceeded, HttpFailure, ReplyTooLarge, check_url, request


def test_the_deadline_covers_a_dripped_head() -> None:
    with FaultyServer("drip_head", drip_s=0.2) as server:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceeded, match=f"no complete reply from {server.url}/x within 1 s"):
            request("GET", server.url + "/x", deadline_s=1.0, max_bytes=1 << 20)
    assert time.monotonic() - t0 < 10.0  # the head alone takes ~90 s


def test_a_same_origin_redirect_keeps_headers_another_origin_drops_them() -> None:
    with FaultyServer("ok", body=b"bytes") as other, FaultyServer("ok", body=b"here") as home:
        with FaultyServer("redirect", location=other.url + "/far") as away:
            reply = request("GET", away.url + "/a", headers={"Authorization": "Bearer k", "Accept": "*/*"},
                            deadline_s=5, max_bytes=100, max_redirects=2)
            assert reply.body == b"bytes" and reply.url == other.url + "/far"
            (far,) = other.requests
            assert "Authorization" not in far[2] and far[2]["Accept"] == "*/*"
        with FaultyServer("redirect", body=b"near") as near:
            near.location = near.url + "/near"
            reply = request("GET", near.url + "/a", headers={"Authorization": "Bearer k"}, deadline_s=5,
                            max_bytes=100, max_redirects=1)
            assert reply.body == b"near" and [r[2].get("Authorization") for r in near.requests] == ["Bearer k"] * 2
        with FaultyServer("redirect", location=home.url + "/b") as hop:
            reply = request("GET", hop.url, deadline_s=5, max_bytes=100)  # redirects not asked for
            assert reply.status == 302 and reply.header("Location") == home.url + "/b"


def test_the_body_goes_to_a_file_under_the_cap() -> None:
    with FaultyServer("ok", body=b"x" * 5000) as server:
        sink = io.BytesIO()
        reply = request("GET", server.url, deadline_s=5, max_bytes=5000, into=sink)
        assert reply.body == b"" and reply.size == 5000 and sink.getvalue() == b"x" * 5000
        with pytest.raises(ReplyTooLarge, match="larger than 4999 bytes"):
            request("GET", server.url, deadline_s=5, max_bytes=4999)


def test_a_body_cut_short_is_a_failure_not_a_reply() -> None:
    with FaultyServer("short", body=b"y" * 1000) as server, \
            pytest.raises(HttpFailure, match="closed the connection in the middle of its reply"):
        request("GET", server.url, deadline_s=5, max_bytes=5000)


def test_a_refused_connection_and_a_bad_port_name_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(HttpFailure, match=f"^{url}: connection refused$"):
        request("GET", url, deadline_s=5, max_bytes=100)
    with pytest.raises(HttpFailure, match="not a valid URL"):
        request("GET", "http://127.0.0.1:99999/v1", deadline_s=5, max_bytes=100)


@pytest.mark.parametrize(("url", "why"), [
    ("http://127.0.0.1:8000/v1", None),
    ("https://api.openai.com/v1", None),
    ("http://[::1]:8000", None),
    ("http://localhost:99999/v1", "has a port that is not a number from 1 to 65535"),
    ("http://localhost:0/v1", "has port 0, which no server listens on"),
    ("http://localhost:http/v1", "has a port that is not a number from 1 to 65535"),
    ("ftp://host/v1", "must be an http:// or https:// URL"),
    ("http:///v1", "names no host"),
    ("http://host name/v1", "is not a URL (it is empty or holds whitespace)"),
    ("127.0.0.1:8000", "must be an http:// or https:// URL"),
])
def test_check_url(url: str, why: str | None) -> None:
    assert check_url(url) == why
