"""The order of a taskset's tasks as a run trains on them: the verifiers environments' state.

A run's prompt cursor (retrain.training.prompts) walks the environment's examples by position,
and the taskset's `load()` decides which task sits where. A resumed run loads the taskset again;
when the order differs (a loader that iterates a set or a folder, a shuffle without a seed, a
data set revised in place), position i is another task and the resumed run trains on problems
the uninterrupted one would not have. So the order is saved with each checkpoint, one short
digest per task, and restored on resume: the tasks take their saved positions (and their `idx`,
so traces carry the same task keys). A taskset whose tasks are not the saved ones is refused.

Examples are handles: the trainer reads `examples()` before `load_state` and keeps them, so a
handle's `task_index` is a position and `task`/`example` look up what sits there now.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from retrain.environments.verifiers.prompt import example
from retrain.errors import UserError
from retrain.types import Example

STATE_KEY = "task_order"


def digest(task: Any) -> str:
    """A task's identity without its load position: verifiers' key of the task with `idx`
    unset (its content hash, or the durable id a task type's key names)."""
    key = str(task.with_data(idx=None).key)
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


class TaskOrder:
    def __init__(self, taskset_id: str, tasks: Sequence[Any]) -> None:
        self.taskset_id = taskset_id
        self._set(list(tasks))

    def _set(self, tasks: list[Any]) -> None:
        self.tasks = tasks
        self.digests = [digest(t) for t in tasks]
        self.examples = [example(self.taskset_id, i, t) for i, t in enumerate(tasks)]

    def task(self, handle: Example) -> Any:
        return self.tasks[_position(handle)]

    def example(self, handle: Example) -> Example:
        return self.examples[_position(handle)]

    def state(self) -> dict[str, Any]:
        return {STATE_KEY: list(self.digests)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        saved = state.get(STATE_KEY)
        if saved is None or list(saved) == self.digests:  # None: a checkpoint from before the order was saved
            return
        by_digest: dict[str, list[Any]] = {}
        for d, task in zip(self.digests, self.tasks, strict=True):
            by_digest.setdefault(d, []).append(task)
        restored = []
        for i, d in enumerate(saved):
            same = by_digest.get(str(d))
            if not same:
                raise UserError(
                    f"[environment] id {self.taskset_id!r}: the taskset no longer holds task {i} of the checkpoint "
                    f"(it loads {len(self.tasks)} tasks, the run trained on {len(saved)}); resuming would train on "
                    "other problems", hint="resume with the [environment] args and taskset version the run started "
                                           "with, or start a new run")
            restored.append(same.pop().with_data(idx=i))
        if len(restored) != len(self.tasks):
            raise UserError(
                f"[environment] id {self.taskset_id!r}: the taskset loads {len(self.tasks)} tasks, the run trained on "
                f"{len(saved)}; resuming would train on other problems",
                hint="resume with the [environment] args and taskset version the run started with, or start a new run")
        self._set(restored)


def _position(handle: Example) -> int:
    return int((handle.info or {})["task_index"])
