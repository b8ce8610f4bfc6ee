#!/usr/bin/env python3
"""Declares what a Baton worker watches, as the Go SDK's declare.Publish does.

A worker publishes each of its controllers' declarations in etcd at
/baton/rules/<queue>, as the JSON of client/kinds' Declaration:

    {"queue":"greetings","for":{"kind":"Greeting","resource":"greetings","aliases":["greeting"]},
     "owns":[{"kind":"Pod","resource":"pods","aliases":["pod","po"]}]}

The observer then announces every change of a Greeting, and of a Pod that
names a Greeting as owner, to the queue "greetings", and batonctl learns
the kind. The declaration describes the controller, not the process: it is
written without an etcd lease, so it stays when the worker stops (delete the
key to retire the controller). Every replica writes the same bytes, so
publish writes only a value that differs from the stored one: one
compare-and-put transaction per declaration, which changes nothing, and
makes no etcd revision, when the value is already there. An etcd failure is
retried as the Go SDK does (ATTEMPTS tries, pauses doubling from
FIRST_BACKOFF_SECONDS), so a worker started a moment before etcd waits for
it and one that cannot reach it fails instead of running undeclared.

worker.py publishes its declaration this way before it leases. As a
command, for a worker that does not:

    declare.py [--etcd-endpoints URLS] [--etcd-cacert CA] [--etcd-cert CRT --etcd-key KEY]
               -d JSON [-d JSON ...]

checks every declaration as the observer will (unknown fields, names,
limits) before it writes any, and prints for each its key and "declared" or
"unchanged". Etcd is reached through its JSON gateway (/v3/kv/txn on the
client URL), with the etcd flags of worker.py: --etcd-cacert, --etcd-cert and
--etcd-key (or BATON_ETCD_CACERT, BATON_ETCD_CERT, BATON_ETCD_KEY; a flag
given wins) for https:// endpoints. Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import ssl
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Where declarations live, one key per queue (kinds.DeclarationPrefix).
DECLARATION_PREFIX = "/baton/rules/"
# The limits the observer enforces (client/kinds): the JSON of one
# declaration, the kinds it owns, the aliases of one kind.
MAX_DECLARATION_BYTES = 64 << 10
MAX_OWNS = 32
MAX_ALIASES = 8
# The retry of an etcd failure, the Go SDK's: ATTEMPTS tries, the first pause
# FIRST_BACKOFF_SECONDS, each pause twice the one before (about 6 s in all);
# each call bounded by CALL_TIMEOUT_SECONDS.
ATTEMPTS = 6
FIRST_BACKOFF_SECONDS = 0.2
CALL_TIMEOUT_SECONDS = 5.0

# The names kinds.Kind.Validate and limits.CheckQueueName accept. fullmatch:
# Python's "$" would also match before a final newline.
KIND_NAME = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
ALIAS_NAME = re.compile(r"[a-z][a-z0-9]{0,62}")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

log = logging.getLogger("declare")


def _q(s: str) -> str:
    """s quoted as Go's %q quotes it, for messages in the observer's words."""
    return json.dumps(s)


@dataclass(frozen=True)
class Kind:
    """One kind of object, /registry/<resource>/<namespace>/<name> in etcd."""

    kind: str  # the value's "kind" field, CamelCase, e.g. "ReplicaSet"
    resource: str  # the lower-case plural in keys, a DNS label, e.g. "replicasets"
    aliases: tuple[str, ...] = ()  # other names batonctl accepts, shortest last

    def validate(self) -> None:
        """Raises ValueError naming the first problem, in kinds.Kind's words."""
        if not KIND_NAME.fullmatch(self.kind):
            raise ValueError(f"kind {_q(self.kind)} is not a kind name (CamelCase letters and digits, e.g. ReplicaSet)")
        if not DNS_LABEL.fullmatch(self.resource):
            raise ValueError(f"kind {self.kind}: resource {_q(self.resource)} is not a DNS label "
                             "(lower-case letters, digits and '-', at most 63)")
        if len(self.aliases) > MAX_ALIASES:
            raise ValueError(f"kind {self.kind}: {len(self.aliases)} aliases, at most {MAX_ALIASES}")
        for a in self.aliases:
            if not ALIAS_NAME.fullmatch(a):
                raise ValueError(f"kind {self.kind}: alias {_q(a)} is not a lower-case word")

    def to_json(self) -> dict[str, Any]:
        """The JSON object, in the Go encoding's order, aliases omitted when none."""
        out: dict[str, Any] = {"kind": self.kind, "resource": self.resource}
        if self.aliases:
            out["aliases"] = list(self.aliases)
        return out


