"""A verifiers task's prompt as chat messages, and as the `Example` retrain's batches carry
(prompt text, answer as reference, the taskset id as task, its `idx` as example id)."""

from __future__ import annotations

from typing import Any

from retrain.types import Example


def messages(task: Any) -> list[dict[str, str]]:
    """The task's prompt as chat messages: its system prompt, then its prompt (a string is one
    user message; a message list is taken as it is)."""
    data = task.data
    out: list[dict[str, str]] = []
    if data.system_prompt:
        out.append({"role": "system", "content": str(data.system_prompt)})
    prompt = data.prompt
    if isinstance(prompt, str):
        out.append({"role": "user", "content": prompt})
    elif prompt:
        for m in prompt:
            d = m if isinstance(m, dict) else m.model_dump()
            out.append({"role": str(d["role"]), "content": _text(d.get("content"))})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str) or content is None:
        return content or ""
    return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(getattr(p, "text", "")) for p in content)


def example(taskset_id: str, i: int, task: Any) -> Example:
    """The `i`-th task (`info["task_index"]`) as an Example."""
    msgs = messages(task)
    prompt = next((m["content"] for m in reversed(msgs) if m["role"] == "user"), "")
    answer = getattr(task.data, "answer", "")
    return Example(prompt=prompt, reference="" if answer is None else str(answer), task=taskset_id,
                   info={"task_index": i}, example_id=task.data.idx if task.data.idx is not None else i)
