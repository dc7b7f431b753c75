"""Settings from the environment of the process that runs the flows, read by pydantic-settings.

A setting is ``CAPSERVE_<SECTION>__<FIELD>`` (``__`` between levels, any case):
``CAPSERVE_BRING_UP__POLL_SECONDS=5``, ``CAPSERVE_RECORDS__BUCKET=my-records``,
``CAPSERVE_BRING_UP__KUBE__NODES_READY_TIMEOUT_S=3600``. Variables without ``__`` are not settings
(other capserve knobs use them, e.g. the sandbox's). A misspelt section or field is an error naming
the variable, not a silently ignored value: a timeout that does not apply is found only when it bites.
pydantic-settings ignores variables that name no field, so the names are checked against the model here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from capserve.core.errors import SpecError
from capserve.core.settings import Settings

if TYPE_CHECKING:
    from capserve.core.spec import CampaignSpec

ENV_PREFIX = "CAPSERVE_"
ENV_NESTED = "__"


class _FromEnvironment(BaseSettings, Settings):
    """``Settings`` as pydantic-settings reads them (docs.pydantic.dev/latest/concepts/pydantic_settings)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED, case_sensitive=False, extra="forbid", frozen=True
    )


class _SettingVariables(EnvSettingsSource):
    """The ``CAPSERVE_<SECTION>__<FIELD>`` variables of ``environ``: a ``CAPSERVE_X`` without ``__`` is no setting."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.variables = {name: value for name, value in environ.items() if _path(name)}
        super().__init__(_FromEnvironment)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The hook pydantic-settings' own dotenv source overrides to read another mapping than os.environ.
        return {name.lower(): value for name, value in self.variables.items()}


def settings_from_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """``Settings`` with every ``CAPSERVE_<SECTION>__<FIELD>`` variable of ``environ`` (default: this process's)."""
    source = _SettingVariables(os.environ if environ is None else environ)
    unknown = sorted(name for name in source.variables if not _names_a_field(_path(name)))
    if unknown:
        raise SpecError("settings from the environment: " + "; ".join(f"{name}: unknown setting" for name in unknown))
    try:
        return Settings().updated(source())
    except ValidationError as exc:
        problems = [f"{_variable(source.variables, err['loc'])}: {err['msg']}" for err in exc.errors(include_url=False)]
        raise SpecError("settings from the environment: " + "; ".join(problems)) from None


def settings_for(spec: CampaignSpec, base: Settings | None = None) -> Settings:
    """The settings of one run of ``spec``: ``base`` (default: the environment's) with the spec's ``settings:`` block
    on top. Called once per run; the run carries the result to its stages (``CampaignContext.settings``)."""
    return (base or settings_from_environment()).for_campaign(spec.campaign_settings())


@cache
def process_settings() -> Settings:
    """The environment's settings, read once for what is fixed per process: the retry policies (Prefect fixes a
    task's retries when the task is made, at import, and a process's tasks serve every campaign it runs) and what
    boto3 clients are made with. A campaign's ``settings:`` block does not reach these."""
    return settings_from_environment()


def _path(name: str) -> tuple[str, ...]:
    """The field path a variable names (empty: not a setting)."""
    upper = name.upper()
    if not upper.startswith(ENV_PREFIX) or ENV_NESTED not in upper:
        return ()
    return tuple(part.lower() for part in upper.removeprefix(ENV_PREFIX).split(ENV_NESTED))


def _names_a_field(path: tuple[str, ...]) -> bool:
    """True when ``path`` leads through sections of ``Settings`` to one of their fields."""
    model: type[BaseModel] | None = Settings
    for part in path:
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return True


def _variable(variables: Mapping[str, str], loc: tuple[int | str, ...]) -> str:
    """The variable an error is about (the first one under that path)."""
    path = tuple(str(part) for part in loc)
    for name in sorted(variables):
        if _path(name)[: len(path)] == path:
            return name
    return ENV_PREFIX + ENV_NESTED.join(path).upper()


HUB_ENDPOINT_ENV = "CAPSERVE_HUB_ENDPOINT"


def hub_endpoint_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """The Hub endpoint scheduled runs use (``CAPSERVE_HUB_ENDPOINT``; unset: the block's or huggingface.co).

    A scheduled run gets only the campaign id, region and reservation id, so a worker serving the sandbox's
    local Hub says so in its environment (``capserve sandbox`` prints it).
    """
    source = os.environ if environ is None else environ
    return source.get(HUB_ENDPOINT_ENV) or None
