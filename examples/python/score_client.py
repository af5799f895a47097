#!/usr/bin/python3
"""Scores candidates with a running `rankd serve` from Python.

Needs python3-grpcio and python3-grpc-tools (Debian packages). The client stubs are generated
from the repository's proto/ files at start-up, into a temporary directory.

  build/bin/rankd serve &                        # the embedded default: tiny model, 2 workers
  examples/python/score_client.py                # waits until the server is ready, then scores
  examples/python/score_client.py --target 127.0.0.1:50051 --query "rust engineer" \
      --item "Rust developer, Berlin" --item "Barista, Lisbon"
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc

from rankd_affinity import HEADER as AFFINITY_HEADER, affinity_key

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")


def generate_stubs(out_dir):
    """Writes rankd/v1/scorer_pb2*.py and rankd_health/health_pb2*.py into out_dir."""
    # health.proto goes under another path: a generated `grpc` package would shadow grpcio.
    os.makedirs(os.path.join(out_dir, "src", "rankd_health"))
    shutil.copy(os.path.join(PROTO_ROOT, "grpc", "health", "v1", "health.proto"),
                os.path.join(out_dir, "src", "rankd_health", "health.proto"))
    for root, proto in [(PROTO_ROOT, "rankd/v1/scorer.proto"),
                        (os.path.join(out_dir, "src"), "rankd_health/health.proto")]:
        rc = protoc.main(["protoc", "-I" + root, "--python_out=" + out_dir,
                          "--grpc_python_out=" + out_dir, os.path.join(root, proto)])
        if rc != 0:
            sys.exit("protoc failed on " + proto)
    sys.path.insert(0, out_dir)


def wait_until_ready(channel, health_pb2, health_pb2_grpc, timeout_s):
    """Polls grpc.health.v1 until rankd.v1.Scorer is SERVING (workers up, not draining)."""
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status = stub.Check(health_pb2.HealthCheckRequest(service="rankd.v1.Scorer"),
                                timeout=2).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            sys.exit("rankd.v1.Scorer is not SERVING after %d s" % timeout_s)
        time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("--query", default="senior python engineer in berlin")
    parser.add_argument("--item", action="append", dest="items",
                        help="a candidate (repeat); default: three job ads")
    parser.add_argument("--sigmoid", action="store_true", help="scores through a sigmoid")
    parser.add_argument("--wait-s", type=float, default=30, help="how long to wait for readiness")
    args = parser.parse_args()
    items = args.items or [
        "Senior Python engineer, Berlin. Django, PostgreSQL, Kubernetes.",
        "Barista wanted in Lisbon, morning shifts.",
        "Backend developer (Go, Python), remote within the EU.",
    ]

    out_dir = tempfile.mkdtemp(prefix="rankd-py-")
    try:
        generate_stubs(out_dir)
        from rankd.v1 import scorer_pb2, scorer_pb2_grpc
        from rankd_health import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(args.target) as channel:
            wait_until_ready(channel, health_pb2, health_pb2_grpc, args.wait_s)
            scorer = scorer_pb2_grpc.ScorerStub(channel)
            request = scorer_pb2.ScoreRequest(
                query=args.query,
                items=[scorer_pb2.Item(text=t, id="item-%d" % i) for i, t in enumerate(items)],
                apply_sigmoid=args.sigmoid,
                priority=scorer_pb2.PRIORITY_INTERACTIVE,
                request_id="python-example")
            try:
                start = time.perf_counter()
                # The query's hash: a balancer in front of many servers sends the calls for
                # one query to the same one (its caches hold the query's work).
                response = scorer.Score(request, timeout=10,
                                        metadata=((AFFINITY_HEADER, affinity_key(args.query)),))
                elapsed_ms = 1e3 * (time.perf_counter() - start)
            except grpc.RpcError as e:
                # INVALID_ARGUMENT names the field and the limit; UNAVAILABLE and
                # RESOURCE_EXHAUSTED are worth a retry.
                sys.exit("Score failed: %s: %s" % (e.code().name, e.details()))

            print("model %s, %d prefix + %d item tokens, %.1f ms" %
                  (response.model, response.usage.prefix_tokens, response.usage.item_tokens,
                   elapsed_ms))
            by_id = {"item-%d" % i: t for i, t in enumerate(items)}
            for s in sorted(response.scores, key=lambda s: -s.score):
                print("%9.4f  %s" % (s.score, by_id[s.id]))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
