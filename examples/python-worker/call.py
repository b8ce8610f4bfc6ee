#!/usr/bin/env python3
"""A stand-in for grpcurl on Baton's APIs, for machines without grpcurl.

    call.py [-plaintext] [-d JSON] HOST:PORT SERVICE/METHOD

takes grpcurl's arguments and prints the answer as grpcurl does (protobuf's
JSON mapping: lowerCamelCase names, 64-bit integers and bytes as strings).
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
    p.add_argument("-plaintext", action="store_true", help="no TLS (the only mode here)")
    p.add_argument("-d", dest="data", default="{}", help="the request as JSON")
    p.add_argument("-max-time", dest="max_time", type=float, default=60.0, help="seconds")
    p.add_argument("--stubs", default=str(Path(__file__).resolve().parent / "gen"))
    p.add_argument("addr")
    p.add_argument("method", help="e.g. baton.queue.v1.QueueService/Lease")
    args = p.parse_args()
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
    with grpc.insecure_channel(args.addr) as channel:
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
