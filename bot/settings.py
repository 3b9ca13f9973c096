"""Settings of the bot, from the environment or `.env` (read only by entry points)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    `workers.models.llama_resident.LlamaSettings`, which these become."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", populate_by_name=True)

    n_ctx: int = Field(default=65536, gt=0, alias="FROGNANO_N_CTX",
                       description="Context size in tokens.")
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


class BotSettings(LlamaEnvSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", populate_by_name=True)

    github_app_id: int | None = Field(default=None, alias="GITHUB_APP_ID")
    github_private_key: SecretStr | None = Field(default=None, alias="GITHUB_PRIVATE_KEY")
    github_private_key_path: Path | None = Field(default=None, alias="GITHUB_PRIVATE_KEY_PATH")
    github_webhook_secret: SecretStr | None = Field(default=None, alias="GITHUB_WEBHOOK_SECRET")
    github_api_url: str = Field(default="https://api.github.com", alias="GITHUB_API_URL")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", alias="FROGNANO_REDIS_URL")
    model: str | None = Field(default=None, alias="FROGNANO_MODEL")
    chat_template: Path | None = Field(
        default=None, alias="FROGNANO_CHAT_TEMPLATE",
        description="Jinja chat template for a GGUF model that carries none.")
    trigger_label: str = Field(default="frognano", alias="FROGNANO_TRIGGER_LABEL")
    bot_login: str = Field(default="frognano[bot]", alias="FROGNANO_BOT_LOGIN",
                           description="The App's bot user (`<app slug>[bot]`); its own "
                                       "events are ignored.")
    queue: str = Field(default="frognano", alias="FROGNANO_QUEUE")
    sandbox: str = Field(default="bubblewrap", alias="FROGNANO_SANDBOX")
    state_dir: Path = Field(default=Path.home() / ".local/state/frognano",
                            alias="FROGNANO_STATE_DIR")
    work_dir: Path | None = Field(default=None, alias="FROGNANO_WORK_DIR")
    public_url: str | None = Field(default=None, alias="FROGNANO_PUBLIC_URL",
                                   description="Where transcripts are linked from PRs.")
    max_run_seconds: int = Field(default=2 * 3600, alias="FROGNANO_MAX_RUN_SECONDS")
    max_diff_bytes: int | None = Field(
        default=None, ge=1, alias="FROGNANO_MAX_DIFF_BYTES",
        description="Largest patch the bot publishes; a bigger change is refused with a "
                    "status comment. Default 5 MB (workers/hostgit.py).")
    database_url: str | None = Field(
        default=None, alias="FROGNANO_DATABASE_URL",
        description="Run records; default sqlite:///$FROGNANO_STATE_DIR/frognano.db. "
                    "PostgreSQL: postgresql+psycopg://user:password@host/db")
    dashboard_token: SecretStr | None = Field(
        default=None, alias="FROGNANO_DASHBOARD_TOKEN",
        description="Shared token for the run dashboard (/runs?token=… once, then a cookie).")
    dashboard_user: str | None = Field(default=None, alias="FROGNANO_DASHBOARD_USER")
    dashboard_password: SecretStr | None = Field(default=None,
                                                 alias="FROGNANO_DASHBOARD_PASSWORD")

    @model_validator(mode="after")
    def _one_private_key(self) -> BotSettings:
        if self.github_private_key and self.github_private_key_path:
            raise ValueError("set GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH, not both")
        return self

    def private_key(self) -> str | None:
        if self.github_private_key is not None:
            return self.github_private_key.get_secret_value()
        if self.github_private_key_path is not None:
            return self.github_private_key_path.read_text()
        return None

    @property
    def run_database_url(self) -> str:
        return self.database_url or \
            f"sqlite:///{self.state_dir.expanduser().resolve() / 'frognano.db'}"

    @property
    def webhook_secret(self) -> str | None:
        return self.github_webhook_secret.get_secret_value() if self.github_webhook_secret \
            else None
