"""``capserve.tasks.aws.client``: one client per service, region, retry limit and AWS environment in a process,
each from a session of its own; every session shares botocore's data loader, and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from capserve.tasks.aws import client, new_client, session


def test_clients_share_the_loader_of_botocores_data_files() -> None:
    first, second = client("s3", "us-east-2"), client("ec2", "us-east-2")
    assert first._loader is second._loader  # parsed once per process, not per client
    assert session() is not session()  # but sessions stay per call: they are not thread safe


def test_each_client_reads_endpoint_and_credentials_from_the_environment_of_its_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFIRST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    before = client("s3", "us-east-2")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASECOND")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    after = client("s3", "us-east-2")
    assert before._request_signer._credentials.access_key == "AKIAFIRST"
    assert after._request_signer._credentials.access_key == "AKIASECOND"
    assert (before.meta.endpoint_url, after.meta.endpoint_url) == ("http://127.0.0.1:1", "http://127.0.0.1:2")


def test_a_data_path_of_its_own_gets_a_loader_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    default = client("s3", "us-east-2")
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    extended = client("s3", "us-east-2")
    assert extended._loader is not default._loader
    assert str(tmp_path) in extended._loader.search_paths


def test_the_same_service_region_and_environment_get_the_same_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    first = client("s3", "us-east-2")
    assert client("s3", "us-east-2") is first  # made once: a client costs its endpoint rules and model
    assert client("s3", "us-east-2", max_attempts=1) is not first  # another retry limit is another client
    assert client("s3", "eu-west-1") is not first
    assert new_client("s3", "us-east-2") is not first  # for a caller that changes its client (an event handler)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret")
    assert client("s3", "us-east-2") is not first  # other credentials: a client that signs with them
