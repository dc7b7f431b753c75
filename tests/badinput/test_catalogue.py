"""The bad-input catalogue: every input a careful user or an adversary tried, through the real CLI.

Each case asserts the exit code (2, BAD_INPUT, for all of them), a substring of the one message that
names the field or value, that no traceback was printed, and that nothing was bought or created:

- the CLI runs against the sandbox's moto server (with its Capacity Block and training-plan
  extensions): any AWS call it made would land there, and afterwards that AWS holds no bucket, no
  VPC besides the default ones, no cluster, no capacity reservation and no training plan, and it
  recorded no purchase;
- the campaign, evaluation and teardown flows and the sandbox are replaced by tripwires that fail
  the test if anything reaches them;
- the report folder given with ``--out`` was not created.

Cases that need the preflight stage (regions unknown to the partition, too little local disk for
the checkpoint, a reservation too short for the plan) are left to it.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from capserve_sandbox.aws import moto_sandbox
from capserve_sandbox.aws_ext import capacity as capacity_ext
from spec_changes import changed

from capserve.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
BASE: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
BASE_TEXT = EXAMPLE.read_text()
REGIONS = ("us-east-2", "us-west-2")

Content = bytes | str | dict[str, Any] | Callable[[], bytes]


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    message: str
    spec: Content | None = None
    env: dict[str, str] = field(default_factory=dict)


def text_with(old: str, new: str) -> str:
    assert old in BASE_TEXT
    return BASE_TEXT.replace(old, new, 1)


# A YAML "billion laughs": nine levels of nine aliases, 9⁹ strings once expanded.
BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)

UP = ["up", "{spec}", "--in-process", "--out", "{tmp}/out"]
SANDBOX = [*UP, "--sandbox"]
EVAL = ["eval", "--url", "http://127.0.0.1:9", "--model", "m", "--out-dir", "{tmp}/out"]

# Nowhere in boto3's chain holds a credential (empty variables count as unset).
NO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/capserve/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/capserve/config",
    "AWS_EC2_METADATA_DISABLED": "true",
}

CASES = [
    # --- the spec file itself -----------------------------------------------------------------------
    Case("missing-file", ["up", "{tmp}/nope.yaml", "--out", "{tmp}/out"], "cannot read the spec (No such file"),
    Case("spec-is-a-folder", ["up", "{tmp}", "--out", "{tmp}/out"], "is a directory"),
    Case("empty-file", UP, "the document is empty", b""),
    Case("latin-1-file", UP, "not UTF-8: byte 0xe9 at byte offset", ("# café\n" + BASE_TEXT).encode("latin-1")),
    Case("utf-16-file", UP, "the file is UTF-16", BASE_TEXT.encode("utf-16")),
    Case("nul-byte", UP, "character U+0000", BASE_TEXT.encode() + b"\x00"),
    Case(
        "yaml-syntax",
        UP,
        "not valid YAML at line 3, column 1: expected ',' or '}', but got '<stream end>' "
        "(while parsing a flow mapping that starts at line 2, column 8)",
        "name: k3-demo\nmodel: {catalog: kimi-k3\n",
    ),
    Case("json-list-at-top", UP, "the spec must be a mapping of fields", json.dumps([BASE], default=str)),
    Case("string-at-top", UP, "the spec must be a mapping of fields", '"k3-demo"'),
    Case("two-documents", UP, "not valid YAML", BASE_TEXT + "---\nname: other\n"),
    Case("json-list-for-capacity", UP, "capacity: Input should be a mapping of fields", changed(BASE, capacity=[])),
    Case("string-for-model", UP, "model: Input should be a mapping of fields", changed(BASE, model="kimi-k3")),
    Case("list-for-evaluation", UP, "evaluation: Input should be a mapping", changed(BASE, evaluation=[1])),
    Case("duplicate-top-key", UP, "duplicate key 'name' at line 3", BASE_TEXT + "name: other-campaign\n"),
    Case(
        "duplicate-budget-key",
        UP,
        "duplicate key 'max_upfront_fee_usd'",
        text_with("  max_upfront_fee_usd: 4000\n", "  max_upfront_fee_usd: 4000\n  max_upfront_fee_usd: 400000\n"),
    ),
    Case("alias-bomb", UP, "anchor &a: YAML anchors and aliases are not allowed", BOMB),
    Case("alias-bomb-sandbox", SANDBOX, "anchor &a", BOMB),
    Case(
        "anchor-and-alias",
        UP,
        "anchor &w",
        text_with("weights:\n", "weights: &w\n") + "x: *w\n",
    ),
    Case("merge-key", UP, "merge keys (<<) are not allowed", text_with("cluster:\n", "cluster:\n  <<: {kind: eks}\n")),
    Case("too-deep", UP, "nested more than 32 levels", BASE_TEXT + "deep: " + "[" * 40 + "]" * 40 + "\n"),
    Case("too-large", UP, "more than a spec may have", BASE_TEXT + "#" + "x" * 300_000 + "\n"),
    # --- numbers, booleans, strings: never coerced -------------------------------------------------
    Case("true-as-instance-count", UP, "capacity.instance_count: Input should be a valid integer (got true, a boolean)",
         changed(BASE, capacity__instance_count=True)),
    Case("string-instance-count", UP, 'capacity.instance_count: Input should be a valid integer (got "2", a string)',
         changed(BASE, capacity__instance_count="2")),
    Case("fraction-instance-count", UP, "capacity.instance_count: Input should be a valid integer",
         changed(BASE, capacity__instance_count=2.5)),
    Case("zero-instances", UP, "capacity.instance_count: Input should be greater than or equal to 1",
         changed(BASE, capacity__instance_count=0)),
    Case("too-many-instances", UP, "capacity.instance_count: Input should be less than or equal to 64",
         changed(BASE, capacity__instance_count=100)),
    Case("string-budget", UP, "capacity.max_upfront_fee_usd: Input should be a valid number",
         changed(BASE, capacity__max_upfront_fee_usd="4000")),
    Case("yes-as-budget", UP, "capacity.max_upfront_fee_usd: Input should be a valid number (got true",
         text_with("  max_upfront_fee_usd: 4000\n", "  max_upfront_fee_usd: yes\n")),
    Case("string-duration", UP, "capacity.duration_hours: Input should be a valid integer",
         changed(BASE, capacity__duration_hours="24h")),
    Case("duration-not-whole-days", UP, "Capacity Blocks last whole days", changed(BASE, capacity__duration_hours=25)),
    Case("region-as-string", UP, "capacity.regions: Input should be a valid list",
         changed(BASE, capacity__regions="us-east-2")),
    Case("no-regions", UP, "capacity.regions: List should have at least 1 item", changed(BASE, capacity__regions=[])),
    Case("region-with-space", UP, "capacity.regions.0: String should match pattern",
         changed(BASE, capacity__regions=["mars north"])),
    Case("unknown-provider", UP, "capacity.provider: Input should be 'ec2-capacity-block'",
         changed(BASE, capacity__provider="spot")),
    Case("start-not-a-time", UP, "capacity.earliest_start: 'tomorrow' is not a time",
         changed(BASE, capacity__earliest_start="tomorrow")),
    Case("start-date-only", UP, "capacity.earliest_start: '2026-12-01' is a date without a time and offset",
         text_with("  earliest_start: now+1d ", "  earliest_start: 2026-12-01 ")),
    Case("start-without-timezone", UP, "capacity.earliest_start: '2026-12-01T11:30:00' has no UTC offset",
         changed(BASE, capacity__earliest_start="2026-12-01T11:30:00")),
    Case("window-too-short", UP, "is shorter than duration_hours=24", changed(BASE, capacity__latest_end="now+12h")),
    # Impossible instants, unquoted (YAML would build them itself) and quoted: one strict reader (core/instants.py).
    Case("february-29-in-2027", UP, "capacity.earliest_start: '2027-02-29T11:30:00Z': 2027-02 has no day 29",
         text_with("  earliest_start: now+1d ", "  earliest_start: 2027-02-29T11:30:00Z ")),
    Case("leap-second", UP, "capacity.earliest_start: '2027-01-10T11:29:60Z': second 60 (a leap second)",
         text_with("  earliest_start: now+1d ", "  earliest_start: 2027-01-10T11:29:60Z ")),
    Case("offset-25-hours", UP, "offset +25:00 is not a UTC offset",
         text_with("  earliest_start: now+1d ", "  earliest_start: 2027-01-10T11:30:00+25:00 ")),
    Case("quoted-offset-25-hours", UP, "offset +25:00 is not a UTC offset",
         changed(BASE, capacity__earliest_start="2027-01-10T11:30:00+25:00")),
    Case("relative-beyond-9999", UP, "capacity.latest_end: 'now+99999999999d' is beyond the year 9999",
         changed(BASE, capacity__latest_end="now+99999999999d")),
    Case("approval-above-budget", UP, "approval_threshold_usd is above max_upfront_fee_usd",
         changed(BASE, capacity__approval_threshold_usd=5000)),
    Case("training-plan-on-eks", UP, "set cluster.kind to 'hyperpod'",
         changed(BASE, capacity__provider="sagemaker-training-plan")),
    Case("typo-top-level", UP, "capacty: unknown field; allowed here: name, model, capacity",
         {**BASE, "capacty": {}}),
    Case("typo-nested", UP, "capacity.instnce_count: unknown field", changed(BASE, capacity__instnce_count=1)),
    Case("bad-name", UP, "name: String should match pattern", changed(BASE, name="K3 Demo!")),
    Case("number-as-name", UP, "name: Input should be a valid string (got 123, an integer)", changed(BASE, name=123)),
    Case("model-without-source", UP, "model: give 'catalog'", changed(BASE, model={"revision": "main"})),
    Case("hub-url-as-repo", UP, "model.repo: String should match pattern",
         changed(BASE, model__repo="https://huggingface.co/moonshotai/Kimi-K3")),
    Case("hub-host-without-scheme-as-repo", UP, "model.repo: String should match pattern",
         changed(BASE, model__repo="huggingface.co/moonshotai/Kimi-K3")),
    Case("bad-bucket", UP, "weights.s3_bucket: String should match pattern",
         changed(BASE, weights__s3_bucket="Bad_Bucket")),
    Case("no-weights", UP, "weights: Field required", changed(BASE, weights=...)),
    Case("list-for-cluster", UP, "cluster: Input should be a mapping of fields", changed(BASE, cluster=["eks"])),
    Case("fsx-node-target", UP, "weights.node_target: 'fsx' is not supported: capserve creates no FSx",
         changed(BASE, weights__node_target="fsx")),
    Case("internal-nlb", SANDBOX, "serving.endpoint_access: 'internal-nlb' is not supported",
         changed(BASE, serving__endpoint_access="internal-nlb")),
    Case("unquoted-kubernetes-version", UP, "put the value in quotes",
         text_with('  kubernetes_version: "1.34"', "  kubernetes_version: 1.30")),
    Case("number-in-extra-args", UP, "serving.extra_args.1: Input should be a valid string (got 8, an integer)",
         changed(BASE, serving__extra_args=["--tensor-parallel-size", 8])),
    Case("true-as-replicas", UP, "serving.replicas: Input should be a valid integer (got true",
         changed(BASE, serving__replicas=True)),
    Case("teardown-inside-aws-termination", UP, "teardown.hard_teardown_before_end_minutes",
         changed(BASE, teardown__hard_teardown_before_end_minutes=20)),
    Case("drain-after-teardown", UP, "must come before hard teardown",
         changed(BASE, teardown__drain_before_end_minutes=32)),
    Case("true-as-load-level", UP, "evaluation.load.concurrency_levels.0: Input should be a valid integer",
         changed(BASE, evaluation__load__concurrency_levels=[True, 4])),
    Case("string-for-ignore-eos", UP, "evaluation.load.ignore_eos: Input should be a valid boolean",
         changed(BASE, evaluation__load__ignore_eos="yes")),
    Case("error-rate-above-one", UP, "evaluation.gates.max_error_rate: Input should be less than or equal to 1",
         changed(BASE, evaluation__gates={"max_error_rate": 2})),
    Case("unknown-image-mode", UP, "evaluation.smoke.image: Input should be 'auto', 'required' or 'skip'",
         changed(BASE, evaluation__smoke={"image": "maybe"})),
    Case("zero-timeout", UP, "evaluation.timeout_s: Input should be greater than 0",
         changed(BASE, evaluation__timeout_s=0)),
    Case("load-the-client-cannot-drive", SANDBOX, "c100000: concurrency 100,000 is more than this client can drive",
         changed(BASE, evaluation__load__concurrency_levels=[1, 100_000])),
    # --- values that would only fail after a purchase -----------------------------------------------
    Case("nan-request-rate", UP, "evaluation.load.request_rates.0: NaN and infinity are not numbers",
         text_with("    request_rates: [8.0]", "    request_rates: [.nan]")),
    Case("infinite-budget", UP, "capacity.max_upfront_fee_usd: NaN and infinity",
         text_with("  max_upfront_fee_usd: 4000\n", "  max_upfront_fee_usd: .inf\n")),
    Case("prompt-beyond-the-context", UP, "more than the 262,144-token context the endpoint will serve",
         changed(BASE, evaluation__load__prompt={"tokens": 1_000_000})),
    Case("output-beyond-the-context", UP, "reach 1,000,128 tokens",
         changed(BASE, evaluation__load__output={"tokens": 1_000_000})),
    Case("min-serving-longer-than-the-block", UP, "cluster.min_serving_minutes 1440 is more than a 24 h block",
         changed(BASE, cluster__min_serving_minutes=1440)),
    Case("garbage-image", UP, "serving.image: not an image reference", changed(BASE, serving__image="vllm openai:::")),
    Case("upper-case-image", UP, "serving.image: not an image reference",
         changed(BASE, serving__image="vllm/VLLM-openai:x")),
    Case("dot-dot-weights-prefix", UP, "weights.s3_prefix: has an empty, '.' or '..' segment",
         changed(BASE, weights__s3_prefix="capserve/../other-team")),
    Case("doubled-slash-weights-prefix", UP, "weights.s3_prefix: has an empty",
         changed(BASE, weights__s3_prefix="capserve//weights")),
    Case("api-key-in-extra-args", UP, "serving.extra_args.1: --api-key is named like a credential",
         changed(BASE, serving__extra_args=["--trust-remote-code", "--api-key", "sekrit-value"])),
    Case("token-value-in-extra-args", UP, "serving.extra_args.0: this argument looks like a Hugging Face token",
         changed(BASE, serving__extra_args=["--some-flag=hf_abcdefghijklmnopqrstu"])),
    Case("upper-case-instance-type", UP, "did you mean 'p6-b300.48xlarge'?",
         changed(BASE, capacity__instance_type="P6-B300.48XLARGE")),
    Case("unknown-instance-type", UP, "capacity.instance_type: unknown instance type 'p9.huge'",
         changed(BASE, capacity__instance_type="p9.huge")),
    Case("markup-in-instance-type", UP, "unknown instance type 'p6[/bold].48xlarge'",
         changed(BASE, capacity__instance_type="p6[/bold].48xlarge")),
    Case("window-in-the-past", UP, "is over: move capacity.latest_end into the future",
         {**changed(BASE, capacity__earliest_start="2020-01-01T00:00:00Z"),
          "capacity": {**BASE["capacity"], "earliest_start": "2020-01-01T00:00:00Z",
                       "latest_end": "2020-02-01T00:00:00Z"}}),
    Case("window-in-the-year-9999", UP, "more than 8 weeks ahead",
         {**BASE, "capacity": {**BASE["capacity"], "earliest_start": "9999-01-01T00:00:00Z",
                               "latest_end": "9999-02-01T00:00:00Z"}}),
    Case("window-without-an-11-30-start", UP, "blocks start and end at 11:30 UTC",
         {**BASE, "capacity": {**BASE["capacity"], "earliest_start": "now+2d", "latest_end": "now+3d"}}),
    Case("octal-minutes", UP, "'0060' has a leading zero, which YAML 1.1 reads as octal (it would be 48)",
         text_with("  min_serving_minutes: 120", "  min_serving_minutes: 0060")),
    Case("base-60-minutes", UP, "'2:00' is a base-60 number in YAML 1.1 (it would read as 120)",
         text_with("  min_serving_minutes: 120", "  min_serving_minutes: 2:00")),
    Case("set-of-regions", UP, "the YAML type !!set is not allowed",
         text_with("  regions: [us-east-2, us-west-2]", "  regions: !!set {us-east-2, us-west-2}")),
    Case("true-as-a-setting-duration", UP, "settings: bring_up.poll_seconds: Input should be a valid number",
         {**BASE, "settings": {"bring_up": {"poll_seconds": True}}}),
    Case("string-as-a-setting-number", UP, "Input should be a valid number",
         {**BASE, "settings": {"bring_up": {"poll_seconds": "5"}}}),
    Case("golden-file-missing", UP, "cannot read golden file",
         changed(BASE, evaluation__quality={"golden_path": "/nonexistent/golden.jsonl"})),
    Case("golden-file-a-device", UP, "is not a regular file",
         changed(BASE, evaluation__quality={"golden_path": "/dev/zero"})),
    Case("spec-a-device", ["up", "/dev/zero", "--in-process", "--out", "{tmp}/out"], "is not a regular file"),
    Case("eval-golden-a-device", [*EVAL, "--golden", "/dev/zero"], "is not a regular file"),
    Case("plan-config-a-device", ["plan", "x", "--instance-type", "p6-b300.48xlarge", "--config", "/dev/zero"],
         "--config /dev/zero: is not a regular file"),
    Case("plan-config-a-json-list", ["plan", "x", "--instance-type", "p6-b300.48xlarge", "--config", "{spec}"],
         "config", "[1, 2]"),
    # --- values EKS, IAM, the registry or the endpoint would refuse only after the purchase ---------------------
    Case("catalog-id-in-capitals", UP, "model.catalog: unknown catalog model 'KIMI-K3': did you mean 'kimi-k3'?",
         changed(BASE, model__catalog="KIMI-K3")),
    Case("full-width-letter-in-an-arn", UP, "cluster.admin_principals: has the character U+FF41",
         changed(BASE, cluster__admin_principals=["arn:aws:iam::123456789012:role/\uff41dmin"])),
    Case("kubernetes-version-eks-lacks", UP, "cluster.kubernetes_version: EKS has no Kubernetes version '1.39'",
         changed(BASE, cluster__kubernetes_version="1.39")),
    Case("upper-case-registry-namespace", UP, "'Vllm' has upper-case letters, so it is read as a registry host",
         changed(BASE, serving__image="Vllm/vllm-openai:v0.32.0")),
    Case("upper-case-registry-host", UP, "the registry host 'Registry.Example.COM' has upper-case letters",
         changed(BASE, serving__image="Registry.Example.COM/vllm/vllm-openai:v0.32.0")),
    Case("bidi-override-in-served-name", UP, "serving.served_model_name: has the invisible character U+202E",
         changed(BASE, serving__served_model_name="kimi\u202ek3")),
    Case("control-character-in-served-name", UP, "serving.served_model_name: has the invisible character U+0007",
         changed(BASE, serving__served_model_name="kimi\u0007k3")),
    Case("open-loop-longer-than-the-timeout", UP, "the largest that fits is 7,200",
         changed(BASE, evaluation__load={**BASE["evaluation"]["load"], "open_loop_requests": 100_000})),
    # --- options of `capserve up` -------------------------------------------------------------------
    Case("evaluate-url-without-scheme", [*UP, "--evaluate-url", "127.0.0.1:8000"],
         "--evaluate-url: '127.0.0.1:8000' has no scheme", BASE_TEXT),
    Case("evaluate-url-ftp", [*UP, "--evaluate-url", "ftp://host/x"], "scheme 'ftp' is not supported", BASE_TEXT),
    Case("evaluate-url-bad-port", [*UP, "--evaluate-url", "http://host:99999"], "is not a valid URL", BASE_TEXT),
    Case("evaluate-url-no-host", [*UP, "--evaluate-url", "http://"], "has no valid host name", BASE_TEXT),
    Case("evaluate-url-with-key-in-query", [*UP, "--evaluate-url", "http://host:8000/?api_key=sk-123"],
         "takes no query or fragment", BASE_TEXT),
    Case("evaluate-url-with-v1", [*UP, "--evaluate-url", "http://host:8000/v1"], "without /v1", BASE_TEXT),
    Case("evaluate-url-with-space", [*UP, "--evaluate-url", "http://host :8000"], "contains white space", BASE_TEXT),
    Case("api-key-variable-unset", [*UP, "--api-key-env", "CAPSERVE_TEST_UNSET_KEY"],
         "environment variable CAPSERVE_TEST_UNSET_KEY is not set", BASE_TEXT),
    Case("api-key-variable-empty", [*UP, "--api-key-env", "CAPSERVE_TEST_EMPTY_KEY"],
         "CAPSERVE_TEST_EMPTY_KEY is not set or is empty", BASE_TEXT, {"CAPSERVE_TEST_EMPTY_KEY": ""}),
    Case("api-key-value-instead-of-name", [*UP, "--api-key-env", "sk-live-0123456789"],
         "is not an environment variable name", BASE_TEXT),
    Case("api-key-and-url-credentials", [*UP, "--api-key-env", "K", "--evaluate-url", "http://u:pw@host:8000"],
         "an endpoint takes one Authorization header", BASE_TEXT, {"K": "sk-test-key-1"}),
    # On a Prefect server (the default) the evaluation is the scheduled serve run's, of what it rolled out:
    # an endpoint or key given here would be dropped, so they are refused (docs/cli.md).
    Case("evaluate-url-on-a-server", ["up", "{spec}", "--out", "{tmp}/out", "--evaluate-url", "http://host:8000"],
         "--evaluate-url: only with --in-process", BASE_TEXT),
    Case("api-key-env-on-a-server", ["up", "{spec}", "--out", "{tmp}/out", "--api-key-env", "K"],
         "--api-key-env: only with --in-process", BASE_TEXT, {"K": "sk-test-key-1"}),
    Case("api-key-env-without-an-endpoint", [*UP, "--api-key-env", "K"],
         "--api-key-env names the key of the endpoint given with --evaluate-url", BASE_TEXT, {"K": "sk-test-key-1"}),
    Case("out-is-a-file", ["up", "{spec}", "--out", "{spec}"], "exists and is not a folder", BASE_TEXT),
    Case("out-under-a-file", ["up", "{spec}", "--out", "{spec}/out"], "--out: cannot write to", BASE_TEXT),
    Case("out-not-creatable", ["up", "{spec}", "--out", "/proc/capserve-out"], "--out: cannot write to", BASE_TEXT),
    # Credentials are checked (STS) before any server starts or anything is planned.
    Case("no-aws-credentials", UP, "no usable AWS credentials (NoCredentialsError", BASE_TEXT, NO_CREDENTIALS),
    Case("aws-profile-unknown", UP, "The config profile (capserve-no-such-profile) could not be found", BASE_TEXT,
         {**NO_CREDENTIALS, "AWS_PROFILE": "capserve-no-such-profile"}),
    Case("rehearse-no-aws-credentials", ["rehearse", "{spec}", "--out", "{tmp}/out"],
         "no usable AWS credentials (NoCredentialsError", BASE_TEXT, NO_CREDENTIALS),
    Case("unknown-option", [*UP, "--sandboxx"], "unrecognized arguments: --sandboxx", BASE_TEXT),
    Case("spec-argument-missing", ["up"], "the following arguments are required: spec"),
    # --- `capserve down` ----------------------------------------------------------------------------
    Case("down-bad-spec", ["down", "{spec}"], "capacity.instance_count", changed(BASE, capacity__instance_count=True)),
    Case("down-missing-spec", ["down", "{tmp}/nope.yaml"], "cannot read the spec"),
    Case("down-bad-region", ["down", "{spec}", "--region", "mars north"], "is not an AWS region name", BASE_TEXT),
    # --- `capserve eval` ----------------------------------------------------------------------------
    Case("eval-url-without-scheme", ["eval", "--url", "127.0.0.1:8000", "--model", "m"],
         "--url: '127.0.0.1:8000' has no scheme"),
    Case("eval-url-with-fragment", ["eval", "--url", "http://h:8000/#k", "--model", "m"], "takes no query or fragment"),
    Case("eval-concurrency-zero", [*EVAL, "--concurrency", "0"], "every level must be at least 1"),
    Case("eval-concurrency-not-numbers", [*EVAL, "--concurrency", "1,two"],
         "is not a comma-separated list of integers"),
    Case("eval-concurrency-100000", [*EVAL, "--concurrency", "100000"], "concurrency 100,000 is more than this client"),
    Case("eval-rate-too-high", [*EVAL, "--rates", "1e9", "--concurrency", ""], "more than this client can start"),
    Case("eval-rate-zero", [*EVAL, "--rates", "0"], "every rate must be a finite number above 0"),
    Case("eval-timeout-zero", [*EVAL, "--timeout", "0"], "give a number of seconds above 0"),
    Case("eval-timeout-not-a-number", [*EVAL, "--timeout", "soon"], "is not a number of seconds"),
    Case("eval-spec-missing", [*EVAL, "--spec", "{tmp}/nope.json"], "cannot read the spec"),
    Case("eval-spec-json-list", [*EVAL, "--spec", "{spec}"], "not a list", "[1, 2]"),
    Case("eval-spec-true-as-processes", [*EVAL, "--spec", "{spec}"],
         "load.processes: Input should be a valid integer (got true", '{"load": {"processes": true}}'),
    Case("eval-spec-duplicate-key", [*EVAL, "--spec", "{spec}"], "duplicate key 'load'", '{"load": {}, "load": {}}'),
    Case("eval-spec-list-for-load", [*EVAL, "--spec", "{spec}"], "'load' and 'quality' must be mappings",
         '{"load": [1]}'),
    Case("eval-spec-not-utf8", [*EVAL, "--spec", "{spec}"], "not UTF-8", b'{"notes": "\xff"}'),
    Case("eval-api-key-variable-unset", [*EVAL, "--api-key-env", "CAPSERVE_TEST_UNSET_KEY"], "is not set or is empty"),
    Case("eval-golden-missing", [*EVAL, "--golden", "{tmp}/nope.jsonl"], "--golden: cannot read golden file"),
    Case("eval-golden-not-utf8", [*EVAL, "--golden", "{spec}"], "is not UTF-8", b'{"id": "\xff"}\n'),
    Case("eval-out-dir-not-writable", [*EVAL[:-2], "--out-dir", "/proc/capserve-eval"], "--out-dir: cannot write to"),
    Case("eval-unknown-profile", [*EVAL, "--profile", "everything"], "invalid choice: 'everything'"),
    Case("eval-zero-processes", [*EVAL, "--processes", "0"], "must be at least 1"),
    # --- `capserve plan` and the command itself -----------------------------------------------------
    Case("plan-hub-endpoint-without-scheme",
         ["plan", "org/repo", "--instance-type", "p6-b300.48xlarge", "--hub-endpoint", "huggingface.co"],
         "has no scheme; write http://huggingface.co"),
    Case("plan-unknown-model", ["plan", "no-such-model", "--instance-type", "p6-b300.48xlarge"], "unknown model"),
    Case("plan-unknown-instance", ["plan", "kimi-k3", "--instance-type", "p9.huge"], "unknown instance type"),
    Case("sandbox-env-file-a-folder", ["sandbox", "--env-file", "{tmp}"], "is a folder; give the path of a file"),
    Case("sandbox-env-file-under-proc", ["sandbox", "--env-file", "/proc/capserve/worker.env"],
         "--env-file: cannot write to /proc/capserve"),
    Case("sandbox-empty-model", ["sandbox", "--model", ""], "argument --model: '' is empty"),
    Case("sandbox-bad-region", ["sandbox", "--region", "mars north"], "is not an AWS region name"),
    Case("eval-bidi-model", ["eval", "--url", "http://127.0.0.1:9", "--model", "m\u202e"],
         "argument --model: 'm\\u202e' has the invisible character U+202E"),
    Case("plan-catalog-id-in-capitals", ["plan", "KIMI-K3", "--instance-type", "p6-b300.48xlarge"],
         "did you mean 'kimi-k3'?"),
    Case("no-command", [], "the following arguments are required: COMMAND"),
    Case("unknown-command", ["frobnicate"], "invalid choice: 'frobnicate'"),
]


def _write(path: Path, content: Content) -> None:
    if isinstance(content, dict):
        path.write_text(yaml.safe_dump(content, sort_keys=False))
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(content())


class Tripwire:
    """Stands in for a flow or the sandbox: bad input must never reach it."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise AssertionError(f"bad input reached {self.name}")


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    """One sandbox AWS for the whole catalogue: nothing may ever be created in it."""
    with moto_sandbox(REGIONS[0]):
        yield
    _client.cache_clear()  # its clients point at this sandbox's port


