"""Preflight parses the campaign's final `vllm serve` command line with vLLM's own rules, before anything is bought.

The same parser and snapshot the sandbox's kubelet plays pods with (capserve.core.vllm). Every refusal names the
spec field and the flag, and never the value the spec gave.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from capserve.core.catalog import get_instance_type, get_model
from capserve.core.errors import SpecError
from capserve.core.plain_env import argument_problems
from capserve.core.planner.plan import ServingPlan, plan_serving
from capserve.core.rollout.command import serve_command_lines, serve_command_problems
from capserve.core.rollout.config import rollout_config
from capserve.core.spec import CampaignSpec, load_spec
from capserve.core.vllm.parser import long_flag, snapshot
from capserve.core.vllm.versions import image_version, newest_version, versions

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k3-sandbox.yaml"
SECRET = "hf_" + "Q7wLk2ZpX9vRt4YbN8mC3sD6fGh1JaE5"


@pytest.fixture(scope="module")
def plan() -> ServingPlan:
    return plan_serving(get_model("kimi-k3"), get_instance_type("p6-b300.48xlarge"), context_length=262144,
                        concurrency=8)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> CampaignSpec:
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_text(EXAMPLE.read_text())
    return load_spec(path)


def serving(spec: CampaignSpec, **changes: Any) -> CampaignSpec:
    """The spec with serving fields set past the spec's own validators: what reaches preflight is the point."""
    return spec.model_copy(update={"serving": spec.serving.model_copy(update=changes)})


def test_the_example_command_line_passes(example: CampaignSpec, plan: ServingPlan) -> None:
    assert serve_command_problems(plan, example) == []


@pytest.mark.parametrize(
    ("changes", "field", "flag", "why", "value"),
    [
        ({"served_model_name": "-kimi"}, "serving.served_model_name", "--served-model-name",
         "expected at least one argument", "-kimi"),
        ({"extra_args": ["--this-flag-does-not-exist"]}, "serving.extra_args", "--this-flag-does-not-exist",
         "unrecognized argument", None),
        ({"extra_args": ["--block-size", "notanumber"]}, "serving.extra_args", "--block-size",
         "invalid int value: <value>", "notanumber"),
        ({"extra_args": ["--API-KEY=opensesame"]}, "serving.extra_args", "--API-KEY", "unrecognized argument",
         "opensesame"),
        ({"extra_args": ["--api", "opensesame"]}, "serving.extra_args", "--api",
         "ambiguous option: could match --api-key, --api-server-count", "opensesame"),
        ({"extra_args": ["--enforce-eager\n"]}, "serving.extra_args", "--enforce-eager\\n", "unrecognized argument",
         None),
        ({"extra_args": ["--kv-transfer-config",
                         '{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_passwd": "opensesame"}']},
         "serving.extra_args", "--kv-transfer-config",
         "1 validation error for KVTransferConfig kv_passwd Unexpected keyword argument", "opensesame"),
        ({"recipe": False, "extra_args": ["--enable-auto-tool-choice"]}, "serving.extra_args",
         "--enable-auto-tool-choice", "requires --tool-call-parser", None),
        ({"recipe": False, "extra_args": ["--enable-per-request-metrics", "--disable-log-stats"]},
         "serving.extra_args", "--enable-per-request-metrics", "requires engine statistics logging", None),
        ({"recipe": False, "extra_args": ["--enable-auto-tool-choice", "--tool-call-parser", "opensesame"]},
         "serving.extra_args", "--tool-call-parser", "requires tool_parser:<value> which has not been registered",
         "opensesame"),
    ],
)
def test_what_vllm_refuses_is_a_problem_naming_the_field_and_flag_never_the_value(
    example: CampaignSpec, plan: ServingPlan, changes: dict[str, Any], field: str, flag: str, why: str,
    value: str | None,
) -> None:
    [problem] = serve_command_problems(plan, serving(example, **changes))
    assert problem.startswith(f"{field}: vLLM 0.32.0 ")
    assert f"refuses {flag}: " in problem and why in problem and "on the paid block" in problem
    assert "\n" not in problem and (value is None or value not in problem)


def test_a_nul_byte_is_refused_before_the_parser(example: CampaignSpec, plan: ServingPlan) -> None:
    [problem] = serve_command_problems(plan, serving(example, extra_args=["--enforce\x00-eager"]))
    assert problem.startswith("serving.extra_args.0: holds a NUL byte") and "\x00" not in problem


