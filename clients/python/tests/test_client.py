"""The calls and their errors against a running three-member cluster,
and redirects from a follower."""

import json
import threading
import time
import unittest
from typing import List

import raftlock
from tests.cluster import ClusterTest, wait_until


class CallsTest(ClusterTest):
    def setUp(self) -> None:
        self.client = self.cluster.client()
        self.addCleanup(self.client.close)

    def test_acquire_get_renew_release(self) -> None:
        c = self.client
        g = c.acquire("calls/a", lease=30, owner="py-test")
        self.assertEqual(g.key, "calls/a")
        self.assertGreater(g.token, 0)
        self.assertEqual(g.lease, 30.0)
        info = c.get("calls/a")
        self.assertTrue(info.held)
        self.assertEqual(info.token, g.token)
        self.assertEqual(info.owner, "py-test")
        self.assertTrue(0 < info.remaining <= 30)
        r = c.renew("calls/a", g.token, lease=60)
        self.assertEqual((r.token, r.lease), (g.token, 60.0))
        self.assertGreater(c.get("calls/a").remaining, 30)
        c.release("calls/a", g.token)
        info = c.get("calls/a")
        self.assertEqual((info.held, info.token, info.remaining, info.owner), (False, 0, 0.0, None))
        # The next grant's token is higher.
        g2 = c.acquire("calls/a", lease=1)
        self.assertGreater(g2.token, g.token)
        c.release("calls/a", g2.token)

    def test_errors(self) -> None:
        c = self.client
        g = c.acquire("calls/held", lease=30)
        with self.assertRaises(raftlock.Held) as cm:
            c.acquire("calls/held", lease=30)
        self.assertEqual((cm.exception.name, cm.exception.status), ("held", 409))
        start = time.monotonic()
        with self.assertRaises(raftlock.Held):
            c.acquire("calls/held", lease=30, wait=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.3)
        with self.assertRaises(raftlock.NotHolder) as nh:
            c.release("calls/held", g.token + 100)
        self.assertEqual((nh.exception.name, nh.exception.status), ("not-found", 404))
        with self.assertRaises(raftlock.NotHolder):
            c.renew("calls/held", g.token + 100, lease=30)
        c.release("calls/held", g.token)
        with self.assertRaises(raftlock.NotHolder):
            c.release("calls/held", g.token)
        # Arguments that can never succeed fail before anything is sent.
        for call in (
            lambda: c.acquire("", lease=1),
            lambda: c.acquire("x" * 257, lease=1),
            lambda: c.acquire("k", lease=0.005),
            lambda: c.acquire("k", lease=3601),
            lambda: c.acquire("k", lease=1, owner="o" * 129),
            lambda: c.list(limit=1001),
        ):
            with self.assertRaises(raftlock.InvalidArgument):
                call()
        # And the member's own 400 maps to the same exception.
        with self.assertRaises(raftlock.InvalidArgument) as ia:
            c._call("/v1/acquire", {"key": "k", "lease_ms": 5}, idempotent=False, timeout=None)
        self.assertEqual((ia.exception.name, ia.exception.status), ("invalid-argument", 400))
        self.assertIn("lease must be 10ms..1h", ia.exception.message)

    def test_key_rule(self) -> None:
        """A new key is 1..256 bytes of UTF-8 without NUL: the client refuses
        one that is not before sending it, with the member's message, and
        the member refuses it alike when a caller sends it anyway (json.dumps
        writes a lone surrogate as an escape, which the member would
        otherwise read as U+FFFD)."""
        c = self.client
        rule = "key must be valid UTF-8 without NUL"
        for key in ("u8/\udcff\udcfe", "a\0b", "\ud800"):
            with self.assertRaises(raftlock.InvalidArgument) as cm:
                c.acquire(key, lease=1)
            self.assertEqual((cm.exception.name, cm.exception.message), ("invalid-argument", rule))
            with self.assertRaises(raftlock.InvalidArgument) as cm:
                c._call("/v1/acquire", {"key": key, "lease_ms": 1000}, idempotent=False, timeout=None)
            self.assertEqual((cm.exception.status, cm.exception.message), (400, rule))
        with self.assertRaises(raftlock.InvalidArgument) as cm:
            c.acquire("k", lease=1, owner="ci-\udcff")
        self.assertEqual(cm.exception.message, "owner must be valid UTF-8")
        # A key that is text, U+FFFD included, is a key like any other.
        g = c.acquire("calls/\ufffd", lease=30)
        self.assertEqual(c.get("calls/\ufffd").token, g.token)
        c.release("calls/\ufffd", g.token)

    def test_waiting_acquire_gets_the_lock_when_released(self) -> None:
        c = self.client
        g = c.acquire("calls/queue", lease=30)
        got = []
        t = threading.Thread(target=lambda: got.append(c.acquire("calls/queue", lease=5, wait=20)))
        t.start()
        # Whether the waiter queued before the release or came after it,
        # it gets the lock.
        wait_until("the waiter to start", t.is_alive, timeout=5)
        c.release("calls/queue", g.token)
        t.join(20)
        self.assertEqual(len(got), 1)
        self.assertGreater(got[0].token, g.token)
        c.release("calls/queue", got[0].token)

    def test_list_pages(self) -> None:
        c = self.client
        keys = ["list/%02d" % i for i in range(7)]
        grants = {k: c.acquire(k, lease=30, owner="lister") for k in keys}
        page = c.list(prefix="list/", limit=3)
        self.assertEqual([l.key for l in page.locks], keys[:3])
        self.assertTrue(page.more)
        self.assertEqual(page.next, keys[2])
        self.assertEqual(page.locks[0].token, grants[keys[0]].token)
        self.assertEqual(page.locks[0].owner, "lister")
        page2 = c.list(prefix="list/", limit=3, after=page.next)
        self.assertEqual([l.key for l in page2.locks], keys[3:6])
        self.assertEqual([l.key for l in c.list_all(prefix="list/", page_size=2)], keys)
        self.assertEqual([l.key for l in c.list_all(prefix="list/0")], keys)
        self.assertEqual(c.list(prefix="nothing/").locks, [])
        for k, g in grants.items():
            c.release(k, g.token)
        self.assertEqual(list(c.list_all(prefix="list/")), [])

    def test_status_and_endpoint_forms(self) -> None:
        leader = self.cluster.leader()
        bare = raftlock.Client([leader.api])  # host:port without a scheme
        self.addCleanup(bare.close)
        st = bare.status()
        self.assertEqual(st["role"], "leader")
        self.assertEqual(st["id"], leader.id)
        self.assertEqual(bare.get("status/none").held, False)
        for bad in (["ftp://127.0.0.1:1"], ["127.0.0.1"], ["http://127.0.0.1:1/v1"], []):
            with self.assertRaises(raftlock.InvalidArgument):
                raftlock.Client(bad)

    def test_every_member_refusing_fails_at_once(self) -> None:
        from tests.cluster import free_port

        c = raftlock.Client(["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()], timeout=10)
        start = time.monotonic()
        with self.assertRaises(raftlock.Unavailable) as cm:
            c.acquire("k", lease=1)
        self.assertLess(time.monotonic() - start, 5)
        self.assertIn("every member refused", cm.exception.message)

    def test_lock_context_manager(self) -> None:
        c = self.client
        # The first renewal comes a third of the lease in and has the rest
        # to succeed, which a loaded machine needs (a 0.6 s lease ran out
        # there, and the lock was rightly lost).
        lease = 6.0
        with c.lock("ctx/job", lease=lease) as lk:
            granted = time.monotonic()
            self.assertGreater(lk.token, 0)

            def renewed() -> bool:
                # More of the lease left than the acquire alone could leave
                # (the bound taken before the read, so it is never low).
                bound = lease - (time.monotonic() - granted)
                info = c.get("ctx/job")
                self.assertEqual((info.held, info.token), (True, lk.token))
                return info.remaining > bound + 0.05

            wait_until("a renewal", renewed, timeout=60)
            self.assertFalse(lk.lost.is_set())
        self.assertFalse(c.get("ctx/job").held)

    def test_failed_release_does_not_hide_the_body_exception(self) -> None:
        c = self.client

        class Boom(Exception):
            pass

        with self.assertLogs("raftlock", "WARNING") as logs, self.assertRaises(Boom):
            with c.lock("ctx/boom", lease=30) as lk:
                # Someone else frees the lock: the release on exit fails.
                c.release("ctx/boom", lk.token)
                raise Boom()
        self.assertIn("not the holder", logs.output[0])
        # Without an exception in the block, the failed release is raised.
        with self.assertRaises(raftlock.NotHolder):
            with c.lock("ctx/boom", lease=30) as lk:
                c.release("ctx/boom", lk.token)

    def test_lost_when_a_renewal_is_answered_not_found(self) -> None:
        c = self.client
        # The lease outlasts a renewal on a loaded machine, so the lock is
        # lost by the renewal answered not-found, not by its lease.
        with c.lock("ctx/forced", lease=3) as lk:
            res = self.cluster.cli("release", "ctx/forced", "--force")
            self.assertEqual(res.returncode, 0, res.stderr)
            self.assertTrue(lk.lost.wait(60), "lost not set after the lock was forced away")
            self.assertIsInstance(lk.lost_reason, raftlock.NotHolder)


class RedirectTest(ClusterTest):
    def test_follower_redirects_to_the_leader(self) -> None:
        leader = self.cluster.leader()
        follower = self.cluster.followers(leader)[0]
        c = self.cluster.client([follower])
        self.addCleanup(c.close)
        g = c.acquire("redirect/a", lease=30)
        # The client went to the leader itself, and remembers it.
        self.assertEqual(c.leader, self.cluster.url(leader))
        self.assertEqual(c.get("redirect/a").token, g.token)
        c.release("redirect/a", g.token)
        # Status is never redirected: every member answers for itself.
        self.assertEqual(c.status()["id"], follower.id)


class WatchTest(ClusterTest):
    def test_watch_sees_every_change_under_its_prefix_in_order(self) -> None:
        c = self.cluster.client()
        self.addCleanup(c.close)
        got = []
        with c.watch("watched/") as w:
            done = threading.Event()

            def read() -> None:
                for ev in w:
                    got.append(ev)
                    if len(got) == 3:
                        break
                done.set()

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            g = c.acquire("watched/a", lease=30, owner="py-watch")
            c.acquire("elsewhere/b", lease=30)  # outside the prefix: no event
            c.renew("watched/a", g.token, lease=60)
            c.release("watched/a", g.token)
            wait_until("three events", done.is_set, 10)
        self.assertEqual([(e.type, e.key, e.token) for e in got],
                         [("granted", "watched/a", g.token), ("renewed", "watched/a", g.token), ("released", "watched/a", g.token)])
        self.assertEqual(got[0].owner, "py-watch")
        self.assertEqual(got[1].lease, 60.0)
        self.assertLess(got[0].index, got[1].index)
        self.assertLess(got[1].index, got[2].index)
        self.assertIsNone(w.error)

    def test_close_from_another_thread_ends_the_iteration_quietly(self) -> None:
        # close() from another thread while the reader waits for the next
        # event, as the README's example does: the iteration ends with no
        # exception and error None, every time.
        c = self.cluster.client()
        self.addCleanup(c.close)
        for _ in range(20):
            w = c.watch("closed/")
            raised: List[BaseException] = []
            reading = threading.Event()

            def read() -> None:
                reading.set()
                try:
                    for _ev in w:
                        pass
                except BaseException as e:  # noqa: BLE001 - the test's finding
                    raised.append(e)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            reading.wait(5)
            w.close()
            reader.join(5)
            self.assertFalse(reader.is_alive(), "the iteration did not stop")
            self.assertEqual(raised, [])
            self.assertIsNone(w.error)


class OldKeyTest(unittest.TestCase):
    """A key stored before the key rule that is not UTF-8 travels in
    key_b64 (no JSON string carries it): the client names such a key, given
    as bytes or as the surrogate-escaped str Python makes of it, by
    key_b64, and reads it back from answers and events as bytes."""

    def test_bytes_keys_go_in_key_b64(self) -> None:
        from raftlock.client import _key_of, _with_key
        from raftlock.watch import _key_of as event_key_of

        old = b"u8/\xff\xfe"
        self.assertEqual(_with_key({}, "key", old), {"key_b64": "dTgv//4="})
        self.assertEqual(_with_key({}, "key", old.decode("utf-8", "surrogateescape")), {"key_b64": "dTgv//4="})
        self.assertEqual(_with_key({}, "key", b"jobs/a"), {"key": "jobs/a"})
        self.assertEqual(_with_key({}, "after", old), {"after_b64": "dTgv//4="})
        with self.assertRaises(raftlock.InvalidArgument):
            _with_key({}, "key", b"")
        listed = json.loads('{"key":"u8/\\ufffd\\ufffd","key_b64":"dTgv//4=","token":3}')
        self.assertEqual(_key_of(listed), old)
        self.assertEqual(_key_of({"key": "jobs/a"}), "jobs/a")
        self.assertEqual(_key_of({"next": "u8/\ufffd\ufffd", "next_b64": "dTgv//4="}, "next"), old)
        self.assertEqual(event_key_of(listed), old)
