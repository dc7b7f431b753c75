"""Redaction: every form a secret takes through HTTP and JSON, credential-shaped strings, and log records."""

from __future__ import annotations

import base64
import io
import json
import logging
from urllib.parse import quote

import pytest

from capserve.core.redaction import REDACTED, Redactor
from capserve.core.rollout.diagnosis import Diagnosis, Trouble
from capserve.core.urls import parse_endpoint_url
from capserve.tasks import secrets

KEY = "sk-live-Zq8/+tK3y=9xP"


@pytest.mark.parametrize(
    "text",
    [
        f"invalid key {KEY}",
        f"echo: {quote(KEY, safe='')}",
        f"json: {json.dumps({'k': KEY + chr(34)})}",
        f"repr: {('x', KEY)!r}",
        f"std: {base64.b64encode(KEY.encode()).decode()}",
        f"urlsafe: {base64.urlsafe_b64encode(KEY.encode()).decode()}",
    ],
)
def test_each_form_of_a_known_secret_is_replaced(text: str) -> None:
    out = Redactor([KEY]).redact(text)
    assert REDACTED in out
    assert KEY not in out and quote(KEY, safe="") not in out
    assert base64.b64encode(KEY.encode()).decode().rstrip("=") not in out


@pytest.mark.parametrize("prefix", ["", "a", "ab", "abc", "user:", "üser:"])
def test_a_secret_inside_a_longer_base64_string_is_found_at_any_byte_offset(prefix: str) -> None:
    header = base64.b64encode(f"{prefix}{KEY}".encode()).decode()
    out = Redactor([KEY]).redact(f"got {header} back")
    # Whatever the offset, the characters carrying only the secret's bits are gone.
    assert REDACTED in out and header not in out


def test_credential_shapes_are_redacted_whatever_their_value() -> None:
    # The Hub token is assembled here so the repository holds nothing shaped like a real one (secret scanners).
    hub_token = "hf_" + "abcdefghijklmnopqrstuvwxyz0123"
    out = Redactor().redact(
        "GET https://alice:pa55word@host:8000/v1 with Authorization: Bearer abcdef123456 "
        f"and Basic YWxpY2U6cGE1NXdvcmQ= and {hub_token}"
    )
    assert "pa55word" not in out and "alice" not in out
    assert "abcdef123456" not in out and "YWxpY2U6cGE1NXdvcmQ" not in out and "hf_abcdef" not in out
    assert "https://[redacted]@host:8000/v1" in out


def test_short_values_are_not_treated_as_secrets() -> None:
    assert Redactor(["abc", ""]).redact("abc is fine") == "abc is fine"


def test_json_like_data_is_redacted_everywhere() -> None:
    data = {"a": [KEY, {"b": f"x{KEY}x"}], KEY: 3, "n": 1, "t": (KEY,)}
    out = Redactor([KEY]).redact_data(data)
    assert KEY not in json.dumps(out) and out["n"] == 1 and isinstance(out["t"], tuple)


def test_endpoint_urls_lose_their_credentials() -> None:
    url = parse_endpoint_url("http://bob:s3cr%40t-value@127.0.0.1:8000/serving/", what="--url")
    assert url.base == "http://127.0.0.1:8000/serving"
    assert url.basic_auth() == "bob:s3cr@t-value"
    assert "s3cr" not in repr(url.password)


@pytest.fixture
def console() -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("capserve.test-redaction")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_log_records_are_redacted_at_creation_tracebacks_included(console: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = console
    secrets.install_log_redaction(console_tracebacks=True)
    secret = "tok-planted-in-a-log-0001"
    secrets.register_secret(secret)
    logger.warning("endpoint said %s", f"bad key {secret}")
    try:
        raise ValueError(f"body echoed {secret}")
    except ValueError:
        logger.exception("failed")
    text = stream.getvalue()
    assert secret not in text and text.count(REDACTED) >= 2 and "Traceback" in text


def test_without_debug_the_console_gets_no_traceback(console: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = console
    root = logging.getLogger()
    handler = logging.StreamHandler(io.StringIO())
    handler.stream.name = "<stderr>"  # type: ignore[attr-defined]
    root.addHandler(handler)
    try:
        secrets.install_log_redaction(console_tracebacks=False)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("capserve.test-console").error("it failed", exc_info=True)
        shown = handler.stream.getvalue()  # type: ignore[attr-defined]
        assert "it failed (run with --debug for the traceback)" in shown and "Traceback" not in shown
    finally:
        root.removeHandler(handler)
        secrets.install_log_redaction(console_tracebacks=True)


def test_vllms_argument_errors_keep_their_flags_and_lose_their_values() -> None:
    # What vLLM 0.32 prints when it refuses a command line (argparse's words), as the pod's log holds it.
    lines = [
        "vllm: error: unrecognized arguments: --hf_tokn opensesame-123 --api-k=opensesame-456",
        "vllm serve: error: argument --block-size: invalid int value: 'opensesame-789'",
        "vllm serve: error: argument --kv-cache-dtype: invalid choice: 'opensesame-0' (choose from 'auto', 'fp8')",
    ]
    redacted = [Redactor().redact(line) for line in lines]
    assert redacted == [
        f"vllm: error: unrecognized arguments: --hf_tokn {REDACTED} --api-k={REDACTED}",
        f"vllm serve: error: argument --block-size: invalid int value: {REDACTED}",
        f"vllm serve: error: argument --kv-cache-dtype: invalid choice: {REDACTED} (choose from 'auto', 'fp8')",
    ]


def test_a_crash_loop_diagnosis_quoting_vllms_refusal_repeats_no_value() -> None:
    found = Diagnosis(
        trouble=Trouble.CRASH_LOOP, pod="vllm-blue-0", container="vllm", message="restarted 3 times", fatal=True,
        log_tail=("usage: vllm [-h] ...", "vllm: error: unrecognized arguments: --hf_tokn opensesame-123"),
    )
    assert "opensesame" not in found.describe() and "--hf_tokn" in found.describe()