# The reference kinds (kinds.Builtin), owners before the objects they own.
BUILTIN = (
    Kind("Deployment", "deployments", ("deployment", "deploy")),
    Kind("ReplicaSet", "replicasets", ("replicaset", "rs")),
    Kind("StatefulSet", "statefulsets", ("statefulset", "sts")),
    Kind("Job", "jobs", ("job",)),
    Kind("Pod", "pods", ("pod", "po")),
)


def builtin(kind: str) -> Kind:
    """The reference kind named kind (kinds.MustBuiltin); KeyError for another."""
    for k in BUILTIN:
        if k.kind == kind:
            return k
    raise KeyError(f"no reference kind {kind}")


@dataclass(frozen=True)
class Declaration:
    """What one controller watches: its queue, its primary kind, the kinds it owns."""

    queue: str
    for_: Kind  # each object's namespace/name is a key of queue
    owns: tuple[Kind, ...] = ()  # a change of one announces its owner of kind for_
    # A status-only change of a for_ object is not announced (the
    # controller wrote that status itself); see docs/workers.md.
    ignore_own_status: bool = False
    # for_'s structural schema ({"spec": ..., "status": ...}) and the
    # columns batonctl get prints, as JSON (client/schema's Kind and
    # Column): checked here for their shape only; the observer and every
    # writer check the rest, and refuse a declaration they do not accept.
    schema: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), hash=False, compare=False)

    def key(self) -> str:
        """Where the declaration is published in etcd."""
        return DECLARATION_PREFIX + self.queue

    def validate(self) -> None:
        """Raises ValueError naming the first problem, in kinds.Declaration's words."""
        if not DNS_LABEL.fullmatch(self.queue):
            raise ValueError(f"declaration: queue {_q(self.queue)} is not a DNS label "
                             "(lower-case letters, digits and '-', at most 63)")
        try:
            self.for_.validate()
        except ValueError as e:
            raise ValueError(f"declaration of queue {self.queue}: for: {e}") from None
        if len(self.owns) > MAX_OWNS:
            raise ValueError(f"declaration of queue {self.queue}: owns {len(self.owns)} kinds, at most {MAX_OWNS}")
        seen = {self.for_.resource}
        for o in self.owns:
            try:
                o.validate()
            except ValueError as e:
                raise ValueError(f"declaration of queue {self.queue}: owns: {e}") from None
            if o.resource in seen:
                raise ValueError(f"declaration of queue {self.queue}: resource {o.resource} is named twice")
            seen.add(o.resource)

    def marshal(self) -> bytes:
        """The bytes published: the Go SDK's encoding of the same declaration.

        Every name is checked to be ASCII letters, digits and '-', so
        compact json.dumps and Go's encoding/json agree byte for byte (no
        escapes), in the order of kinds.Declaration's fields.
        """
        self.validate()
        out: dict[str, Any] = {"queue": self.queue, "for": self.for_.to_json()}
        if self.owns:
            out["owns"] = [o.to_json() for o in self.owns]
        if self.ignore_own_status:
            out["ignoreOwnStatus"] = True
        if self.schema:
            out["schema"] = self.schema
        if self.printer_columns:
            out["printerColumns"] = list(self.printer_columns)
        data = _go_json(out)
        if len(data) > MAX_DECLARATION_BYTES:
            raise ValueError(f"declaration of {len(data)} bytes, at most {MAX_DECLARATION_BYTES}")
        return data


