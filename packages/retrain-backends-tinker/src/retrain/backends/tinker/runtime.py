"""Loading the Tinker SDK and what a run needs from its environment: the service URL, the API
key, and a service that serves the configured base model.

The API key comes from `[backend.options] api_key` or `TINKER_API_KEY`. It is handed to the
SDK and to nothing else: every message this package raises passes through `Secret.scrub`."""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from retrain.backends.errors import BackendUnavailable
from retrain.config.schema import TrainConfig
from retrain.io.http import check_url

KEY_ENV = "TINKER_API_KEY"
URL_ENV = "TINKER_BASE_URL"
#: the SDK release this backend is built and tested against; older ones lack its calls
MIN_SDK = (0, 38)


class TinkerError(RuntimeError):
    """A remote call failed for good; the message names the call and the service (never the key)."""


def sdk_version() -> str:
    try:
        return metadata.version("tinker")
    except metadata.PackageNotFoundError:
        return ""


def version_problem(version: str) -> str | None:
    """Why this SDK version cannot run the backend, or None."""
    if not version:
        return "the tinker SDK is not installed (pip install retrain-backends-tinker)"
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return None
    if parts < MIN_SDK:
        need = ".".join(map(str, MIN_SDK))
        return f"tinker SDK {version} is older than {need}, which this backend needs (pip install -U 'tinker>={need}')"
    return None


class _DropTorchAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "PyTorch was not found" not in record.getMessage()


def load_tinker() -> Any:
    """The `tinker` module, imported only when a run starts.

    transformers (the SDK's tokenizers) logs at import that it found no PyTorch: addressed to
    users of its models, which this backend never loads. That one record is dropped, during
    that import only."""
    if problem := version_problem(sdk_version()):
        raise BackendUnavailable(problem)
    log, drop = logging.getLogger("transformers"), _DropTorchAdvice()
    log.addFilter(drop)
    try:
        importlib.import_module("transformers")
    finally:
        log.removeFilter(drop)
    return importlib.import_module("tinker")


@dataclass(frozen=True)
class Secret:
    value: str

    def scrub(self, text: str) -> str:
        return text.replace(self.value, "<redacted>") if self.value else text

    def __repr__(self) -> str:
        return "Secret(<redacted>)"


@dataclass(frozen=True)
class Service:
    url: str  # "" = the SDK's default (the hosted service)
    key: Secret

    @property
    def where(self) -> str:
        return self.url or "the default Tinker service"


def service(config: TrainConfig) -> Service:
    key = str(config.backend.options.get("api_key") or "") or os.environ.get(KEY_ENV, "")
    if not key:
        raise BackendUnavailable(f"backend = \"tinker\" needs an API key: set {KEY_ENV} "
                                 "(or [backend.options] api_key)")
    url = config.model.base_url or os.environ.get(URL_ENV, "")
    if url and (why := check_url(url)):  # [model] base_url is checked at load; $TINKER_BASE_URL only here
        raise BackendUnavailable(f"{'[model] base_url' if config.model.base_url else '$' + URL_ENV} = {url!r} {why}")
    return Service(url.rstrip("/"), Secret(key))


def describe_failure(exc: BaseException, secret: Secret) -> str:
    """One line: the exception's kind and message, the key removed, the length bounded."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > 300:
        text = text[:300] + "..."
    return secret.scrub(f"{type(exc).__name__}: {text}")


def base_url(svc: Service) -> str:
    from tinker.lib.base_url import resolve_base_url

    return str(resolve_base_url(svc.url or None)).rstrip("/")


def served_models(sdk: Any, svc: Service, *, timeout_s: float) -> list[str]:
    """The base models the service trains (`get_server_capabilities`); BackendUnavailable,
    in one line without the key, when it does not answer.

    One plain HTTP request goes first (the whole of it within `timeout_s`, its reply capped):
    the SDK's clients retry a refused connection for minutes before they raise, so an
    unreachable service would otherwise look like a hang."""
    from retrain.io.http import HttpFailure, request

    try:
        request("GET", f"{base_url(svc)}/api/v1/healthz", deadline_s=timeout_s, max_bytes=1 << 20)
    except HttpFailure as exc:
        raise BackendUnavailable(f"cannot reach the Tinker service at {svc.where}: "
                                 f"{describe_failure(exc, svc.key)}") from None
    try:
        rest = sdk.RestClient(base_url=svc.url or None, api_key=svc.key.value)
        caps = rest.get_server_capabilities().result(timeout=timeout_s)
    except Exception as exc:
        raise BackendUnavailable(f"cannot reach the Tinker service at {svc.where}: "
                                 f"{describe_failure(exc, svc.key)}") from None
    return [m.model_name for m in caps.supported_models or [] if m.model_name]
