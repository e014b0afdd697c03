"""Every tracker a run selected, called as one: rows go to each in turn, artifacts to each that
stores them, and every tracker is finished even when another fails to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from retrain.training.trackers.sink import ArtifactFolder, Receipt, RunInfo, Sink


class Trackers:
    """Named sinks; with none it is the null object the run logs to (no tracker selected, and
    every rank but 0)."""

    def __init__(self, sinks: Sequence[tuple[str, Sink]] = ()) -> None:
        self.sinks = list(sinks)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.sinks]

    def only(self, name: str) -> Trackers:
        return Trackers([(n, s) for n, s in self.sinks if n == name])

    def start(self, info: RunInfo) -> None:
        """Start each in order; when one fails, the ones already started are finished (exit
        code 1) before the error goes on."""
        for i, (_, sink) in enumerate(self.sinks):
            try:
                sink.start(info)
            except BaseException:
                Trackers(self.sinks[:i]).finish(1)
                raise

    def log_row(self, values: Mapping[str, float | int], step: int) -> None:
        if not values:
            return
        for _, sink in self.sinks:
            sink.log_row(values, step)

    def log_artifact(self, artifact: ArtifactFolder) -> list[Receipt]:
        """The receipts of the trackers that store artifacts."""
        receipts = (sink.log_artifact(artifact) for _, sink in self.sinks)
        return [r for r in receipts if r is not None]

    def finish(self, exit_code: int) -> None:
        """Finish all of them; the first error, if any, is raised after the last has finished."""
        error: BaseException | None = None
        for _, sink in self.sinks:
            try:
                sink.finish(exit_code)
            except BaseException as exc:
                error = error or exc
        self.sinks = []
        if error is not None:
            raise error