def _go_json(obj: Any) -> bytes:
    """obj encoded as Go's encoding/json encodes it: compact, UTF-8, with
    <, >, &, U+2028 and U+2029 escaped (a schema's descriptions are free
    text, where the names are ASCII)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(c, esc)
    return text.encode()


def _fields(where: str, obj: Any, allowed: dict[str, type]) -> dict[str, Any]:
    """obj as a JSON object whose members are all in allowed, of their types."""
    if not isinstance(obj, dict):
        raise ValueError(f"declaration is not valid JSON: {where} is not an object")
    for name, value in obj.items():
        if name not in allowed:
            raise ValueError(f"declaration is not valid JSON: unknown field {_q(name)} in {where}")
        want = allowed[name]
        # JSON's null means absent, as in Go.
        if value is not None and not isinstance(value, want):
            raise ValueError(f"declaration is not valid JSON: {where}.{name} is not a {want.__name__}")
    return {k: v for k, v in obj.items() if v is not None}


def _kind(where: str, obj: Any) -> Kind:
    f = _fields(where, obj, {"kind": str, "resource": str, "aliases": list})
    aliases = f.get("aliases", [])
    if not all(isinstance(a, str) for a in aliases):
        raise ValueError(f"declaration is not valid JSON: {where}.aliases holds a non-string")
    return Kind(f.get("kind", ""), f.get("resource", ""), tuple(aliases))


def parse(text: str) -> Declaration:
    """A declaration from its JSON, checked as the observer's kinds.Parse does.

    Unknown fields are refused, as a typo would otherwise silently watch less.
    """
    if len(text.encode()) > MAX_DECLARATION_BYTES:
        raise ValueError(f"declaration of {len(text.encode())} bytes, at most {MAX_DECLARATION_BYTES}")
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ValueError(f"declaration is not valid JSON: {e}") from None
    f = _fields("the declaration", obj, {"queue": str, "for": dict, "owns": list, "ignoreOwnStatus": bool,
                                         "schema": dict, "printerColumns": list})
    owns = tuple(_kind(f"owns[{i}]", o) for i, o in enumerate(f.get("owns", [])))
    schema = f.get("schema")
    if schema is not None:
        _fields("schema", schema, {"spec": dict, "status": dict})
    columns = f.get("printerColumns", [])
    if not all(isinstance(c, dict) for c in columns):
        raise ValueError("declaration is not valid JSON: printerColumns holds a non-object")
    d = Declaration(f.get("queue", ""), _kind("for", f.get("for", {})), owns, f.get("ignoreOwnStatus", False),
                    schema or None, tuple(columns))
    d.validate()
    return d


class EtcdError(ConnectionError):
    """Etcd's JSON gateway did not answer, or answered with an error."""