@functools.cache
def _client(service: str, region: str) -> Any:
    """One client per service and region for the whole catalogue (the module's one sandbox AWS): each case asks
    the same questions, and a new client per question cost more than the questions."""
    return boto3.client(service, region_name=region)  # type: ignore[call-overload]


def assert_nothing_in_aws() -> None:
    # First what the CLI called on the extensions (the checks below call some of them too).
    assert capacity_ext.calls() == []
    for region in REGIONS:
        ec2 = _client("ec2", region)
        assert [v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"] if not v.get("IsDefault")] == []
        assert ec2.describe_capacity_reservations()["CapacityReservations"] == []
        assert _client("eks", region).list_clusters()["clusters"] == []
        assert _client("sagemaker", region).list_training_plans()["TrainingPlanSummaries"] == []
    assert _client("s3", REGIONS[0]).list_buckets()["Buckets"] == []


@pytest.fixture
def guarded(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Tripwire]]:
    monkeypatch.delenv("CAPSERVE_TEST_UNSET_KEY", raising=False)
    wires = []
    for module, name in (
        ("capserve.flows.campaign", "campaign"),
        ("capserve.flows.evaluate", "evaluate_endpoint"),
        ("capserve.flows.teardown", "teardown"),
        ("capserve.flows.rehearse", "rehearse"),
        ("capserve_sandbox.environment", "sandbox"),
        ("capserve.cli._server", "server_in_background"),  # the default mode's Prefect server
    ):
        wire = Tripwire(name)
        # By module object: `capserve.flows.teardown` the attribute is the flow, not its module.
        monkeypatch.setattr(importlib.import_module(module), name, wire)
        wires.append(wire)
    capacity_ext.reset()
    yield wires
    assert_nothing_in_aws()


