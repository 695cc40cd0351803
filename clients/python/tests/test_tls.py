"""TLS with client certificates, and the ACL's refusals, against a member
started with certificates from `raftlock certs init` and an ACL."""

import os
import subprocess
import tempfile
import unittest

import raftlock
from tests.cluster import Cluster, raftlock_bin, write_json


class TLSTest(unittest.TestCase):
    cluster: Cluster
    certs: str
    tmp: tempfile.TemporaryDirectory

    @classmethod
    def setUpClass(cls) -> None:
        bin = raftlock_bin()
        cls.tmp = tempfile.TemporaryDirectory(prefix="raftlock-py-certs-")
        cls.certs = os.path.join(cls.tmp.name, "certs")
        subprocess.run([bin, "certs", "init", "--out", cls.certs, "--members", "1", "--clients", "ci,dashboard,admin"],
                       check=True, capture_output=True)
        acl = write_json(os.path.join(cls.tmp.name, "acl.json"), {"rules": [
            {"identity": "ci", "prefixes": ["jobs/"], "rights": ["lock", "read"]},
            {"identity": "dashboard", "prefixes": [""], "rights": ["read"]},
            {"identity": "admin", "prefixes": [""], "rights": ["lock", "read", "admin"]},
        ]})
        c = cls.certs
        extra = ["--cert", os.path.join(c, "member-1.pem"), "--key", os.path.join(c, "member-1-key.pem"),
                 "--ca", os.path.join(c, "ca.pem"), "--acl", acl]
        cls.cluster = Cluster(1, extra=extra, scheme="https", **cls.identity("admin"))
        try:
            cls.cluster.leader()
        except BaseException:
            cls.cluster.stop()
            cls.tmp.cleanup()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.stop()
        cls.tmp.cleanup()

    @classmethod
    def identity(cls, name: str) -> dict:
        return {"cert": os.path.join(cls.certs, "client-%s.pem" % name),
                "key": os.path.join(cls.certs, "client-%s-key.pem" % name),
                "ca": os.path.join(cls.certs, "ca.pem")}

    def client(self, name: str, **kw: object) -> raftlock.Client:
        args = dict(self.identity(name))
        args.update(kw)  # type: ignore[arg-type]
        c = raftlock.Client([self.cluster.members[0].api], **args)  # type: ignore[arg-type]
        self.addCleanup(c.close)
        return c

    def test_client_certificate_locks_within_its_rights(self) -> None:
        ci = self.client("ci")  # a bare host:port: https, as a certificate is given
        g = ci.acquire("jobs/nightly", lease=30, owner="ci-42")
        info = ci.get("jobs/nightly")
        self.assertEqual((info.held, info.token, info.owner), (True, g.token, "ci-42"))
        with ci.lock("jobs/weekly", lease=5) as lk:
            self.assertGreater(lk.token, g.token)
        ci.release("jobs/nightly", g.token)

    def test_acl_refusals(self) -> None:
        ci, dashboard = self.client("ci"), self.client("dashboard")
        with self.assertRaises(raftlock.PermissionDenied) as cm:
            dashboard.acquire("jobs/nightly", lease=30)
        self.assertEqual((cm.exception.name, cm.exception.status), ("permission-denied", 403))
        self.assertIn('identity "dashboard" may not lock', cm.exception.message)
        with self.assertRaises(raftlock.PermissionDenied):
            ci.acquire("other/key", lease=30)  # outside ci's prefix
        with self.assertRaises(raftlock.PermissionDenied):
            ci.status()  # admin only
        self.assertFalse(dashboard.get("jobs/none").held)  # read is dashboard's

    def test_no_client_certificate_gets_no_call(self) -> None:
        anon = raftlock.Client(["https://" + self.cluster.members[0].api], ca=os.path.join(self.certs, "ca.pem"), timeout=1)
        self.addCleanup(anon.close)
        with self.assertRaises(raftlock.Unavailable):
            anon.get("jobs/nightly")
        # Under TLS 1.3 the member refuses the handshake after the client
        # may already have written its request, so a lock-changing call
        # can end in OutcomeUnknown; either way it fails, and nothing is held.
        with self.assertRaises(raftlock.RaftlockError):
            anon.acquire("jobs/nightly", lease=30)
        self.assertFalse(self.client("admin").get("jobs/nightly").held)

    def test_wrong_ca_is_refused(self) -> None:
        other = os.path.join(self.tmp.name, "other")
        subprocess.run([raftlock_bin(), "certs", "init", "--out", other, "--members", "1", "--clients", "ci"],
                       check=True, capture_output=True)
        c = self.client("ci", ca=os.path.join(other, "ca.pem"), timeout=1)
        with self.assertRaises(raftlock.Unavailable) as cm:
            c.get("jobs/nightly")
        self.assertIn("CERTIFICATE_VERIFY_FAILED", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