def test_arguments_are_parsed_after_kubernetes_expands_the_environment(
    example: CampaignSpec, plan: ServingPlan
) -> None:
    good = serving(example, extra_args=["--block-size", "$(BLOCK)"], extra_env=(("BLOCK", "16"),))
    assert serve_command_problems(plan, serving(good, extra_env={"BLOCK": "16"})) == []
    [problem] = serve_command_problems(plan, serving(good, extra_env={"BLOCK": "sixteen"}))
    assert "refuses --block-size: invalid int value: <value>" in problem and "sixteen" not in problem


def test_the_checked_command_line_is_the_rendered_one(example: CampaignSpec, plan: ServingPlan) -> None:
    config = rollout_config(plan, example, model_repo="moonshotai/Kimi-K3", revision_sha="a" * 40,
                            node_bytes=plan.weight_bytes, splits_experts=False)
    [leader] = serve_command_lines(config).values()
    assert leader[:2] == ["--model", "/model/moonshotai/Kimi-K3"]
    assert "--api-key=capserve-preflight-key" in leader  # $(VLLM_API_KEY) expanded as the kubelet would
    assert leader[leader.index("--served-model-name") + 1] == "kimi-k3"


def test_both_roles_of_a_two_node_layout_are_checked(example: CampaignSpec) -> None:
    two = plan_serving(get_model("kimi-k3"), get_instance_type("p6-b200.48xlarge"), context_length=32768,
                       concurrency=4)
    spec = serving(example, image="vllm/vllm-openai:v0.32.0")
    config = rollout_config(two, spec, model_repo="moonshotai/Kimi-K3", revision_sha="a" * 40,
                            node_bytes=two.weight_bytes, splits_experts=False)
    lines = serve_command_lines(config)
    assert set(lines) == {"leader", "worker"} and "--headless" in lines["worker"]
    assert serve_command_problems(two, spec) == []


def test_the_image_tag_picks_the_snapshot_and_the_newest_stands_in_otherwise() -> None:
    assert versions() == ("0.32.0",) and newest_version() == "0.32.0"
    assert image_version("vllm/vllm-openai:v0.32.0") == ("0.32.0", True)
    assert image_version("docker.io/vllm/vllm-openai:0.32.0-cu130") == ("0.32.0", True)
    assert image_version("vllm/vllm-openai:v9.9.9") == ("0.32.0", False)
    assert image_version("registry:5000/vllm@sha256:" + "a" * 64) == ("0.32.0", False)
    assert snapshot("0.32.0")["vllm_version"] == "0.32.0"


def test_vllm_reads_an_unambiguous_abbreviation_as_its_flag() -> None:
    # argparse's default, which vLLM 0.32 keeps (measured with its parser: `--api-k x` sets api_key).
    assert long_flag("--api-k") == "--api-key" and long_flag("--hf_tok=x") == "--hf-token"
    assert long_flag("--api") is None and long_flag("--no-such-flag") is None


# --------------------------------------------------------------------- one secret rule, arguments and environment


PLAIN = "opensesame-42"  # a password shaped like nothing: only the flag's name says it is one


@pytest.mark.parametrize(
    "args",
    [
        ["--hf_token", PLAIN],
        ["--hf-token=" + PLAIN],
        ["--api_key=" + PLAIN],
        ["--API-KEY=" + PLAIN],
        ["--api-k", PLAIN],  # vLLM reads it as --api-key
        ["--hf-tok", PLAIN],
        ["--model-loader-extra-config", '{"token": "' + SECRET + '"}'],
        ["--trust-remote-code", "AKIA" + "Q7WLK2ZPX9VRT4YB"],
    ],
)
def test_a_credential_in_extra_args_is_refused_when_the_spec_is_read_without_its_value(
    tmp_path: Path, args: list[str]
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["serving"]["extra_args"] = args
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    message = str(refused.value)
    assert "serving.extra_args" in message and "must not be in the pod's arguments" in message
    assert all(secret not in message for secret in (PLAIN, SECRET, "Q7WLK2ZPX9VRT4YB")), message


def test_only_vllms_credential_flags_with_a_value_are_refused() -> None:
    # Every flag of vLLM 0.32 that takes a value, through the rule: the credential ones and no other.
    refused = set()
    for option in snapshot("0.32.0")["options"]:
        for flag in option["flags"]:
            if option["shape"] in ("flag", "boolean_optional"):
                assert argument_problems([flag], "x") == [], flag  # no value, no credential
            elif argument_problems([flag, "v"], "x"):
                refused.add(flag)
    assert refused == {"--api-key", "--hf-token", "--ssl-keyfile"}
    assert argument_problems(["--hf-token"], "x") == []  # alone: vLLM uses the token cached on the host
