"""A Hugging Face tokenizer (any object with its API: transformers, or the one a remote
service hands out) behind the core `Tokenizer` protocol. Imports nothing heavy itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class HFTokenizer:
    def __init__(self, tokenizer: Any, *, reads_instructions: bool = True) -> None:
        """`reads_instructions`: False for a model that has a chat template to frame turns but
        cannot follow a written instruction (the built-in `tiny`, a character model from random
        weights); retrain.data.chat then poses built-in problems to it as the bare question."""
        self.hf = tokenizer
        eos: list[int] = []
        for value in (tokenizer.eos_token_id, getattr(tokenizer, "eot_token_id", None)):
            if isinstance(value, int) and value not in eos:
                eos.append(value)
        self.eos_token_ids: list[int] = eos
        pad = tokenizer.pad_token_id
        self.pad_token_id: int = pad if isinstance(pad, int) else (eos[0] if eos else 0)
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        #: read by retrain.data.chat: built-in problems become system and user turns
        self.instruction_turns = self.has_chat_template and reads_instructions
        self._pieces: dict[int, str] = {}

    def encode_prompt(self, text: str) -> list[int]:
        if self.has_chat_template:
            return self.encode_chat([{"role": "user", "content": text}])
        return [int(i) for i in self.hf.encode(text, add_special_tokens=True)]

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
                    template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        """Messages through the chat template (thinking off where the template has the switch,
        unless `template_kwargs` say otherwise; they reach the template as its variables);
        without a template, the contents joined by newlines."""
        if not self.has_chat_template:
            text = "\n".join(str(m.get("content") or "") for m in messages)
            return [int(i) for i in self.hf.encode(text, add_special_tokens=True)]
        rows = [dict(m) for m in messages]
        own = dict(template_kwargs or {})
        try:
            ids = self.hf.apply_chat_template(rows, add_generation_prompt=add_generation_prompt, tokenize=True,
                                              return_dict=False, **{"enable_thinking": False, **own})
        except TypeError:
            if own:
                raise
            ids = self.hf.apply_chat_template(rows, add_generation_prompt=add_generation_prompt, tokenize=True,
                                              return_dict=False)
        return [int(i) for i in ids]

    def _render(self, messages: Sequence[Mapping[str, Any]], generation_prompt: bool,
                template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
        ids = self.hf.apply_chat_template(list(messages), add_generation_prompt=generation_prompt, tokenize=True,
                                          return_dict=False, **dict(template_kwargs or {}))
        return [int(i) for i in ids]

    def encode_messages(self, messages: Sequence[Mapping[str, Any]],
                        template_kwargs: Mapping[str, Any] | None = None) -> tuple[list[int], list[bool]]:
        """A conversation through the chat template, and which tokens belong to assistant turns
        (SFT on `messages` rows). A turn's tokens are those the template adds to the rendering
        of the turns before it, after the generation prompt; a template that does not render
        earlier turns as a prefix of later ones raises ValueError."""
        if not self.has_chat_template:
            raise ValueError("the tokenizer has no chat template for 'messages' rows")
        full = self._render(messages, False, template_kwargs)
        mask = [False] * len(full)
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            start = len(self._render(messages[:i], True, template_kwargs)) if i else 0
            through = self._render(messages[:i + 1], False, template_kwargs)
            if full[:len(through)] != through or start > len(through):
                raise ValueError("the chat template does not render earlier turns as a prefix of later ones")
            mask[start:len(through)] = [True] * (len(through) - start)
        return full, mask

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.hf.encode(text, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.hf.decode(list(ids), skip_special_tokens=True))

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Each id's own text, cached: planning detectors ask for every sampled token."""
        pieces = self._pieces
        out = []
        for i in ids:
            piece = pieces.get(i)
            if piece is None:
                piece = pieces[i] = str(self.hf.decode([i], skip_special_tokens=False))
            out.append(piece)
        return out
