"""boto3 client creation (not a test): ``capserve.tasks.aws.client`` against a fresh boto3 session per client.

  .venv/bin/python -m bench.aws_client_bench [--clients 40]

Every AWS call site in capserve makes its own session and client (sessions are not thread safe); what they
share is botocore's loader of its data files. The baseline is what capserve did before: a plain fresh
session per client. A campaign's flow-run process makes hundreds of clients (every poll of a reservation,
a node group, the record), so the ratio is CPU a run gives back to the work it is there for.
"""

from __future__ import annotations

import argparse
import os
import time

import boto3

from capserve.tasks.aws import client

SERVICES = ("ec2", "s3", "eks", "sts")


def cpu_per_client(make: object, count: int) -> float:
    start = time.process_time()
    for index in range(count):
        make(SERVICES[index % len(SERVICES)], "us-east-2")  # type: ignore[operator]
    return (time.process_time() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=40, help="clients made by each way")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")  # no call is made: clients only
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")

    def fresh(service: str, region: str) -> object:
        return boto3.session.Session().client(service, region_name=region)  # type: ignore[call-overload]

    client("s3", "us-east-2")  # the shared loader's first parse is paid once per process, as in a run
    baseline = cpu_per_client(fresh, args.clients)
    ours = cpu_per_client(client, args.clients)
    print(f"fresh session per client (baseline): {baseline * 1000:.1f} ms CPU per client")
    print(f"capserve client (shared loader):     {ours * 1000:.1f} ms CPU per client")
    print(f"ratio: {ours / baseline:.2f} of the baseline's CPU ({baseline / ours:.1f}x fewer)")


if __name__ == "__main__":
    main()