class Gateway:
    """Etcd's gRPC-JSON gateway (POST /v3/...), tried endpoint by endpoint."""

    def __init__(self, endpoints: list[str], tls: ssl.SSLContext | None = None,
                 timeout: float = CALL_TIMEOUT_SECONDS) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = endpoints
        # For https:// endpoints: verifies etcd and presents the client
        # certificate (None: plain HTTP, or https with the system's roots).
        self.tls = tls
        self.timeout = timeout

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The answer of the first endpoint that gives one; EtcdError otherwise."""
        data = json.dumps(body).encode()
        errors = []
        for ep in self.endpoints:
            req = urllib.request.Request(ep.rstrip("/") + path, data=data,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout, context=self.tls) as resp:
                    return json.load(resp)
            except urllib.error.HTTPError as e:
                # The gateway's error is JSON: {"error": ..., "code": ..., "message": ...}.
                try:
                    detail = json.load(e).get("message") or e.reason
                except (ValueError, OSError, AttributeError):
                    detail = e.reason
                errors.append(f"{ep}: HTTP {e.code}: {detail}")
            except (urllib.error.URLError, OSError, ValueError) as e:
                errors.append(f"{ep}: {e}")
        raise EtcdError("etcd: " + "; ".join(errors))


def tls_context(endpoints: list[str], cacert: str, cert: str, key: str) -> ssl.SSLContext | None:
    """TLS for etcd's https:// endpoints, or None when no file is given.

    The errors name worker.py's flags (--etcd-cacert, --etcd-cert, --etcd-key).
    """
    if not (cacert or cert or key):
        return None
    if bool(cert) != bool(key):
        raise ValueError("--etcd-cert and --etcd-key go together")
    for ep in endpoints:
        # A plaintext endpoint would ignore the certificates: say so instead.
        if not ep.startswith("https://"):
            raise ValueError(f"--etcd-endpoints {ep} is not https://, but an etcd TLS flag is set")
    for flag, path in (("--etcd-cacert", cacert), ("--etcd-cert", cert), ("--etcd-key", key)):
        if path and not Path(path).is_file():
            raise ValueError(f"{flag} {path}: no such file")
    # Verifies etcd's certificate against the CA (the system's roots
    # without one) and its host, IP addresses included.
    ctx = ssl.create_default_context(cafile=cacert or None)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _put_if_different(etcd: Gateway, key: str, value: bytes, stop: threading.Event) -> bool:
    """Puts value at key unless it is there already, retrying etcd failures;
    returns whether it wrote."""
    k, v = _b64(key.encode()), _b64(value)
    # Compare, else put: etcd fails a value compare on a missing key, so
    # the put also creates it.
    txn = {"compare": [{"key": k, "target": "VALUE", "result": "EQUAL", "value": v}],
           "failure": [{"request_put": {"key": k, "value": v}}]}
    attempt, pause = 1, FIRST_BACKOFF_SECONDS
    while True:
        try:
            return not etcd.post("/v3/kv/txn", txn).get("succeeded", False)
        except EtcdError:
            if attempt == ATTEMPTS or stop.wait(pause):
                raise
        attempt, pause = attempt + 1, pause * 2


def publish(etcd: Gateway, declarations: list[Declaration], stop: threading.Event | None = None,
            logger: logging.Logger | None = None) -> list[bool]:
    """Writes each declaration at its key, unless etcd holds exactly that value.

    Every declaration is checked before anything is written (ValueError);
    an etcd failure is retried as the constants above say, then raised as
    EtcdError naming the key. stop, once set, ends the retries at once.
    Returns, for each declaration, whether it was written; each written one
    is logged.
    """
    logger = logger or log
    stop = stop or threading.Event()
    values, seen = [], set()
    for d in declarations:
        values.append(d.marshal())
        if d.queue in seen:
            raise ValueError(f"queue {d.queue} is declared twice")
        seen.add(d.queue)
    written = []
    for d, value in zip(declarations, values):
        try:
            changed = _put_if_different(etcd, d.key(), value, stop)
        except EtcdError as e:
            raise EtcdError(f"publish {d.key()}: {e}") from None
        if changed:
            logger.info("declared what a controller watches: queue=%s key=%s for=%s owns=%d",
                        d.queue, d.key(), d.for_.kind, len(d.owns))
        written.append(changed)
    return written


# The environment variables that set the etcd TLS flags not given (worker.py's).
TLS_ENV = {"etcd_cacert": "BATON_ETCD_CACERT", "etcd_cert": "BATON_ETCD_CERT", "etcd_key": "BATON_ETCD_KEY"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--etcd-endpoints", default="http://127.0.0.1:2379", help="comma-separated etcd client URLs")
    p.add_argument("--etcd-cacert", help="CA bundle (PEM) that verifies etcd (https:// endpoints)")
    p.add_argument("--etcd-cert", help="client certificate (PEM) presented to etcd")
    p.add_argument("--etcd-key", help="the key of --etcd-cert (PEM)")
    p.add_argument("-d", dest="declarations", action="append", required=True, metavar="JSON",
                   help="a declaration, as published: "
                        '{"queue": ..., "for": {"kind": ..., "resource": ..., "aliases": [...]}, "owns": [...]}; '
                        "repeat for more")
    args = p.parse_args()
    for name, env in TLS_ENV.items():
        if getattr(args, name) is None:
            setattr(args, name, os.environ.get(env, ""))
    endpoints = [e.strip() for e in args.etcd_endpoints.split(",") if e.strip()]
    try:
        decls = [parse(text) for text in args.declarations]
        etcd = Gateway(endpoints, tls_context(endpoints, args.etcd_cacert, args.etcd_cert, args.etcd_key))
    except (ValueError, ssl.SSLError) as e:
        p.error(str(e))
    try:
        written = publish(etcd, decls)
    except ValueError as e:
        p.error(str(e))
    except EtcdError as e:
        print(f"declare.py: {e}", file=sys.stderr)
        return 1
    for d, w in zip(decls, written):
        print(f"{d.key()} {'declared' if w else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
