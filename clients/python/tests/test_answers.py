"""Which failed answers the client retries, against a stand-in member:
only raftlock's own 503 says that nothing was proposed. An answer without
raftlock's JSON error body (a proxy's 502, 503 or 504) is no answer: a
lock-changing call that got one may have applied, and is never sent
again; a read is."""

import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, Tuple

import raftlock

# How the stand-in fails a request: (status, content type, body), or None
# to close the connection without an answer.
Failure = Tuple[int, str, bytes]

_OK = {
    "/v1/acquire": {"key": "k", "token": 5, "lease_ms": 1000},
    "/v1/renew": {"key": "k", "token": 5, "lease_ms": 1000},
    "/v1/release": {"key": "k", "token": 5, "released": True},
    "/v1/get": {"key": "k", "held": False, "token": 0, "remaining_ms": 0},
}


class _Member:
    """A stand-in member on a loopback port: it fails the first request
    (fail) and answers every later one with success; requests counts them."""

    def __init__(self, fail: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.requests: List[str] = []
        member = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                member.requests.append(self.path)
                if len(member.requests) == 1:
                    fail(self)
                    return
                answer(self, 200, "application/json", json.dumps(_OK[self.path]).encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def answer(h: BaseHTTPRequestHandler, status: int, ctype: str, body: bytes) -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def failing(status: int, ctype: str, body: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    return lambda h: answer(h, status, ctype, body)


def hang_up(h: BaseHTTPRequestHandler) -> None:
    """Close the connection without an answer: the request arrived."""
    h.close_connection = True
    h.connection.close()


# Answers that are not raftlock's: nothing says what became of the request.
NOT_RAFTLOCKS = {
    "a broken connection": hang_up,
    "a proxy's 502": failing(502, "text/plain", b"upstream connection reset\n"),
    "a proxy's 503": failing(503, "text/html", b"<html><body>no healthy upstream</body></html>"),
    "a proxy's 504": failing(504, "text/plain", b"upstream timed out\n"),
    "a 503 whose JSON is not raftlock's": failing(503, "application/json", b'{"code":503,"reason":"draining"}'),
    "a 200 without JSON": failing(200, "text/html", b"<html>captive portal</html>"),
}


class AnswersTest(unittest.TestCase):
    def member(self, fail: Callable[[BaseHTTPRequestHandler], None]) -> _Member:
        m = _Member(fail)
        self.addCleanup(m.close)
        return m

    def client(self, m: _Member) -> raftlock.Client:
        c = raftlock.Client([m.url], timeout=30)
        self.addCleanup(c.close)
        return c

    def test_a_lock_change_without_raftlocks_answer_is_outcome_unknown(self) -> None:
        calls = {
            "acquire": lambda c: c.acquire("k", lease=1),
            "renew": lambda c: c.renew("k", 5, lease=1),
            "release": lambda c: c.release("k", 5),
        }
        for what, fail in NOT_RAFTLOCKS.items():
            for name, call in calls.items():
                with self.subTest(answer=what, call=name):
                    m = self.member(fail)
                    with self.assertRaises(raftlock.OutcomeUnknown) as cm:
                        call(self.client(m))
                    self.assertEqual(len(m.requests), 1, "a lock change whose outcome is unknown was sent again")
                    if fail is not hang_up:
                        self.assertIn("without raftlock's answer", cm.exception.message)

    def test_a_read_without_raftlocks_answer_is_sent_again(self) -> None:
        for what, fail in NOT_RAFTLOCKS.items():
            with self.subTest(answer=what):
                m = self.member(fail)
                info = self.client(m).get("k")
                self.assertFalse(info.held)
                self.assertEqual(m.requests, ["/v1/get", "/v1/get"])

    def test_raftlocks_503_is_sent_again(self) -> None:
        for name in ("unavailable", "overloaded"):
            with self.subTest(error=name):
                body = json.dumps({"error": name, "message": "nothing was proposed"}).encode()
                m = self.member(failing(503, "application/json", body))
                g = self.client(m).acquire("k", lease=1)
                self.assertEqual(g.token, 5)
                self.assertEqual(m.requests, ["/v1/acquire", "/v1/acquire"])


if __name__ == "__main__":
    unittest.main()
