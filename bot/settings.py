"""Every setting of every `frognano` command: one model, grouped, from the environment,
the App's credentials file under the state directory, or `.env`, read only by the
composition root (frognano/cli.py), which lays flags over it.

The variable names are the deployments' contract and stay as they are; the README's
settings table is generated from here (`python3 -m frognano.settings_doc`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from dotenv import dotenv_values
from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from solver.limits import PresetName
from solver.old_names import SETTINGS as OLD_SETTINGS
from solver.repo_config import MAX_CANDIDATES

# HMAC-SHA256 with a short key can be brute-forced offline from one captured delivery.
MIN_WEBHOOK_SECRET_CHARS = 32


def webhook_secret_problem(secret: str | None) -> str | None:
    """Why the receiver must not start with this secret, naming the fix; None when fine.

    Unset (or "") is not a problem here: the receiver then refuses every delivery and
    serves the setup flow instead.
    """
    if not secret:
        return None
    if secret.strip() and len(secret) >= MIN_WEBHOOK_SECRET_CHARS:
        return None
    what = "blank" if not secret.strip() else f"only {len(secret)} characters"
    return (f"GITHUB_WEBHOOK_SECRET is {what}, which can be guessed from one captured "
            f"delivery; use at least {MIN_WEBHOOK_SECRET_CHARS} random characters "
            "(`openssl rand -hex 32`) and set the same value as the App's webhook secret on "
            "GitHub, or remove it and create the App through the receiver's setup page")


class LlamaEnvSettings(BaseSettings):
    """How llama.cpp runs an in-process GGUF model: read here once, for `frognano solve`
    (whose flags override them) and the worker alike. The same defaults and rules as
    `solver.models.llama_resident.LlamaSettings`, which these become."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", populate_by_name=True)

    n_ctx: int | None = Field(
        default=None, gt=0, alias="FROGNANO_N_CTX",
        description="Context size in tokens, output included: a run's budget and an "
                    "in-process model's KV cache (about 32 KiB a token in f16). Unset: "
                    "FROGNANO_LIMITS' context (131,072), halved until it fits what the "
                    "model's GPU or the host's memory holds; `frognano doctor` shows the "
                    "choice.",
        json_schema_extra={"shown_default": "chosen"})
    n_gpu_layers: int = Field(default=-1, ge=-1, alias="FROGNANO_N_GPU_LAYERS",
                              description="Layers offloaded to the GPU; -1 = all.")
    n_batch: int = Field(default=512, gt=0, alias="FROGNANO_N_BATCH",
                         description="Tokens handed to llama.cpp per decode call.")
    n_ubatch: int | None = Field(
        default=None, gt=0, alias="FROGNANO_N_UBATCH",
        description="Tokens per compute step, at most FROGNANO_N_BATCH; default "
                    "FROGNANO_N_BATCH up to 512.")
    flash_attn: Literal["auto", "on", "off"] = Field(
        default="auto", alias="FROGNANO_FLASH_ATTN",
        description="auto: on where the backend has flash attention.")
    kv_cache_type: Literal["f16", "q8_0", "q4_0"] = Field(
        default="f16", alias="FROGNANO_KV_CACHE_TYPE",
        description="Attention cache type; q8_0 halves its memory (needs flash attention).")
    cpu_repack: Literal["auto", "on", "off"] = Field(
        default="auto", alias="FROGNANO_CPU_REPACK",
        description="Weights repacked for the CPU's kernels; auto: off where llama.cpp "
                    "would use AMX, which crashes (docs/BENCHMARKS.md).")

    @field_validator("flash_attn", "kv_cache_type", "cpu_repack", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _llama_combinations(self) -> LlamaEnvSettings:
        if self.n_ubatch is not None and self.n_ubatch > self.n_batch:
            raise ValueError(f"FROGNANO_N_UBATCH ({self.n_ubatch}) must not exceed "
                             f"FROGNANO_N_BATCH ({self.n_batch})")
        if self.kv_cache_type != "f16" and self.flash_attn == "off":
            raise ValueError(f"FROGNANO_KV_CACHE_TYPE={self.kv_cache_type} needs flash "
                             "attention: set FROGNANO_FLASH_ATTN=auto or on, or use f16")
        return self

    def llama_fields(self) -> dict[str, Any]:
        """The values, by `LlamaSettings` field name."""
        return {name: getattr(self, name) for name in LlamaEnvSettings.model_fields}


# Every group reads the same sources: the environment, then `.env` in the working directory.
_SOURCES = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore",
                              populate_by_name=True)
