"""A leader killed under calls in flight, and a lock lost when the member
the client talks to is paused past the lease."""

import http.client
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, Tuple

import raftlock
from tests.cluster import Cluster, wait_until


class _SentSignal(raftlock.Client):
    """A Client that says when a request has been written to a member, and
    when each was."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.sent = threading.Event()
        self.sends: List[float] = []

    def _send(self, conn, path, payload):  # type: ignore[no-untyped-def]
        super()._send(conn, path, payload)
        self.sends.append(time.monotonic())
        self.sent.set()


def _run(target, out: List[object]) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Run target in a thread; out gets its result or its exception."""

    def body() -> None:
        try:
            out.append(target())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


class LeaderKillTest(unittest.TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.stop)
        self.leader = self.cluster.leader()
        self.admin = self.cluster.client()
        self.addCleanup(self.admin.close)

    def test_lock_changing_call_in_flight_is_never_retried(self) -> None:
        holder = self.admin.acquire("kill/job", lease=60)
        c = _SentSignal(self.cluster.urls(), timeout=60)
        self.addCleanup(c.close)
        c.get("kill/job")  # finds the leader
        c.sent.clear()
        sends = len(c.sends)
        out: List[object] = []
        # A waiting acquire sits at the leader, queued behind the holder.
        t = _run(lambda: c.acquire("kill/job", lease=10, wait=30), out)
        self.assertTrue(c.sent.wait(60))
        self.cluster.kill(self.leader)
        t.join(120)
        self.assertEqual(len(out), 1, "the acquire did not return")
        # Resent to the next leader it would have queued again until its
        # wait ran out (Held) or taken the lock: it was sent once.
        self.assertIsInstance(out[0], raftlock.OutcomeUnknown, out[0])
        self.assertEqual(len(c.sends) - sends, 1, "the acquire was sent again")
        # The lock is still the holder's, on the new leader.
        info = self.admin.get("kill/job")
        self.assertEqual((info.held, info.token), (True, holder.token))

    def test_read_in_flight_is_retried(self) -> None:
        holder = self.admin.acquire("kill/read", lease=60)
        # A long timeout: the read waits out an election, however long load
        # makes it; what it does is tested, not how fast.
        c = _SentSignal(self.cluster.urls(), timeout=60)
        self.addCleanup(c.close)
        c.get("kill/read")
        self.assertEqual(c.leader, self.cluster.url(self.leader))
        # The leader stops answering, a read is sent to it, and then it dies.
        self.cluster.pause(self.leader)
        c.sent.clear()
        out: List[object] = []
        t = _run(lambda: c.get("kill/read"), out)
        self.assertTrue(c.sent.wait(60))
        self.cluster.kill(self.leader)
        t.join(120)
        self.assertEqual(len(out), 1, "the read did not return")
        self.assertIsInstance(out[0], raftlock.LockInfo, out[0])
        info = out[0]
        assert isinstance(info, raftlock.LockInfo)
        self.assertEqual((info.held, info.token), (True, holder.token))
        # It found the new leader, and calls go on.
        self.assertNotEqual(c.leader, self.cluster.url(self.leader))
        g = c.acquire("kill/after", lease=5)
        c.release("kill/after", g.token)


    def test_no_leader_is_retried_after_retry_after(self) -> None:
        survivor = self.cluster.followers(self.leader)[0]
        for m in self.cluster.members:
            if m is not survivor:
                self.cluster.kill(m)

        # Until its election timeout the survivor still redirects to the
        # dead leader, and a redirect is followed and retried at once; on a
        # loaded machine that can be the first attempt. Once it knows no
        # leader, every answer is 503 with Retry-After.
        def leaderless() -> bool:
            try:
                with self.cluster.client([survivor], timeout=1.0) as a:
                    return not a.status(timeout=1.0).get("leader")
            except raftlock.RaftlockError:
                return False

        wait_until("the survivor to know no leader", leaderless)
        # Two attempts a second apart fit the timeout even when load makes
        # one take seconds.
        c = _SentSignal([self.cluster.url(survivor)], timeout=4)
        self.addCleanup(c.close)
        start = time.monotonic()
        with self.assertRaises(raftlock.Unavailable) as cm:
            c.get("kill/none")
        elapsed = time.monotonic() - start
        self.assertNotIsInstance(cm.exception, raftlock.OutcomeUnknown)
        self.assertIn("gave up after 4s", cm.exception.message)
        self.assertGreaterEqual(elapsed, 3.9)
        # The survivor answers 503 with Retry-After: 1, and the client
        # waits that long between attempts, not its 10-200 ms backoff.
        sends = c.sends
        self.assertGreaterEqual(len(sends), 2, sends)
        self.assertTrue(all(b - a >= 0.9 for a, b in zip(sends, sends[1:])), sends)


