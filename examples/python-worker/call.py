#!/usr/bin/env python3
"""A stand-in for grpcurl on Baton's APIs, for machines without grpcurl.

    call.py [-plaintext | -cacert CA [-cert CRT -key KEY] [-servername NAME]]
            [-d JSON] HOST:PORT SERVICE/METHOD

takes grpcurl's arguments and prints the answer as grpcurl does (protobuf's
JSON mapping: lowerCamelCase names, 64-bit integers and bytes as strings).
As grpcurl, it dials TLS unless -plaintext is given: against make run TLS=1,
-cacert data/certs/ca.crt -cert data/certs/admin.crt -key data/certs/admin.key.
Unlike grpcurl it needs the stubs of generate.sh instead of reflection, so it
knows only baton.queue.v1.QueueService and baton.observer.v1.ObserverService.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from google.protobuf import json_format, symbol_database

SERVICES = {  # service -> the generated module that defines it
    "baton.queue.v1.QueueService": "baton.queue.v1.queue_pb2",
    "baton.observer.v1.ObserverService": "baton.observer.v1.observer_pb2",
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-plaintext", action="store_true", help="no TLS")
    p.add_argument("-cacert", default="", help="CA bundle (PEM) that verifies the server (default: the system's roots)")
    p.add_argument("-cert", default="", help="client certificate (PEM), for mutual TLS")
    p.add_argument("-key", default="", help="the key of -cert (PEM)")
    p.add_argument("-servername", default="",
                   help="the name the server's certificate must carry, if not the host dialed")
    p.add_argument("-d", dest="data", default="{}", help="the request as JSON")
    p.add_argument("-max-time", dest="max_time", type=float, default=60.0, help="seconds")
    p.add_argument("--stubs", default=str(Path(__file__).resolve().parent / "gen"))
    p.add_argument("addr")
    p.add_argument("method", help="e.g. baton.queue.v1.QueueService/Lease")
    args = p.parse_args()
    if args.plaintext and (args.cacert or args.cert or args.key or args.servername):
        p.error("-plaintext excludes -cacert, -cert, -key and -servername")
    if bool(args.cert) != bool(args.key):
        p.error("-cert and -key go together")
    sys.path.insert(0, args.stubs)

    service, _, method = args.method.rpartition("/")
    if service not in SERVICES:
        p.error(f"unknown service {service!r}; known: {', '.join(SERVICES)}")
    module = __import__(SERVICES[service], fromlist=["DESCRIPTOR"])
    desc = module.DESCRIPTOR.services_by_name[service.rpartition(".")[2]].methods_by_name.get(method)
    if desc is None:
        p.error(f"{service} has no method {method!r}")
    db = symbol_database.Default()
    request_type = db.GetSymbol(desc.input_type.full_name)
    response_type = db.GetSymbol(desc.output_type.full_name)

    request = json_format.Parse(args.data, request_type())
    if args.plaintext:
        channel = grpc.insecure_channel(args.addr)
    else:
        def read(flag: str, path: str) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as e:
                p.error(f"{flag} {path}: {e.strerror}")
        creds = grpc.ssl_channel_credentials(root_certificates=read("-cacert", args.cacert),
                                             private_key=read("-key", args.key),
                                             certificate_chain=read("-cert", args.cert))
        options = []
        if args.servername:
            options = [("grpc.ssl_target_name_override", args.servername),
                       ("grpc.default_authority", args.servername)]
        channel = grpc.secure_channel(args.addr, creds, options=options)
    with channel:
        call = channel.unary_unary(f"/{service}/{method}",
                                   request_serializer=request_type.SerializeToString,
                                   response_deserializer=response_type.FromString)
        try:
            response = call(request, timeout=args.max_time)
        except grpc.RpcError as e:
            print(f"ERROR:\n  Code: {e.code().name.title().replace('_', '')}\n  Message: {e.details()}",
                  file=sys.stderr)
            return 1
    print(json_format.MessageToJson(response))
    return 0


if __name__ == "__main__":
    sys.exit(main())