# The default limit of one patch; the same number as solver/hostgit.DEFAULT_MAX_DIFF_BYTES
# (bot/ does not import workers/; tests/unit/bot/test_settings.py holds them equal).
DEFAULT_MAX_DIFF_BYTES = 5 * 1024 * 1024


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/frognano, as the XDG base directory spec has it."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local/state")
    return Path(base) / "frognano"


# The App's credentials, as the setup flow (bot/setup_flow.py) writes them: under the state
# directory (the file 0600, its folder 0700), never in the working directory, which is
# often the clone of this repository, where `git add .` would commit them.
CREDENTIALS_FILE = Path("credentials") / "github-app.env"
LEGACY_ENV_FILE = Path(".env")  # where setup wrote them before; still read


def credentials_path(state_dir: Path) -> Path:
    return state_dir.expanduser() / CREDENTIALS_FILE


def _state_dir_before_reading() -> Path:
    """FROGNANO_STATE_DIR as the settings will hold it (the environment, then `.env`),
    needed before they are read to find the credentials file in it."""
    named = os.environ.get("FROGNANO_STATE_DIR")
    if not named and LEGACY_ENV_FILE.is_file():
        named = dotenv_values(LEGACY_ENV_FILE).get("FROGNANO_STATE_DIR")
    return Path(named) if named else default_state_dir()


def default_work_dir() -> Path:
    # Not under $HOME: when the worker runs as root, the sandbox runs as an unprivileged
    # uid that must be able to reach the workspace, and /root is closed to it.
    return Path(f"/var/tmp/frognano-{os.getuid()}")


class GitHubSettings(BaseSettings):
    """The GitHub App and how the bot acts on GitHub."""

    model_config = _SOURCES

    github_app_id: int | None = Field(default=None, alias="GITHUB_APP_ID",
                                      description="The App's id (serve, worker).")
    github_private_key: SecretStr | None = Field(
        default=None, alias="GITHUB_PRIVATE_KEY",
        description="The App's private key, inline (or GITHUB_PRIVATE_KEY_PATH, not both).")
    github_private_key_path: Path | None = Field(
        default=None, alias="GITHUB_PRIVATE_KEY_PATH",
        description="The App's private key as a `.pem` file.")
    github_webhook_secret: SecretStr | None = Field(
        default=None, alias="GITHUB_WEBHOOK_SECRET",
        description="The webhook secret, at least 32 characters; `serve` refuses to start "
                    "with a shorter one, and without one serves only the setup pages.")
    github_api_url: str = Field(default="https://api.github.com", alias="GITHUB_API_URL",
                                description="GitHub Enterprise: `https://HOST/api/v3`.")
    trigger_label: str = Field(default="frognano", alias="FROGNANO_TRIGGER_LABEL",
                               description="The label that starts a run.")
    bot_login: str = Field(default="frognano[bot]", alias="FROGNANO_BOT_LOGIN",
                           description="The App's bot user (`<app slug>[bot]`); its own "
                                       "events are ignored.")
    public_url: str | None = Field(
        default=None, alias="FROGNANO_PUBLIC_URL",
        description="The receiver's public HTTPS address: the setup flow, and the links "
                    "from PRs to their run pages.")

    @model_validator(mode="after")
    def _one_private_key(self) -> GitHubSettings:
        if self.github_private_key and self.github_private_key_path:
            raise ValueError("set GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH, not both")
        return self