def test_the_catalogue_is_big_enough_and_ids_are_unique() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_message_exit_2_and_nothing_is_created(
    case: Case,
    tmp_path: Path,
    guarded: list[Tripwire],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "spec.yaml"
    if case.spec is not None:
        _write(spec, case.spec)
    argv = [a.replace("{spec}", str(spec)).replace("{tmp}", str(tmp_path)) for a in case.argv]
    with monkeypatch.context() as env:  # the case's environment for the command only, not for the checks after it
        for name, value in case.env.items():
            env.setenv(name, value)
        try:
            code = main(argv)
        except SystemExit as exc:  # the argument parser's own usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    assert code == 2, f"exit {code}\n{err}"
    assert case.message in " ".join(err.split()), err  # rich may wrap a long line on a narrow terminal
    assert "Traceback" not in out + err
    assert [w.name for w in guarded if w.calls] == []
    assert not (tmp_path / "out").exists()


# Every command that talks to a far end, with that far end not answering, runs outside the test session's process
# (Prefect reads its settings once per process, and the test session holds a harness of its own): an unreachable
# service or a temporary server that starts too slowly is exit 4 with one line, a missing server is exit 2; never
# exit 5. The commands that share an environment share a process (`_run_in_one_process`), one after another, each
# with its own stderr and exit code: starting Python and importing the CLI cost more than most commands.
NOWHERE = "http://127.0.0.1:9"
SUBPROCESS_CASES = [
    Case("forward-events-without-prefect-api-url", ["forward-events", "--region", "us-east-2", "--polls", "1"],
         "PREFECT_API_URL is not set"),
    Case("forward-events-prefect-unreachable", ["forward-events", "--region", "us-east-2", "--polls", "1"],
         f"cannot reach the Prefect API at {NOWHERE}/api", env={"PREFECT_API_URL": f"{NOWHERE}/api"}),
    Case("eval-temporary-server-too-slow", ["eval", "--url", NOWHERE, "--model", "m", "--profile", "smoke",
                                            "--out-dir", "{tmp}/out"],
         "Prefect's temporary server did not start within its timeout",
         env={"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "0"}),
]
SPEC_ARG = str(EXAMPLE)
SUBPROCESS_CASES += [
    # Every other command that talks to a far end, with that far end unreachable: exit 4 and one line.
    Case("automations-prefect-unreachable", ["automations", "register"], "cannot reach http://127.0.0.1:9/api",
         env={"PREFECT_API_URL": f"{NOWHERE}/api"}),
    Case("deploy-prefect-unreachable", ["deploy"], "cannot reach http://127.0.0.1:9/api",
         env={"PREFECT_API_URL": f"{NOWHERE}/api"}),
    Case("status-aws-unreachable", ["status", "k3-demo", "--region", "us-east-2"], "Could not connect to the endpoint"),
    Case("down-aws-unreachable", ["down", SPEC_ARG, "--dry-run"], "Could not connect to the endpoint"),
    Case("up-aws-unreachable", ["up", SPEC_ARG, "--in-process", "--out", "{tmp}/out"],
         "Could not connect to the endpoint"),
    Case("rehearse-aws-unreachable", ["rehearse", SPEC_ARG, "--out", "{tmp}/out"], "Could not connect to the endpoint"),
]
EXPECTED_CODE = {"forward-events-without-prefect-api-url": 2}


# Runs each command of a JSON list [[id, argv, stderr file], ...] (argv[1]) with fd 2 sent to its own file, and writes
# {id: exit code} to argv[2]. At the descriptor, so what a logger or a child process writes counts too.
_RUNNER = """
import json, os, sys
from capserve.cli import main
codes = {}
for case_id, argv, err_path in json.loads(sys.argv[1]):
    saved = os.dup(2)
    with open(err_path, "wb") as err:
        os.dup2(err.fileno(), 2)
    try:
        try:
            codes[case_id] = main(argv)
        except SystemExit as exc:
            codes[case_id] = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
with open(sys.argv[2], "w") as out:
    json.dump(codes, out)
"""


@pytest.fixture(scope="module")
def unreachable_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int | None, str]]:
    """Each command of SUBPROCESS_CASES run once: its exit code and stderr, by case id."""
    groups: dict[tuple[tuple[str, str], ...], list[Case]] = {}
    for case in SUBPROCESS_CASES:
        groups.setdefault(tuple(sorted(case.env.items())), []).append(case)
    runs: dict[str, tuple[int | None, str]] = {}
    for index, (environment, cases) in enumerate(groups.items()):
        work = tmp_path_factory.mktemp(f"unreachable-{index}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_"))}
        env.update({
            "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "AWS_ENDPOINT_URL": NOWHERE, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1", "PYTHONPATH": os.pathsep.join(sys.path),
            **dict(environment),
        })
        plan = []
        for case in cases:
            (work / case.id).mkdir()
            argv = [a.replace("{tmp}", str(work / case.id)) for a in case.argv]
            plan.append([case.id, argv, str(work / case.id / "stderr")])
        codes_file = work / "codes.json"
        done = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(plan), str(codes_file)], env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        codes = json.loads(codes_file.read_text()) if codes_file.exists() else {}
        for case in cases:
            err = (work / case.id / "stderr").read_text() if (work / case.id / "stderr").exists() else ""
            runs[case.id] = (codes.get(case.id), err or done.stderr)
    return runs


@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[c.id for c in SUBPROCESS_CASES])
def test_missing_or_unreachable_services_are_one_line_and_never_exit_5(
    case: Case, unreachable_runs: dict[str, tuple[int | None, str]]
) -> None:
    code, stderr = unreachable_runs[case.id]
    assert code == EXPECTED_CODE.get(case.id, 4), stderr
    assert case.message in " ".join(stderr.split()) and "Traceback" not in stderr, stderr
