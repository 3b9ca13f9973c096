"""`.github/frognano.yml`: a repository's own settings for the bot.

The bot reads it from the default branch only (an issue author cannot change it
in a fork or a branch). Every key is optional; a bad file gets an error that
names the key and what is wrong, so it can be posted as a comment.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
)

from sandbox.services import DEFAULT_DATABASE, SERVICE_NAMES, ServiceSpec
from solver.limits import Limits
from solver.old_names import CONFIG_KEYS

CONFIG_PATH = ".github/frognano.yml"
# The most candidates (independent agents) one run may ask for, whatever the operator
# allows: each is a whole agent run (its own sandbox, model stream and test runs).
MAX_CANDIDATES = 8


class RepoConfigError(ValueError):
    """The per-repo config file is invalid; the message is fit to show a maintainer."""


class PostgresService(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: StrictInt | None = Field(default=None, ge=9, le=99,
                                      description="Major version; the newest installed if unset.")
    database: str = Field(default=DEFAULT_DATABASE, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
                          description="The database created for the tests (PGDATABASE).")


class RedisService(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Services(BaseModel):
    """`services:` (docs/SERVICES.md): started fresh in every sandbox of the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    postgresql: PostgresService | None = None
    redis: RedisService | None = None

    def specs(self) -> tuple[ServiceSpec, ...]:
        found = []
        if self.postgresql is not None:
            found.append(ServiceSpec("postgresql", self.postgresql.version,
                                     self.postgresql.database))
        if self.redis is not None:
            found.append(ServiceSpec("redis"))
        return tuple(found)


def _services_mapping(value: Any) -> Any:
    """`[postgresql, redis]` and `{postgresql: {version: 16}, redis: null}` alike, as a
    mapping of name -> settings (a bare name or null: the defaults)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        mapping: dict[Any, Any] = {}
        for item in value:
            mapping.update(item if isinstance(item, dict) else {item: {}})
        value = mapping
    if isinstance(value, dict):
        return {name: {} if settings is None else settings for name, settings in value.items()}
    return value


class RepoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    test: str | None = Field(default=None, min_length=1,
                             description="Command that runs the tests; autodetected if absent.")
    setup: str | None = Field(default=None, min_length=1,
                              description="Command run once with network before the agent, "
                                          "e.g. to install dependencies into /frognano/venv.")
    # The budgets: unset, the operator's preset's (solver/limits.py, FROGNANO_LIMITS).
    max_steps: int | None = Field(default=None, ge=1, le=1000,
                                  description="Model turns in all (default 150).")
    # A file of before names its old key (solver/old_names.py); it is read the same.
    max_rounds: int | None = Field(
        default=None, ge=1, le=20,
        validation_alias=AliasChoices("max_rounds", CONFIG_KEYS["max_rounds"]),
        description="Agent rounds: one, plus one per test run that still fails (default 3).")
    # Strict: YAML reads `yes` as True, which a lax int would take for 1.
    candidates: StrictInt = Field(
        default=1, ge=1, le=MAX_CANDIDATES,
        validation_alias=AliasChoices("candidates", CONFIG_KEYS["candidates"]),
        description="Independent agents (candidates) with different seeds; the smallest "
                    "passing change is published (capped by FROGNANO_MAX_CANDIDATES).")
    timeout_minutes: float | None = Field(default=None, gt=0, le=24 * 60,
                                          description="Wall time of a run (default 60).")
    test_timeout_minutes: float | None = Field(default=None, gt=0, le=24 * 60,
                                               description="One test run (default 15).")
    protected_paths: tuple[str, ...] = Field(
        default=(), description="Glob patterns of paths the bot must never change.")
    ci: Literal["skip", "run"] = Field(
        default="skip",
        description="skip: the bot's commit carries `[skip ci]`, so GitHub Actions' push and "
                    "pull_request workflows do not run model-written code with the "
                    "repository's secrets until a person pushes to the branch; run: they "
                    "run on the bot's push like on anyone's.")
    # Issue 23 §2's name for it is accepted too (solver/old_names.py).
    ci_fix_rounds: StrictInt = Field(
        default=2, ge=0, le=10,
        validation_alias=AliasChoices("ci_fix_rounds", CONFIG_KEYS["ci_fix_rounds"]),
        description="With `ci: run`: how many times a failed check on the bot's own PR "
                    "head starts a repair run before the bot stops and labels the PR "
                    "needs-human (0: never); its old name is read the same.")
    evidence: Literal["flag", "required"] = Field(
        default="flag",
        description="flag: a change no test shows fixes the issue (no test fails on the "
                    "base code and passes with it) is still proposed, labelled unverified; "
                    "required: it is refused, and the comment says why.")
    services: Services = Field(
        default_factory=Services,
        description="Test services (postgresql, redis) started fresh, from the worker's own "
                    "packages, inside every sandbox of the run; DATABASE_URL, PG*, REDIS_URL "
                    "say where (docs/SERVICES.md).")

    @field_validator("services", mode="before")
    @classmethod
    def _services_forms(cls, value: Any) -> Any:
        return _services_mapping(value)

    def limits_over(self, base: Limits) -> Limits:
        """`base` (the preset) with the budgets this file sets laid over it."""
        minutes = {"max_seconds": self.timeout_minutes, "test_timeout": self.test_timeout_minutes}
        return base.over({"max_steps": self.max_steps, "max_rounds": self.max_rounds,
                          **{name: None if value is None else 60 * value
                             for name, value in minutes.items()}})


def parse_repo_config(text: str | None) -> RepoConfig:
    """Parse the YAML text of the config file; None or an empty file gives the defaults."""
    if text is None or not text.strip():
        return RepoConfig()
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RepoConfigError(f"{CONFIG_PATH} is not valid YAML: {exc}") from None
    if data is None:
        return RepoConfig()
    if not isinstance(data, dict):
        raise RepoConfigError(
            f"{CONFIG_PATH} must be a mapping of settings, not a {type(data).__name__}")
    try:
        return RepoConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "(top level)"
            message = "unknown setting" if error["type"] == "extra_forbidden" else error["msg"]
            if error["type"] == "extra_forbidden" and error["loc"][:1] == ("services",) \
                    and len(error["loc"]) == 2:
                message = "unknown service; the services are: " + ", ".join(SERVICE_NAMES)
            # YAML reads `off`, `no` as False and `yes` as True: say what it read.
            if error["type"] in ("literal_error", "int_type"):
                message += f", not {error['input']!r}"
            problems.append(f"- `{where}`: {message}")
        raise RepoConfigError(f"{CONFIG_PATH} is invalid:\n" + "\n".join(problems)) from None
