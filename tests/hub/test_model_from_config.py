"""The planner reads a model's real config.json at run time: from the Hub, or from a file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from capserve_sandbox.aws import patched_environ
from capserve_sandbox.hub import local_hub

from capserve.cli import main
from capserve.core.catalog import get_model
from capserve.core.catalog.hf_config import model_to_hf_config
from capserve.core.errors import PermanentError
from capserve.core.spec import ModelRef
from capserve.tasks.planning import model_from_hub, resolve_model

TINY = "capserve-sandbox/tiny-k3"


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    with patched_environ({"HF_HUB_DISABLE_XET": "1"}), local_hub() as url:
        yield url


def test_geometry_read_from_the_hub_matches_the_catalog_entry(hub: str) -> None:
    model = model_from_hub(TINY, endpoint=hub)
    catalog = get_model("tiny-k3")
    assert model.provenance == "config.json"
    assert (model.layers, model.moe, model.mla, model.kda) == (catalog.layers, catalog.moe, catalog.mla, catalog.kda)


def test_campaign_task_prefers_the_catalog_and_falls_back_to_the_hub(hub: str) -> None:
    assert resolve_model.fn(ModelRef(catalog="kimi-k3"), hub).name == "kimi-k3"
    assert resolve_model.fn(ModelRef(repo=TINY), hub).provenance == "config.json"


def test_a_missing_repo_is_a_permanent_error_that_says_what_to_check(hub: str) -> None:
    with pytest.raises(PermanentError, match=r"HTTP 404\): check model.repo"):
        model_from_hub("capserve-sandbox/absent", endpoint=hub)


def test_plan_cli_takes_a_hub_repo_or_a_config_file(
    hub: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", TINY, "--instance-type", "p5.48xlarge", "--hub-endpoint", hub, "--json"]) == 0
    from_hub = json.loads(capsys.readouterr().out)

    config = tmp_path / "config.json"
    config.write_text(json.dumps(model_to_hf_config(get_model("tiny-k3"))))
    assert main(["plan", "tiny", "--config", str(config), "--instance-type", "p5.48xlarge", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)

    assert from_hub["model_provenance"] == from_file["model_provenance"] == "config.json"
    assert from_hub["weight_bytes"] == from_file["weight_bytes"] > 0

    assert main(["plan", "x", "--config", str(tmp_path / "missing.json"), "--instance-type", "p5.48xlarge"]) == 2
    assert "missing.json: cannot read it (No such file or directory)" in capsys.readouterr().err
