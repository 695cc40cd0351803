"""The exceptions of the raftlock client.

Every failure a call can raise is a :class:`RaftlockError`. The API's error
names (the ``error`` field of a failed call's JSON answer, the names the
``raftlock`` CLI prints with ``--json``) map to one subclass each, so a
caller catches what it can act on: :class:`Held` to try later,
:class:`NotHolder` to stop using a lock, :class:`OutcomeUnknown` to read the
lock (``get``) before trying again.
"""

from typing import Dict, Optional, Type


class RaftlockError(Exception):
    """A raftlock call failed.

    Attributes:
        name: the API's error name (``"held"``, ``"not-found"``, ...), or
            ``"error"`` for a failure with no better name.
        message: one line saying why.
        status: the HTTP status of the answer, or None when the failure
            happened on the client's side (no answer).
    """

    def __init__(self, message: str, name: str = "error", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.name = name
        self.message = message
        self.status = status


class Held(RaftlockError):
    """The lock is held: a try-acquire (``wait=0``), or an acquire whose wait ran out."""


class NotHolder(RaftlockError):
    """The key is not held with this token (release, renew): the lock was
    released, expired or taken over. Do not use the token any more."""


class InvalidArgument(RaftlockError):
    """A bad key, lease, owner or limit: the call can never succeed as it is."""


class PermissionDenied(RaftlockError):
    """The cluster's ACL does not give this client's identity (its
    certificate's common name) the right to make this call."""


class OutcomeUnknown(RaftlockError):
    """A lock-changing call (acquire, release, renew) may or may not have
    applied: the connection broke after the request was sent, the call's
    timeout ran out while it was in flight, the answer was not raftlock's
    (a proxy's 502, 503 or 504 without raftlock's JSON error body), or the
    leader changed under it.
    The client never retries such a call by itself. Read the lock with
    ``get`` (its ``owner`` tells yours from another's) before trying again."""


class Unavailable(RaftlockError):
    """No member could make the call before its timeout: no leader, members
    stopping or unreachable. Nothing was applied by the failed attempts, or
    the call is a read, so trying again later is safe."""


class Overloaded(Unavailable):
    """A member hit one of its limits and proposed nothing; the client
    retried until the call's timeout and the member was still busy."""


class Compacted(RaftlockError):
    """A watch resumed after an event no member still holds the events
    after (members keep a bounded history, and start it again when they
    catch up by snapshot): list the locks again and watch from there."""


_BY_NAME: Dict[str, Type[RaftlockError]] = {
    "held": Held,
    "not-found": NotHolder,
    "invalid-argument": InvalidArgument,
    "permission-denied": PermissionDenied,
    "outcome-unknown": OutcomeUnknown,
    "unavailable": Unavailable,
    "overloaded": Overloaded,
    "compacted": Compacted,
}


def error_from_answer(name: str, message: str, status: int) -> RaftlockError:
    """The exception for a failed call's ``{"error","message"}`` answer."""
    cls = _BY_NAME.get(name, RaftlockError)
    return cls(message, name=name, status=status)