class ModelSettings(LlamaEnvSettings):
    """The model, and how llama.cpp runs a GGUF in process."""

    model_config = _SOURCES

    model: str | None = Field(
        default=None, alias="FROGNANO_MODEL",
        description="A GGUF path or an OpenAI-compatible URL (`solve --model`).")
    chat_template: Path | None = Field(
        default=None, alias="FROGNANO_CHAT_TEMPLATE",
        description="Jinja chat template for a GGUF model that carries none "
                    "(`solve --chat-template`).")
    model_slots: int = Field(
        default=1, ge=1, le=64, alias="FROGNANO_MODEL_SLOTS",
        description="Candidates of one run (`candidates`) that run at once: 1 for "
                    "a GGUF in process (they run in turn, until one passes with a test "
                    "that reproduces the issue); up to N for a server started with N "
                    "parallel slots (`llama-server --parallel N`), which every run worker "
                    "using it shares.")
    seed: int | None = Field(
        default=None, ge=0, lt=2**31, alias="FROGNANO_SEED",
        description="Sampling seed of a bot run's first candidate (candidate k: seed + k), "
                    "for reproducible runs; unset, one is drawn per run.")


class PathSettings(BaseSettings):
    """Where state, workspaces and run records live."""

    model_config = _SOURCES

    state_dir: Path = Field(
        default_factory=default_state_dir, alias="FROGNANO_STATE_DIR",
        description="Transcripts, repository mirrors, the default run database, "
                    "`up`'s Redis data.",
        json_schema_extra={"shown_default": "`$XDG_STATE_HOME/frognano` "
                                            "(`~/.local/state/frognano`)"})
    work_dir: Path = Field(
        default_factory=default_work_dir, alias="FROGNANO_WORK_DIR",
        description="Workspaces of `solve` and the workers; must be reachable by the "
                    "sandbox user.",
        json_schema_extra={"shown_default": "`/var/tmp/frognano-<uid>`"})
    database_url: str | None = Field(
        default=None, alias="FROGNANO_DATABASE_URL",
        description="Run records; `postgresql+psycopg://user:password@host/db` for several "
                    "hosts (`\"\"` turns recording off for `solve`).",
        json_schema_extra={"shown_default": "`sqlite:///$FROGNANO_STATE_DIR/frognano.db`"})

    @property
    def run_database_url(self) -> str:
        return self.database_url or \
            f"sqlite:///{self.state_dir.expanduser().resolve() / 'frognano.db'}"


class LimitSettings(BaseSettings):
    """The queue, isolation and the ceilings every run lives under."""

    model_config = _SOURCES

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", alias="FROGNANO_REDIS_URL",
                           description="Broker and coordination; `up` starts a private "
                                       "Redis unless this is set.")
    queue: str = Field(default="frognano", alias="FROGNANO_QUEUE",
                       description="Celery queue for runs; accept tasks use "
                                   "`<queue>-control`.")
    run_workers_per_gpu: int = Field(
        default=1, ge=1, le=64, alias="FROGNANO_RUN_WORKERS_PER_GPU",
        description="Runs at once per GPU, each with its own model: `frognano up` starts "
                    "this many run workers per GPU, pinned to it (no GPU: this many in all; "
                    "`up --workers-per-gpu`); a `frognano worker` runs this many "
                    "(`--concurrency`).")
    sandbox: Literal["bubblewrap", "unsafe-local"] = Field(
        default="bubblewrap", alias="FROGNANO_SANDBOX",
        description="Isolation backend (`unsafe-local` for development only; "
                    "`solve --sandbox`).")
    max_run_seconds: int = Field(default=2 * 3600, gt=0, alias="FROGNANO_MAX_RUN_SECONDS",
                                 description="Hard ceiling of one bot run (Celery time "
                                             "limits follow it).")
    max_diff_bytes: int = Field(default=DEFAULT_MAX_DIFF_BYTES, ge=1,
                                alias="FROGNANO_MAX_DIFF_BYTES",
                                description="Largest patch published or committed; a bigger "
                                            "change is refused.")
    limits: PresetName = Field(
        default="evaluation", alias="FROGNANO_LIMITS",
        description="A run's default budgets (`.github/frognano.yml` and `solve`'s flags "
                    "set single ones): `evaluation`, the configuration FrogNano was "
                    "evaluated in (150 steps, 131,072 tokens of context, 8,192 a turn); "
                    "`agent`, Leaf's agent defaults (100 steps, 65,536 tokens).")
    max_candidates: int = Field(
        default=1, ge=1, le=MAX_CANDIDATES, alias="FROGNANO_MAX_CANDIDATES",
        validation_alias=AliasChoices("FROGNANO_MAX_CANDIDATES",
                                      OLD_SETTINGS["FROGNANO_MAX_CANDIDATES"]),
        description="Most candidates one run may make (a repository's `candidates` "
                    "above it is cut to it): each costs a whole agent run of model time.")
    progress_seconds: float = Field(
        default=30.0, gt=0, alias="FROGNANO_PROGRESS_SECONDS",
        description="`solve` without a terminal (piped, in CI): a progress line this "
                    "often (step, tokens of the current turn, elapsed time); on a terminal "
                    "the live line ticks every second.")


