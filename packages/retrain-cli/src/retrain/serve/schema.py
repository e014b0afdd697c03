"""Request bodies of the OpenAI-compatible endpoints, validated field by field.

Unknown fields are refused rather than ignored: a sampling option the server silently
dropped would change results without a trace. The vLLM extensions that clients (the
verifiers harness, retrain's own engine) send are accepted and honoured. Values are taken as
sent (strict: `true` is not the number 1, nor 0 the flag false) and every number is bounded, so
nothing a client sends reaches the sampler unchecked.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from retrain.backends.serving import SEED_MAX, SEED_MIN

Strict = ConfigDict(extra="forbid", strict=True)
Count = Annotated[int, Field(ge=1, le=2 ** 31 - 1)]


class StreamOptions(BaseModel):
    model_config = Strict
    include_usage: bool = False
    continuous_usage_stats: bool = False


class Sampling(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = Strict
    model: str
    temperature: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    top_k: Annotated[int, Field(le=2 ** 31 - 1)] | None = None
    min_p: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
    n: Annotated[int, Field(ge=1, le=512)] = 1
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)] | None = None
    user: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int | None) -> int | None:
        if v is not None and v < -1:
            raise ValueError("must be -1 or 0 (all tokens) or a positive count")
        return v

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, v: float) -> float:
        if v != 0.0:
            raise ValueError("is not supported by retrain serve (only 0)")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _no_bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v:
            raise ValueError("is not supported by retrain serve")
        return v

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: Count | None = 16
    logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    #: vLLM's extension: each prompt token's logprob and this many top alternatives per position
    prompt_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    echo: bool = False
    best_of: Count | None = None
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("must not be empty")
        if isinstance(v, list) and any(isinstance(p, list) and not p for p in v):
            raise ValueError("holds an empty token list")
        return v

    @field_validator("echo")
    @classmethod
    def _no_echo(cls, v: bool) -> bool:
        if v:
            raise ValueError("is not supported by retrain serve")
        return v

    @field_validator("suffix")
    @classmethod
    def _no_suffix(cls, v: str | None) -> str | None:
        if v:
            raise ValueError("is not supported by retrain serve")
        return v

    @model_validator(mode="after")
    def _best_of(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of must equal n (retrain serve returns every sample)")
        if self.prompt_logprobs is not None and self.stream:
            raise ValueError("prompt_logprobs are not available when stream = true")
        return self


class TextPart(BaseModel):
    model_config = Strict
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = Strict
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def as_template(self) -> dict[str, str]:
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content or [])
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class ChatRequest(Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none"] | None = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if v:
            raise ValueError("tool calls are not supported by retrain serve")
        return v

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v and v.get("type") != "text":
            raise ValueError("only {'type': 'text'} is supported by retrain serve")
        return v

    @property
    def limit(self) -> int:
        return self.max_completion_tokens or self.max_tokens or 16


class LoadAdapter(BaseModel):
    model_config = ConfigDict(extra="ignore")  # vLLM's own request takes more fields than we use
    lora_name: Annotated[str, Field(min_length=1, max_length=200)]
    lora_path: Annotated[str, Field(min_length=1)]
    load_inplace: bool = False


class UnloadAdapter(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: Annotated[str, Field(min_length=1, max_length=200)]
    lora_int_id: int | None = None
