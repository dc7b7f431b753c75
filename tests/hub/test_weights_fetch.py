"""Fetch + verify against the local Hub with injected faults (tasks called directly, no Prefect retries)."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
from capserve_sandbox.hub import TINY_K3, Faults, local_hub

from capserve.core.errors import PermanentError, RetryableError
from capserve.core.weights.listing import RepoListing
from capserve.core.weights.placement import Layout
from capserve.core.weights.plan import plan_weights
from capserve.tasks.weights.fetch import HF_DOWNLOAD_DIR, fetch_file, sweep_incomplete
from capserve.tasks.weights.hub import HubConnection, list_repo_files, read_hub_headers, resolve_revision
from capserve.tasks.weights.localfiles import MARKER_DIR

REPO = TINY_K3.repo
SHARD = "model-00002-of-00008.safetensors"


@pytest.fixture(autouse=True)
def _no_xet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_all(url: str, dest: Path) -> dict[str, int]:
    conn = HubConnection(endpoint=url)
    sha = resolve_revision.fn(conn, REPO, "main")
    listing = list_repo_files.fn(conn, REPO, sha)
    return {f.path: fetch_file.fn(conn, REPO, sha, f, dest).downloaded_bytes for f in listing.files}


def listing_at(url: str) -> RepoListing:
    conn = HubConnection(endpoint=url)
    return list_repo_files.fn(conn, REPO, resolve_revision.fn(conn, REPO, "main"))


def test_plan_reads_headers_only(tmp_path: Path) -> None:
    log: list[dict] = []
    with local_hub(log=log, faults=Faults(page_size=3)) as url:
        conn = HubConnection(endpoint=url)
        sha = resolve_revision.fn(conn, REPO, "main")
        listing = list_repo_files.fn(conn, REPO, sha)
        headers = read_hub_headers.fn(conn, REPO, sha)
    plan = plan_weights(listing, headers, Layout(nodes=2, expert_parallel=2))
    assert plan.num_experts == 8 and plan.reshard
    body_gets = [e for e in log if e.get("method") == "GET" and e.get("file", "").endswith(".safetensors")]
    assert body_gets and all(e["range"] and e["status"] == 206 for e in body_gets)  # ranged header reads only


def test_flipped_byte_is_caught_and_refetched(tmp_path: Path) -> None:
    with local_hub(faults=Faults(corrupt={SHARD: 1})) as url:
        downloaded = fetch_all(url, tmp_path)
        listing = listing_at(url)
    size = listing.file(SHARD).size
    assert downloaded[SHARD] == 2 * size  # first copy failed sha256, second was good
    assert sha256(tmp_path / SHARD) == listing.file(SHARD).sha256


def test_second_mismatch_is_permanent_and_names_the_file(tmp_path: Path) -> None:
    with local_hub(faults=Faults(corrupt={SHARD: 2})) as url, pytest.raises(PermanentError, match=SHARD):
        fetch_all(url, tmp_path)
    assert not (tmp_path / SHARD).exists()  # nothing unverified is left behind


@pytest.mark.parametrize("redirect", [False, True])
def test_dropped_connection_resumes_or_refetches_without_corruption(tmp_path: Path, redirect: bool) -> None:
    log: list[dict] = []
    with local_hub(faults=Faults(cut_after_bytes=300_000, cut_files=(SHARD,), redirect_lfs=redirect), log=log) as url:
        fetch_all(url, tmp_path)
        listing = listing_at(url)
    assert any(e.get("event") == "cut" for e in log)
    for f in listing.files:
        assert sha256(tmp_path / f.path) == (f.sha256 or sha256(tmp_path / f.path))


def test_rerun_downloads_nothing_and_killed_run_is_not_trusted(tmp_path: Path) -> None:
    log: list[dict] = []
    with local_hub(log=log) as url:
        first = fetch_all(url, tmp_path)
        assert sum(first.values()) > 0
        n = len(log)
        assert sum(fetch_all(url, tmp_path).values()) == 0
        assert not [e for e in log[n:] if "/resolve/" in e.get("path", "") or e.get("file")]

        # A "killed" run: an orphaned partial download, and a shard rewritten in place (same size, a byte
        # flipped) — huggingface_hub's own metadata would still call it complete.
        partial = tmp_path / HF_DOWNLOAD_DIR / "x.safetensors.0123.incomplete"
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(b"half")
        shard = tmp_path / SHARD
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 1
        shard.write_bytes(bytes(data))
        os.utime(shard, ns=(1, 1))
        assert sweep_incomplete.fn(tmp_path) == 1 and not partial.exists()
        again = fetch_all(url, tmp_path)
    assert again[SHARD] > 0 and sum(v for k, v in again.items() if k != SHARD) == 0
    assert (tmp_path / MARKER_DIR / f"{SHARD}.json").exists()


def test_transient_5xx_is_retried_by_the_client(tmp_path: Path) -> None:
    with local_hub(faults=Faults(fail_resolve_requests=2)) as url:
        conn = HubConnection(endpoint=url)
        sha = resolve_revision.fn(conn, REPO, "main")
        listing = list_repo_files.fn(conn, REPO, sha)
        config = listing.file("config.json")
        failures = 0
        while True:  # what Prefect's retry_condition does: retry only RetryableError
            try:
                result = fetch_file.fn(conn, REPO, sha, config, tmp_path)
                break
            except RetryableError:
                failures += 1
                assert failures <= 2
    assert result.size == config.size


def test_missing_repo_is_permanent() -> None:
    with local_hub() as url, pytest.raises(PermanentError, match="not found"):
        resolve_revision.fn(HubConnection(endpoint=url), "nobody/nothing", "main")


def test_progress_shows_in_a_terminal_and_in_the_ui(monkeypatch: pytest.MonkeyPatch) -> None:
    from capserve.tasks.weights import artifacts

    updates: list[float] = []
    monkeypatch.setattr(artifacts, "create_progress_artifact", lambda **_: uuid.uuid4())
    monkeypatch.setattr(artifacts, "update_progress_artifact", lambda artifact_id, progress: updates.append(progress))

    progress = artifacts.Progress("weights-download-x", 300, "x: fetch + verify", terminal=True)
    bar = progress._bar
    assert bar is not None
    progress.advance(100)
    progress.advance(200)
    assert updates == [pytest.approx(100 / 3), 100.0]
    assert bar.tasks[0].completed == 300
    progress.close()
    assert progress._bar is None


def test_hub_token_comes_from_the_environment_and_never_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    from capserve.core.weights.settings import WeightsSettings
    from capserve.tasks.weights.hub import hub_connection

    monkeypatch.setenv("HF_TOKEN", "hf_sandbox_secret_value")
    conn = hub_connection("http://127.0.0.1:1", None, WeightsSettings().hub_timeout_seconds)
    assert conn.secret() == "hf_sandbox_secret_value"
    assert "hf_sandbox_secret_value" not in repr(conn) + str(conn.model_dump())
    monkeypatch.delenv("HF_TOKEN")
    assert hub_connection("http://127.0.0.1:1", None, WeightsSettings().hub_timeout_seconds).secret() is False