class SetupSettings(BaseSettings):
    """Where a run's setup phase installs packages from, and what else it may reach.

    The index URLs (and any credentials in them) stay on the host: the setup phase's pip
    talks to a host-side endpoint that fetches from them (sandbox/index_endpoint.py)."""

    model_config = _SOURCES

    pip_index_url: str | None = Field(
        default=None, alias="FROGNANO_PIP_INDEX_URL",
        description="pip's index for setup; default PyPI. Fetched by the host (credentials "
                    "in the URL never enter the sandbox); http(s) or `file://`.")
    pip_extra_index_url: str | None = Field(
        default=None, alias="FROGNANO_PIP_EXTRA_INDEX_URL",
        description="More indexes, space-separated, fetched the same way.")
    pip_find_links: str | None = Field(
        default=None, alias="FROGNANO_PIP_FIND_LINKS",
        description="Wheel directories or URLs, space-separated (`PIP_FIND_LINKS`), "
                    "fetched the same way.")
    setup_egress_hosts: str | None = Field(
        default=None, alias="FROGNANO_SETUP_EGRESS_HOSTS",
        description="More hosts the setup phase's HTTPS proxy may reach, comma- or "
                    "space-separated: `host` (port 443 only) or `host:port` "
                    "(`[2001:db8::1]:8443` for an IPv6 address; `.example.com` also allows "
                    "its subdomains). Besides them only each index URL's host on the port "
                    "it names (the scheme's, 443 or 80, when it names none; PyPI's two "
                    "hosts on 443 by default): another port of an allowed host, another "
                    "service of that box, is refused.")
    setup_egress_allow: str | None = Field(
        default=None, alias="FROGNANO_SETUP_EGRESS_ALLOW",
        description="Networks (CIDRs, comma-separated) those hosts may resolve to besides "
                    "public addresses; the host's own and NAT64/6to4 forms are refused "
                    "otherwise. It widens addresses, never ports: an index at "
                    "`http://10.77.0.1:3141` with `10.77.0.1/32` allowed is reached on "
                    "3141 only.")
    https_proxy: str | None = Field(
        default=None, alias="HTTPS_PROXY",
        description="The host's outbound proxy: the index fetches go through it, and the "
                    "setup phase's proxy chains to it.")
    no_proxy: str | None = Field(
        default=None, alias="NO_PROXY",
        description="Hosts reached without `HTTPS_PROXY` (comma-separated, as curl reads "
                    "it).")
    setup_venv_cache: bool = Field(
        default=True, alias="FROGNANO_SETUP_VENV_CACHE",
        description="Reuse the venv a setup made, and its writes to the workspace, for the "
                    "next run of the same repository with the same setup inputs "
                    "(pyproject.toml, setup.py/cfg, requirement and lock files, tox.ini), "
                    "Python and setup command: copied into each run, never written back "
                    "from a sandbox (`$FROGNANO_STATE_DIR/venv-cache`).")
    setup_cache_max_gb: float = Field(
        default=20.0, ge=0, alias="FROGNANO_SETUP_CACHE_MAX_GB",
        description="Disk the setup caches (the downloaded packages in "
                    "`$FROGNANO_STATE_DIR/package-cache` and the venv cache) may use "
                    "together; past it the least recently used entries go first, while "
                    "a setup stores a download too (one it cannot make room for is served "
                    "and not kept). 0: no cap.")
    setup_installer: Literal["uv", "pip"] = Field(
        default="uv", alias="FROGNANO_SETUP_INSTALLER",
        description="Who installs an inferred setup: `uv` (the `uv` package's binary, bound "
                    "read-only into the setup phase, through the same index endpoint and "
                    "proxy; pip in a fresh venv where uv fails, said in the setup note) or "
                    "`pip` alone. A repository's own `setup:` runs as written.")
    setup_fetch_max_gb: float = Field(
        default=0.0, ge=0, alias="FROGNANO_SETUP_FETCH_MAX_GB",
        description="Bytes one setup may fetch through the package index endpoint (cache "
                    "hits too); past it each file is refused, named in the run's log and "
                    "its failure message. 0: the sandbox's disk quota.")


