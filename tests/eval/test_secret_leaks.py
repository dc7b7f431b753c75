"""Planted secrets never come out: not on stdout/stderr, not in a file, not in the Prefect database.

Each test plants distinctive secrets where the issue found them leaking — an endpoint API key that the
endpoint echoes back in error bodies, credentials in the endpoint URL (echoed as a ``Basic`` header
and decoded), a Hub token in ``HF_TOKEN`` — runs the real CLI, and then greps everything the run
wrote: captured stdout and stderr (file descriptors, so child processes count), every file under the
output folder and Prefect's local result storage, and the Prefect database file of the test server
(with its write-ahead log), after draining Prefect's log and event workers. Each test also checks
that the endpoint really did echo the secret to us, so it cannot pass by not looking.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from capserve_sandbox.openai_server import Faults, SandboxConfig, serve

from capserve.cli import main
from tests.prefect_harness import prefect_test_server

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
API_KEY = "sk-planted-endpoint-key-7Q2x9ZvW"
# Assembled at run time so the repository holds nothing shaped like a real Hub token (secret scanners).
HUB_TOKEN = "hf_" + "planted" + "HubToken" + "Q2x9ZvW0123456789"
URL_USER, URL_PASSWORD = "capserve", "pw-planted-in-url-K8v3Lm"
SMALL_LOAD = {"concurrency_levels": [2], "request_rates": [], "requests_per_stream": 3, "min_requests": 6}


def forms(secret: str) -> list[bytes]:
    """The secret as is, URL-encoded and base64-encoded (whole)."""
    return [
        secret.encode(),
        quote(secret, safe="").encode(),
        base64.b64encode(secret.encode()).rstrip(b"="),
    ]


@pytest.fixture(scope="module", autouse=True)
def server_with_a_database_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This module's own Prefect server, its database in a file: the one the session shares keeps it in memory,
    where nothing could grep it for the planted secrets."""
    database = tmp_path_factory.mktemp("prefect") / "prefect.db"
    with prefect_test_server(database_url=f"sqlite+aiosqlite:///{database}"):
        yield


def prefect_files() -> list[Path]:
    """The test server's database (and WAL) and Prefect's local result storage, after a flush."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, PREFECT_SERVER_DATABASE_CONNECTION_URL

    APILogHandler().flush()
    EventsWorker.drain_all()
    database = Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split("///", 1)[1])
    assert database.exists()
    files = [p for p in database.parent.glob(database.name + "*") if p.is_file()]
    storage = Path(PREFECT_LOCAL_STORAGE_PATH.value())
    if storage.exists():
        files += [p for p in storage.rglob("*") if p.is_file()]
    return files


def leaks(secrets: list[str], text: str, files: list[Path]) -> list[str]:
    found = []
    for secret in secrets:
        for form in forms(secret):
            if form.decode() in text:
                found.append(f"{form!r} in stdout/stderr")
            found += [f"{form!r} in {path}" for path in files if form in path.read_bytes()]
    return found


def spec_file(tmp_path: Path) -> Path:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    data["evaluation"] = {"load": SMALL_LOAD, "quality": {"max_items": 6}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
def test_capserve_up_with_a_key_echoing_endpoint_and_a_hub_token_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CAPSERVE_TEST_ENDPOINT_KEY", API_KEY)
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    out = tmp_path / "out"
    endpoint = SandboxConfig(
        model="kimi-k3", api_key_env="CAPSERVE_TEST_ENDPOINT_KEY", faults=Faults(echo_credentials_rate=0.4), seed=5
    )
    with serve(endpoint) as url:
        code = main(
            [
                "up", str(spec_file(tmp_path)), "--sandbox", "--in-process", "--teardown-when-done", "--yes",
                "--out", str(out),
                "--evaluate-url", url, "--api-key-env", "CAPSERVE_TEST_ENDPOINT_KEY",
            ]
        )
    captured = capfd.readouterr()
    report = json.loads((out / "report.json").read_text())
    assert code in (0, 1, 3), captured.err
    # The key reached the endpoint (it answered 200s), and the endpoint did echo it back to us.
    evaluation = (out / "evaluation" / "evaluation.json").read_text()
    assert report["evaluation"]["smoke"][1]["status"] == "passed"
    assert "invalid credentials 'Bearer [redacted]'" in evaluation
    assert "report:" in captured.out and "TP 8" in captured.out  # the in-process run's summary
    files = [p for p in out.rglob("*") if p.is_file()] + prefect_files()
    assert leaks([API_KEY, HUB_TOKEN], captured.out + captured.err, files) == []


@pytest.mark.slow
def test_capserve_eval_with_credentials_in_the_url_leaks_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval"
    with serve(SandboxConfig(faults=Faults(echo_credentials_rate=0.5), seed=3)) as url:
        host = url.removeprefix("http://")
        code = main(
            [
                "eval", "--url", f"http://{URL_USER}:{URL_PASSWORD}@{host}", "--model", "sandbox-model",
                "--out-dir", str(out), "--concurrency", "2", "--rates", "", "--requests-per-stream", "3",
                "--min-requests", "6", "--quality-max-items", "6", "--output-tokens", "8", "--prompt-tokens", "8",
            ]
        )
    captured = capfd.readouterr()
    assert code in (1, 3), captured.err  # the echoed requests fail: not a pass
    evaluation = (out / "evaluation.json").read_text()
    assert "invalid credentials 'Basic [redacted]' (decoded: '[redacted]')" in evaluation
    assert json.loads(evaluation)["url"] == f"http://{host}"
    files = [p for p in out.rglob("*") if p.is_file()] + prefect_files()
    secrets = [URL_PASSWORD, f"{URL_USER}:{URL_PASSWORD}"]
    assert leaks(secrets, captured.out + captured.err, files) == []


@pytest.mark.parametrize("args", [["--hf_token", "planted-arg-pw-K8v3Lm"], ["--API_KEY=planted-arg-pw-K8v3Lm"]])
def test_capserve_up_with_a_credential_in_extra_args_refuses_it_and_leaks_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], args: list[str]
) -> None:
    # vLLM reads both as its credential flags (`_` for `-`); the value is shaped like nothing.
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    data["serving"]["extra_args"] = args
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    code = main(["up", str(spec), "--sandbox", "--in-process", "--teardown-when-done", "--yes", "--out", str(out)])
    captured = capfd.readouterr()
    assert code == 2 and "is named like a credential" in " ".join(captured.err.split()), captured.err
    files = [p for p in out.rglob("*") if p.is_file()] + prefect_files()
    assert leaks(["planted-arg-pw-K8v3Lm"], captured.out + captured.err, files) == []
