"""The SDK's and the command line's settings, read once from ``SANDGRID_*`` variables."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["DEFAULT_API_URL", "ClientSettings", "get_client_settings"]

DEFAULT_API_URL = "http://127.0.0.1:8700"


class ClientSettings(BaseSettings):
    """Where the grid's API is and who the caller is."""

    model_config = SettingsConfigDict(env_prefix="SANDGRID_")

    api_url: str = Field(DEFAULT_API_URL, description="SANDGRID_API_URL")
    token: str = Field("", description="SANDGRID_TOKEN: the tenant's bearer token")


@lru_cache(maxsize=1)
def get_client_settings() -> ClientSettings:
    """The process's client settings, read once from the environment."""
    return ClientSettings()