class _Proxy:
    """An HTTP proxy in front of one member's API, as a load balancer is:
    it forwards each call, and answers 502 Bad Gateway in its own words
    when the member's connection breaks before it answered: no answer of
    raftlock's. forwarded is set, and paths grows, as each call goes out."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.forwarded = threading.Event()
        self.paths: List[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                up = http.client.HTTPConnection(host, int(port), timeout=120)
                try:
                    up.request("POST", self.path, body, {"Content-Type": "application/json"})
                    proxy.paths.append(self.path)
                    proxy.forwarded.set()
                    resp = up.getresponse()
                    status, ctype, data = resp.status, resp.getheader("Content-Type", ""), resp.read()
                except (OSError, http.client.HTTPException) as e:
                    status, ctype, data = 502, "text/plain", ("bad gateway: %s\n" % e).encode()
                finally:
                    up.close()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ProxiedLeaderKillTest(unittest.TestCase):
    """The leader, behind a proxy, killed under a call: the client gets the
    proxy's 502, not raftlock's answer. A lock-changing call that got it
    may have applied and is never sent again; a read is."""

    def setUp(self) -> None:
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.stop)
        self.leader = self.cluster.leader()
        self.admin = self.cluster.client()
        self.addCleanup(self.admin.close)
        self.proxy = _Proxy(self.leader.api)
        self.addCleanup(self.proxy.close)
        # The proxy first, then the members behind no proxy. The calls'
        # timeouts are long: what a call does is tested, not how fast.
        self.client = raftlock.Client([self.proxy.url] + self.cluster.urls(self.cluster.followers(self.leader)), timeout=60)
        self.addCleanup(self.client.close)

    def call_while_the_leader_dies(self, call: Callable[[], object]) -> object:
        """Run call, kill the leader once the proxy forwarded it, and return
        what it returned or raised."""
        self.proxy.forwarded.clear()
        out: List[object] = []
        t = _run(call, out)
        self.assertTrue(self.proxy.forwarded.wait(60), "the call never reached the proxy")
        self.cluster.kill(self.leader)
        t.join(120)
        self.assertEqual(len(out), 1, "the call did not return")
        return out[0]

    def test_lock_changing_call_is_outcome_unknown(self) -> None:
        holder = self.admin.acquire("proxy/job", lease=60)
        c = self.client
        self.assertTrue(c.get("proxy/job").held)
        self.assertEqual(c.leader, self.proxy.url)
        # A waiting acquire sits at the leader, queued behind the holder.
        got = self.call_while_the_leader_dies(lambda: c.acquire("proxy/job", lease=10, wait=30))
        self.assertIsInstance(got, raftlock.OutcomeUnknown, got)
        assert isinstance(got, raftlock.OutcomeUnknown)
        self.assertEqual(got.status, 502)
        # Sent once, to the proxy: sent again to the next leader, it would
        # have queued there until its wait ran out (Held).
        self.assertEqual(self.proxy.paths, ["/v1/get", "/v1/acquire"])
        info = self.admin.get("proxy/job")
        self.assertEqual((info.held, info.token), (True, holder.token))

    def test_read_is_sent_again(self) -> None:
        holder = self.admin.acquire("proxy/read", lease=60)
        c = self.client
        c.get("proxy/read")
        self.assertEqual(c.leader, self.proxy.url)
        # The leader stops answering, a read goes to it through the proxy,
        # and then it dies: the proxy answers 502.
        self.cluster.pause(self.leader)
        got = self.call_while_the_leader_dies(lambda: c.get("proxy/read"))
        self.assertIsInstance(got, raftlock.LockInfo, got)
        assert isinstance(got, raftlock.LockInfo)
        self.assertEqual((got.held, got.token), (True, holder.token))
        self.assertNotEqual(c.leader, self.proxy.url)


class LostTest(unittest.TestCase):
    """A lock whose renewals stop getting through is lost once its lease
    has run out on the client's clock.

    The lease leaves a renewal room on a loaded machine (one of 0.9 s ran
    out there before the cut). The loss must come within a renewal period
    (a third of the lease) of the lease's end: later, the client would
    trust a lock the cluster may have expired by more than load explains
    (beside two CPU hogs the renewing thread woke half a second late)."""

    LEASE = 3.0
    SLACK = LEASE / 3

    def setUp(self) -> None:
        self.cluster = Cluster(1)
        self.addCleanup(self.cluster.stop)
        self.member = self.cluster.leader()
        self.client = self.cluster.client(timeout=5)
        self.addCleanup(self.client.close)

    def hold_until_cut_off(self, cut_off: Callable[[], None]) -> Tuple[float, raftlock.Lock]:
        """Hold a lock, cut_off() its renewals once one went through, and
        return how long after that the lock was lost, and the lock."""
        c, lease = self.client, self.LEASE
        start = time.monotonic()
        with c.lock("lost/job", lease=lease) as lk:
            # A renewal goes through first: more of the lease is left than
            # the acquire alone would leave.
            wait_until("a renewal", lambda: c.get("lost/job").remaining > lease - (time.monotonic() - start) + 0.1, timeout=60)
            self.assertFalse(lk.lost.is_set())
            cut_at = time.monotonic()
            cut_off()
            self.assertTrue(lk.lost.wait(lease * 3), "lost not set while renewals were cut off")
            lost_after = time.monotonic() - cut_at
        self.assertIn("lease ran out", str(lk.lost_reason))
        return lost_after, lk

    def test_lock_lost_when_the_member_is_paused_past_the_lease(self) -> None:
        def pause() -> None:
            self.cluster.pause(self.member)
            self.addCleanup(self.cluster.resume, self.member)

        lost_after, _ = self.hold_until_cut_off(pause)
        # Within a lease of the pause: the lease counts from the start of
        # the last good renewal, which came before it.
        self.assertLessEqual(lost_after, self.LEASE + self.SLACK)

    def test_lock_lost_when_the_member_is_gone(self) -> None:
        # Renewals now fail at once (the connection is refused): the lock
        # is lost when the lease runs out, not at a later tick.
        lost_after, _ = self.hold_until_cut_off(lambda: self.cluster.kill(self.member))
        self.assertLessEqual(lost_after, self.LEASE + self.SLACK)


if __name__ == "__main__":
    unittest.main()


class WatchResumeTest(unittest.TestCase):
    """A watch whose member is killed resumes at another member, after
    the last event it gave: every event once, in order."""

    def setUp(self) -> None:
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.stop)
        self.leader = self.cluster.leader()
        self.admin = self.cluster.client()
        self.addCleanup(self.admin.close)

    def test_watch_resumes_where_its_member_died(self) -> None:
        follower = self.cluster.followers(self.leader)[0]
        # The follower first, so the watch starts there.
        c = self.cluster.client([follower] + [m for m in self.cluster.members if m is not follower])
        self.addCleanup(c.close)
        w = c.watch("r/", endpoint=self.cluster.url(follower))
        self.addCleanup(w.close)
        got: List[object] = []
        reader = _run(lambda: [got.append(ev) for ev in w], [])
        tokens = [self.admin.acquire("r/%d" % i, lease=60).token for i in range(3)]
        wait_until("the first events", lambda: len(got) >= 3, 30)
        self.cluster.kill(follower)
        tokens += [self.admin.acquire("r/%d" % i, lease=60).token for i in range(3, 6)]
        wait_until("the events after the kill", lambda: len(got) >= 6, 60)
        time.sleep(0.2)  # room for a duplicate to show
        self.assertEqual([ev.token for ev in got], tokens, "every event once, in order")  # type: ignore[attr-defined]
        self.assertIsNone(w.error)
        w.close()
        reader.join(10)

    def test_watch_after_a_revision_replays_what_followed(self) -> None:
        with self.admin.watch("a/") as w:
            self.admin.acquire("a/0", lease=60)
            first = next(iter(w))
        later = [self.admin.acquire("a/%d" % i, lease=60).token for i in (1, 2)]
        with self.admin.watch("a/", after=first.revision) as w:
            it = iter(w)
            self.assertEqual([next(it).token, next(it).token], later)