class DashboardSettings(BaseSettings):
    """Who may read the run dashboard (it refuses everyone until one is set)."""

    model_config = _SOURCES

    dashboard_token: SecretStr | None = Field(
        default=None, alias="FROGNANO_DASHBOARD_TOKEN",
        description="Shared token for the dashboard (`/runs?token=…` once, then a cookie; "
                    "or `Authorization: Bearer`).")
    dashboard_user: str | None = Field(default=None, alias="FROGNANO_DASHBOARD_USER",
                                       description="HTTP basic auth user, instead of a token.")
    dashboard_password: SecretStr | None = Field(default=None,
                                                 alias="FROGNANO_DASHBOARD_PASSWORD",
                                                 description="HTTP basic auth password.")


# The groups in the order the README's table shows them (frognano/settings_doc.py).
GROUPS: tuple[tuple[str, type[BaseSettings]], ...] = (
    ("GitHub", GitHubSettings), ("Model", ModelSettings), ("Paths", PathSettings),
    ("Limits", LimitSettings), ("Setup", SetupSettings), ("Dashboard", DashboardSettings))


class BotSettings(GitHubSettings, ModelSettings, PathSettings, LimitSettings,
                  SetupSettings, DashboardSettings):
    """Every setting of every command, read once by the composition root (frognano/cli.py)
    from the environment and `.env`; flags override them there."""

    model_config = _SOURCES

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment, then the credentials file, then `.env` (an older install's
        credentials, and any other setting). A caller's own `_env_file` (a test's, or
        None) replaces both files."""
        files: tuple[PydanticBaseSettingsSource, ...] = (dotenv_settings,)
        if isinstance(dotenv_settings, DotEnvSettingsSource) \
                and dotenv_settings.env_file == str(LEGACY_ENV_FILE):
            credentials = credentials_path(_state_dir_before_reading())
            files = (DotEnvSettingsSource(settings_cls, env_file=credentials), *files)
        return (init_settings, env_settings, *files, file_secret_settings)

    def private_key(self) -> str | None:
        if self.github_private_key is not None:
            return self.github_private_key.get_secret_value()
        if self.github_private_key_path is not None:
            return self.github_private_key_path.read_text()
        return None

    @property
    def webhook_secret(self) -> str | None:
        return self.github_webhook_secret.get_secret_value() if self.github_webhook_secret \
            else None
