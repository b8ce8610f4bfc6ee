#!/usr/bin/env python3
"""A Baton worker in Python: the greeter of services/worker/examples/greeter.

It leases keys (namespace/name) from the queue "greetings", reads the
Greeting /registry/greetings/<namespace>/<name> through the observer's cache,
and makes its status greet spec.name:

    {"kind": "Greeting", "metadata": {"name": "hi", "namespace": "default", "generation": 1},
     "spec": {"name": "world"},
     "status": {"message": "hello, world", "observedGeneration": 1}}

The status is written with a compare-and-swap on the object's mod_revision,
through etcd's JSON gateway (plain HTTP, so no etcd stubs are needed). A
Greeting without spec.name can never succeed: its key is acked terminal and
parked with the error as last_error. spec.workSeconds makes the reconcile
take that long, to show the heartbeats (Extend) that keep the lease alive.

Before it leases it declares what it watches, as a Go worker's manager does:
declare.py (beside it) writes the Go greeter's declaration, For Greeting and
Owns Pod, at /baton/rules/<queue> in etcd, unless it is there already. The
observer then announces every change of a Greeting to the queue, with no
rules file, and batonctl knows the kind. The declaration stays when the
worker stops. If etcd cannot take it (after a few retries), the worker exits
1 without leasing.

It speaks baton.queue.v1 and baton.observer.v1 through stubs generated from
proto/ by generate.sh (see README.md). Only the Python standard library,
grpcio and protobuf are used. SIGTERM or SIGINT: stop leasing, finish and ack
what is in flight, exit 0.

Against a stack serving mutual TLS (make run TLS=1), --cacert verifies the
queue and the observer, and --cert/--key is the worker's certificate, which
needs the worker role; --etcd-cacert, --etcd-cert and --etcd-key do the same
for etcd's https:// endpoints. Each is also an environment variable
(BATON_CACERT, BATON_CERT, BATON_KEY, BATON_SERVER_NAME, BATON_ETCD_CACERT,
BATON_ETCD_CERT, BATON_ETCD_KEY); a flag given wins.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

import declare  # beside this file: what the worker watches, published in etcd

log = logging.getLogger("greeter")

# The queue's limits (client/queue/limits.go): error texts are stored cut to
# MAX_ERROR_BYTES, worker names are at most MAX_NAME_BYTES of UTF-8.
MAX_ERROR_BYTES = 4096
MAX_NAME_BYTES = 256
# How long one Lease call long-polls, and the longest one observer or etcd
# call may take.
POLL_WAIT_SECONDS = 5
CALL_TIMEOUT_SECONDS = 5.0


def cut_utf8(text: str, limit: int) -> str:
    """text cut to at most limit bytes of UTF-8, at a character boundary."""
    b = text.encode("utf-8", errors="replace")
    return b[:limit].decode("utf-8", errors="ignore")


def describe(e: Exception) -> str:
    """A one-line text of e, for logs and last_error."""
    if isinstance(e, grpc.RpcError) and isinstance(e, grpc.Call):
        return f"{e.code().name}: {e.details()}"
    return f"{type(e).__name__}: {e}"


@dataclass
class Outcome:
    """How a reconcile went: exactly one of the Ack outcomes."""

    kind: str  # "success", "failure" or "terminal"
    error: str = ""


class Terminal(Exception):
    """A reconcile that retrying cannot fix (a malformed object)."""


class LeaseLost(Exception):
    """The lease lapsed or was taken away: stop, write nothing more."""


@dataclass
class Held:
    """One leased key being reconciled."""

    key: str
    token: int
    lost: threading.Event = field(default_factory=threading.Event)


class Etcd(declare.Gateway):
    """The two calls this worker needs besides its declaration, through
    etcd's gRPC-JSON gateway."""

    def get(self, key: str) -> tuple[bytes, int] | None:
        """The value at key and its mod_revision, or None if there is none."""
        resp = self.post("/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()})
        kvs = resp.get("kvs") or []
        if not kvs:
            return None
        return base64.b64decode(kvs[0].get("value", "")), int(kvs[0]["mod_revision"])

    def put_if_unchanged(self, key: str, value: bytes, mod_revision: int) -> tuple[bool, int]:
        """Puts value at key if its mod_revision is still the one read.

        Returns whether it did, and etcd's revision after the transaction.
        """
        k = base64.b64encode(key.encode()).decode()
        resp = self.post("/v3/kv/txn", {
            "compare": [{"key": k, "target": "MOD", "result": "EQUAL",
                         "mod_revision": str(mod_revision)}],
            "success": [{"request_put": {"key": k, "value": base64.b64encode(value).decode()}}],
        })
        return bool(resp.get("succeeded")), int(resp["header"]["revision"])


# The Greeting kind, as the Go greeter (services/worker/examples/greeter)
# declares it.
GREETING = declare.Kind("Greeting", "greetings", ("greeting",))


def declaration(queue: str) -> declare.Declaration:
    """What this worker watches: Greetings, each one's namespace/name a key of
    queue, and the pods that name a Greeting as owner (their changes announce
    the owner's key). It is the Go greeter's declaration, byte for byte, so
    the two may serve the queue together without rewriting each other's."""
    return declare.Declaration(queue, GREETING, owns=(declare.builtin("Pod"),))


class Greeter:
    """Reconciles one Greeting: its status greets its spec.name."""

    def __init__(self, observer: Any | None, etcd: Etcd, pb: Any) -> None:
        self.observer = observer  # an ObserverServiceStub; None reads etcd directly
        self.etcd = etcd
        self.pb = pb  # the generated baton.observer.v1 module
        # The etcd revision of this worker's last write: reads through the
        # cache wait until they reflect it (read-your-writes).
        self.min_revision = 0
        self.lock = threading.Lock()

    def reconcile(self, held: Held) -> None:
        namespace, sep, name = held.key.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise Terminal(f"key {held.key!r} is not namespace/name")
        etcd_key = f"/registry/greetings/{namespace}/{name}"
        for _ in range(5):  # compare-and-swap conflicts: read again, redo
            got = self.read(etcd_key)
            if got is None:
                return  # deleted: it owned nothing, nothing to clean up
            raw, mod_revision = got
            obj = parse_greeting(raw)
            spec, meta = obj["spec"], obj["metadata"]
            work = float(spec.get("workSeconds") or 0)
            if work > 0 and held.lost.wait(work):  # slow work; heartbeats meanwhile
                raise LeaseLost(held.key)
            want = {"message": f"hello, {spec['name']}",
                    "observedGeneration": meta.get("generation", 0)}
            if obj.get("status") == want:
                return  # already right: write nothing (every write is announced again)
            if held.lost.is_set():
                raise LeaseLost(held.key)
            obj["status"] = want
            done, revision = self.etcd.put_if_unchanged(
                etcd_key, json.dumps(obj, separators=(",", ":")).encode(), mod_revision)
            with self.lock:
                self.min_revision = max(self.min_revision, revision)
            if done:
                log.info("greeted key=%s message=%r revision=%d", held.key, want["message"], revision)
                return
            log.info("conflict key=%s: read again", held.key)
        raise RuntimeError(f"{etcd_key}: still conflicting after 5 tries")


    def read(self, etcd_key: str) -> tuple[bytes, int] | None:
        """The object and its mod_revision, or None if there is none."""
        if self.observer is None:
            return self.etcd.get(etcd_key)
        with self.lock:
            min_rev = self.min_revision
        try:
            got = self.observer.Get(self.pb.GetRequest(key=etcd_key, min_revision=min_rev),
                                    timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return got.object, got.mod_revision


def parse_greeting(raw: bytes) -> dict[str, Any]:
    """The object, or Terminal if it is not a Greeting this worker can greet."""
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise Terminal(f"object is not JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict) \
            or not isinstance(obj.get("spec"), dict):
        raise Terminal("object has no metadata or spec")
    name = obj["spec"].get("name")
    if not isinstance(name, str) or not name:
        raise Terminal("spec.name is empty")
    work = obj["spec"].get("workSeconds", 0)
    if not isinstance(work, (int, float)) or work < 0:
        raise Terminal("spec.workSeconds is not a number of seconds")
    return obj


class Worker:
    """Leases keys, runs reconciles on a thread pool, heartbeats, acks."""

    def __init__(self, args: argparse.Namespace, queue: Any, greeter: Greeter, pb: Any) -> None:
        self.args = args
        self.queue = queue
        self.greeter = greeter
        self.pb = pb  # the generated baton.queue.v1 module
        self.stopping = threading.Event()
        self.held: dict[str, Held] = {}
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(args.concurrency)
        self.lease_duration = Duration()
        self.lease_duration.FromMilliseconds(int(args.lease_duration * 1000))

    def run(self) -> None:
        heartbeat = threading.Thread(target=self.heartbeat, name="heartbeat", daemon=True)
        heartbeat.start()
        with ThreadPoolExecutor(self.args.concurrency, thread_name_prefix="reconcile") as pool:
            backoff = 0.05
            while not self.stopping.is_set():
                self.slots.acquire()
                if self.stopping.is_set():
                    break
                n = 1
                while n < self.args.concurrency and self.slots.acquire(blocking=False):
                    n += 1
                try:
                    leases = self.lease(n)
                    backoff = 0.05
                except grpc.RpcError as e:
                    leases = []
                    log.warning("lease failed: %s; retrying in %.2fs", describe(e), backoff)
                    self.stopping.wait(backoff)
                    backoff = min(2 * backoff, 5.0)
                for _ in range(n - len(leases)):
                    self.slots.release()
                for lease in leases:
                    held = Held(lease.key, lease.token)
                    with self.lock:
                        self.held[lease.key] = held
                    pool.submit(self.process, held, lease.attempt)
            log.info("stopping: finishing %d reconciles", len(self.held))
        # The pool has drained: every key in flight was acked.

    def lease(self, n: int) -> list[Any]:
        """Long-polls for up to n keys; on shutdown, returns at once."""
        wait = Duration(seconds=POLL_WAIT_SECONDS)
        future = self.queue.Lease.future(self.pb.LeaseRequest(
            queue=self.args.queue, worker=self.args.worker, max_items=n,
            lease_duration=self.lease_duration, wait=wait), timeout=POLL_WAIT_SECONDS + 5)
        while True:
            try:
                return list(future.result(timeout=0.2).leases)
            except grpc.FutureTimeoutError:
                if self.stopping.is_set():
                    future.cancel()  # any key granted meanwhile lapses and is offered again
                    return []

    def process(self, held: Held, attempt: int) -> None:
        try:
            try:
                self.greeter.reconcile(held)
                outcome = Outcome("success")
            except LeaseLost:
                log.warning("lease lost key=%s: dropped", held.key)
                return
            except Terminal as e:
                log.error("terminal key=%s: %s", held.key, e)
                outcome = Outcome("terminal", str(e))
            except Exception as e:  # anything else is retried with backoff
                text = describe(e)
                log.warning("failed key=%s attempt=%d: %s", held.key, attempt, text)
                outcome = Outcome("failure", text)
            self.ack(held, outcome)
        finally:
            with self.lock:
                # Acked, so leased again at once if it changed meanwhile: the
                # entry may already be the next lease's.
                if self.held.get(held.key) is held:
                    del self.held[held.key]
            self.slots.release()

    def ack(self, held: Held, outcome: Outcome) -> None:
        pb = self.pb
        a = pb.Ack(key=held.key, token=held.token)
        if outcome.kind == "success":
            a.success.SetInParent()
        elif outcome.kind == "terminal":
            a.terminal.error = cut_utf8(outcome.error, MAX_ERROR_BYTES)
        else:
            a.failure.error = cut_utf8(outcome.error, MAX_ERROR_BYTES)
        for i in range(5):  # a stale ack can never land, so retrying is safe
            try:
                resp = self.queue.Ack(pb.AckRequest(queue=self.args.queue, acks=[a]),
                                      timeout=CALL_TIMEOUT_SECONDS)
                break
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    log.error("ack key=%s: %s: %s", held.key, e.code(), e.details())
                    return
                time.sleep(0.1 * 2**i)
        else:
            log.error("ack key=%s: queue unreachable; the lease will lapse", held.key)
            return
        status = resp.results[0].status
        level = logging.INFO if status == pb.ACK_STATUS_OK else logging.WARNING
        log.log(level, "acked key=%s outcome=%s status=%s", held.key, outcome.kind, pb.AckStatus.Name(status))

    def heartbeat(self) -> None:
        """Extends every held lease each third of the lease duration."""
        pb = self.pb
        while True:
            time.sleep(self.args.lease_duration / 3)
            with self.lock:
                held = list(self.held.values())
            if not held:
                continue
            try:
                resp = self.queue.Extend(pb.ExtendRequest(
                    queue=self.args.queue, lease_duration=self.lease_duration,
                    leases=[pb.LeaseRef(key=h.key, token=h.token) for h in held]),
                    timeout=CALL_TIMEOUT_SECONDS)
            except grpc.RpcError as e:
                log.warning("extend failed: %s", e.code())
                continue
            for h, r in zip(held, resp.results):
                if r.status == pb.ACK_STATUS_LEASE_LOST:
                    h.lost.set()


# The environment variables that set the TLS arguments not given.
TLS_ENV = {"cacert": "BATON_CACERT", "cert": "BATON_CERT", "key": "BATON_KEY",
           "server_name": "BATON_SERVER_NAME", "etcd_cacert": "BATON_ETCD_CACERT",
           "etcd_cert": "BATON_ETCD_CERT", "etcd_key": "BATON_ETCD_KEY"}


def read_pem(flag: str, path: str) -> bytes:
    """The file's bytes; an error naming the flag and the file otherwise."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{flag} {path}: {e.strerror}") from None


def channel_credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """TLS for the queue and the observer, or None for plaintext.

    The files are read once: grpcio's channel credentials cannot re-read
    them, so restart the worker after its certificate is renewed.
    """
    if not (args.cacert or args.cert or args.key):
        return None
    if bool(args.cert) != bool(args.key):
        raise ValueError("--cert and --key go together")
    root = read_pem("--cacert", args.cacert) if args.cacert else None  # None: the system's roots
    key = read_pem("--key", args.key) if args.key else None
    chain = read_pem("--cert", args.cert) if args.cert else None
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)


def dial(addr: str, creds: grpc.ChannelCredentials | None, server_name: str) -> grpc.Channel:
    """A channel to addr: plaintext without creds, else TLS.

    server_name, if set, is the name the server's certificate must carry,
    for a certificate whose hosts do not include the host dialed (an
    address behind a tunnel or a load balancer).
    """
    if creds is None:
        return grpc.insecure_channel(addr)
    options = []
    if server_name:
        options = [("grpc.ssl_target_name_override", server_name), ("grpc.default_authority", server_name)]
    return grpc.secure_channel(addr, creds, options=options)


def main() -> int:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--queue-addr", default="127.0.0.1:7070", help="the queue's gRPC address")
    p.add_argument("--observer-addr", default="127.0.0.1:7071",
                   help="the observer whose cache serves reads; empty reads etcd directly "
                        "(for an observer that does not watch /registry/greetings/)")
    p.add_argument("--etcd-endpoints", default="http://127.0.0.1:2379",
                   help="comma-separated etcd client URLs")
    p.add_argument("--queue", default="greetings", help="the queue to lease from")
    p.add_argument("--worker", default=f"{socket.gethostname()}-{os.getpid()}",
                   help="the lease holder's name (shown by Inspect)")
    p.add_argument("--concurrency", type=int, default=4, help="keys reconciled at once")
    p.add_argument("--lease-duration", type=float, default=30.0,
                   help="seconds a lease lasts; extended every third of it")
    p.add_argument("--stubs", default=str(here / "gen"),
                   help="where generate.sh wrote the Python stubs")
    tls = p.add_argument_group("mutual TLS", "the queue and the observer are dialed plaintext unless "
                               "--cacert, --cert or --key is set; the etcd flags need https:// endpoints. "
                               "Each defaults to its environment variable (BATON_CACERT ...)")
    tls.add_argument("--cacert", help="CA bundle (PEM) that verifies the queue and the observer "
                                      "(default: the system's roots)")
    tls.add_argument("--cert", help="this worker's certificate (PEM), with the worker role")
    tls.add_argument("--key", help="the key of --cert (PEM)")
    tls.add_argument("--server-name",
                     help="the name the queue's and the observer's certificates must carry, "
                          "when their hosts do not include the host dialed")
    tls.add_argument("--etcd-cacert", help="CA bundle (PEM) that verifies etcd (https:// endpoints)")
    tls.add_argument("--etcd-cert", help="client certificate (PEM) presented to etcd")
    tls.add_argument("--etcd-key", help="the key of --etcd-cert (PEM)")
    args = p.parse_args()
    for name, env in TLS_ENV.items():
        if getattr(args, name) is None:
            setattr(args, name, os.environ.get(env, ""))
    args.worker = cut_utf8(args.worker, MAX_NAME_BYTES)
    if args.concurrency < 1 or not 0.3 <= args.lease_duration <= 600:
        p.error("--concurrency must be at least 1, --lease-duration 0.3 to 600 seconds")
    endpoints = [e.strip() for e in args.etcd_endpoints.split(",") if e.strip()]
    try:
        creds = channel_credentials(args)
        etcd = Etcd(endpoints, declare.tls_context(endpoints, args.etcd_cacert, args.etcd_cert, args.etcd_key),
                    timeout=CALL_TIMEOUT_SECONDS)
        watches = declaration(args.queue)
        watches.marshal()  # a queue that is no DNS label is refused here, before anything is written
    except (ValueError, ssl.SSLError) as e:
        p.error(str(e))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")

    sys.path.insert(0, args.stubs)
    try:
        from baton.observer.v1 import observer_pb2, observer_pb2_grpc
        from baton.queue.v1 import queue_pb2, queue_pb2_grpc
    except ImportError as e:
        log.error("no stubs in %s (%s): run examples/python-worker/generate.sh", args.stubs, e)
        return 2

    qconn = dial(args.queue_addr, creds, args.server_name)
    oconn = dial(args.observer_addr, creds, args.server_name) if args.observer_addr else None
    greeter = Greeter(observer_pb2_grpc.ObserverServiceStub(oconn) if oconn else None,
                      etcd, observer_pb2)
    worker = Worker(args, queue_pb2_grpc.QueueServiceStub(qconn), greeter, queue_pb2)

    def stop(signum: int, _frame: Any) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        worker.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # Declared before the first Lease, as the Go SDK's manager does: the
    # observer then announces every Greeting to the queue.
    try:
        declare.publish(etcd, [watches], stop=worker.stopping, logger=log)
    except declare.EtcdError as e:
        qconn.close()
        if oconn:
            oconn.close()
        if worker.stopping.is_set():
            log.info("stopped before leasing")
            return 0
        log.error("declare: %s", e)
        return 1
    log.info("leasing from queue=%s at %s as worker=%s (%s)", args.queue, args.queue_addr, args.worker,
             "mutual TLS" if args.cert else "TLS" if creds else "plaintext")
    worker.run()
    qconn.close()
    if oconn:
        oconn.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
