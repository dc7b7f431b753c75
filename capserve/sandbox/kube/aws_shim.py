"""An ``aws`` command for the sandbox's tool containers: exactly the ``aws s3`` subcommands capserve's scripts use.

    aws s3 cp   <src> <dst> [--recursive] [--only-show-errors] [--quiet] [--no-progress]
    aws s3 sync <src> <dst> [--only-show-errors] [--quiet] [--no-progress] [--exact-timestamps]
    aws s3 ls   s3://bucket[/prefix] [--recursive]

Each talks to the sandbox's S3 through boto3 (``AWS_ENDPOINT_URL`` and credentials come from the
environment the kubelet gives the container). Anything else is refused loudly with the AWS CLI's
usage exit code (252), so a script that starts using another command fails in the sandbox first.
Output and exit codes follow the AWS CLI v2 (``download: s3://... to ...``; a missing key is
``fatal error: An error occurred (404) when calling the HeadObject operation: Not Found``, exit 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

USAGE_EXIT = 252
QUIET_FLAGS = {"--only-show-errors", "--quiet", "--no-progress"}
ACCEPTED_FLAGS = {"cp": QUIET_FLAGS | {"--recursive"}, "sync": QUIET_FLAGS | {"--exact-timestamps"},
                  "ls": {"--recursive"}}


def _refuse(argv: list[str]) -> int:
    print(
        f"aws: [ERROR]: the capserve sandbox's aws shim implements only `aws s3 cp|sync|ls` "
        f"(with {sorted(set().union(*ACCEPTED_FLAGS.values()))}); got `aws {' '.join(argv)}`",
        file=sys.stderr,
    )
    return USAGE_EXIT


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _client() -> Any:
    import boto3

    return boto3.client("s3", region_name=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))


def _keys(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        found += page.get("Contents") or []
    return found


def _download(s3: Any, bucket: str, key: str, target: Path, quiet: bool) -> None:
    if target.is_dir() or str(target).endswith("/"):
        target = target / key.rsplit("/", 1)[-1]
    target.parent.mkdir(parents=True, exist_ok=True)
    s3.download_file(bucket, key, str(target))
    if not quiet:
        print(f"download: s3://{bucket}/{key} to {target}")


def _upload(s3: Any, source: Path, bucket: str, key: str, quiet: bool) -> None:
    if not key or key.endswith("/"):
        key = key + source.name
    s3.upload_file(str(source), bucket, key)
    if not quiet:
        print(f"upload: {source} to s3://{bucket}/{key}")


def cp(source: str, target: str, recursive: bool, quiet: bool) -> int:
    s3 = _client()
    if source.startswith("s3://") and not target.startswith("s3://"):
        bucket, key = _split(source)
        if recursive:
            prefix = key.rstrip("/") + "/" if key else ""
            for item in _keys(s3, bucket, prefix):
                _download(s3, bucket, item["Key"], Path(target) / item["Key"][len(prefix):], quiet)
            return 0
        from botocore.exceptions import ClientError

        try:
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            print(f"fatal error: An error occurred ({code}) when calling the HeadObject operation: "
                  f"{'Not Found' if code == '404' else exc}", file=sys.stderr)
            return 1
        _download(s3, bucket, key, Path(target), quiet)
        return 0
    if target.startswith("s3://") and not source.startswith("s3://"):
        bucket, key = _split(target)
        path = Path(source)
        if recursive:
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                _upload(s3, file, bucket, f"{key.rstrip('/')}/{file.relative_to(path)}".lstrip("/"), quiet)
            return 0
        if not path.is_file():
            print(f"The user-provided path {source} does not exist.", file=sys.stderr)
            return 255
        _upload(s3, path, bucket, key, quiet)
        return 0
    print("aws: [ERROR]: the sandbox shim copies between S3 and local files only", file=sys.stderr)
    return USAGE_EXIT


def sync(source: str, target: str, quiet: bool) -> int:
    s3 = _client()
    if source.startswith("s3://") and not target.startswith("s3://"):
        bucket, key = _split(source)
        prefix = key.rstrip("/") + "/" if key else ""
        for item in _keys(s3, bucket, prefix):
            local = Path(target) / item["Key"][len(prefix):]
            if not local.is_file() or local.stat().st_size != item["Size"]:
                _download(s3, bucket, item["Key"], local, quiet)
        return 0
    if target.startswith("s3://") and not source.startswith("s3://"):
        bucket, key = _split(target)
        remote = {item["Key"]: item["Size"] for item in _keys(s3, bucket, key.rstrip("/") + "/" if key else "")}
        root = Path(source)
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            destination = f"{key.rstrip('/')}/{file.relative_to(root)}".lstrip("/")
            if remote.get(destination) != file.stat().st_size:
                _upload(s3, file, bucket, destination, quiet)
        return 0
    print("aws: [ERROR]: the sandbox shim syncs between S3 and local directories only", file=sys.stderr)
    return USAGE_EXIT


def ls(uri: str, recursive: bool) -> int:
    s3 = _client()
    bucket, key = _split(uri)
    items = _keys(s3, bucket, key)
    if not recursive:
        seen = set()
        for item in items:
            rest = item["Key"][len(key):]
            if "/" in rest:
                folder = rest.split("/", 1)[0] + "/"
                if folder not in seen:
                    seen.add(folder)
                    print(f"                           PRE {folder}")
                continue
            print(f"{item['LastModified']:%Y-%m-%d %H:%M:%S} {item['Size']:>10} {rest}")
    else:
        for item in items:
            print(f"{item['LastModified']:%Y-%m-%d %H:%M:%S} {item['Size']:>10} {item['Key']}")
    return 0 if items else 1


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "s3" or argv[1] not in ACCEPTED_FLAGS:
        return _refuse(argv)
    command = argv[1]
    flags = {a for a in argv[2:] if a.startswith("--")}
    positional = [a for a in argv[2:] if not a.startswith("--")]
    if flags - ACCEPTED_FLAGS[command]:
        return _refuse(argv)
    quiet = bool(flags & QUIET_FLAGS)
    if command == "ls":
        if len(positional) != 1 or not positional[0].startswith("s3://"):
            return _refuse(argv)
        return ls(positional[0], "--recursive" in flags)
    if len(positional) != 2:
        return _refuse(argv)
    if command == "cp":
        return cp(positional[0], positional[1], "--recursive" in flags, quiet)
    return sync(positional[0], positional[1], quiet)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
