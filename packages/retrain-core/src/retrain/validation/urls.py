"""Every URL a config names is one a client can ask: an allowed scheme, a host, and a port from
1 to 65535 when it gives one (`retrain.io.http.check_url`). A judge at port 99999 used to load,
and every completion of the run then failed to score.

The URL-valued keys are listed here, once (`URL_KEYS`); `[environment] id` is a URL for a
provider that declares URL schemes (`EnvironmentCapabilities.id_schemes`), and is checked by
the environment pass with the same rule (`environment.py`). A URL an environment variable
supplies ($OPENAI_BASE_URL for the judge, $TINKER_BASE_URL) is checked where it is read.
"""

from __future__ import annotations

from collections.abc import Callable

from retrain.config.errors import ConfigIssue
from retrain.config.fields import by_flat
from retrain.config.schema import TrainConfig
from retrain.io.http import check_url

HTTP = ("http", "https")

#: (flat key, its value, the schemes it takes, an example for the hint)
URL_KEYS: tuple[tuple[str, Callable[[TrainConfig], str], tuple[str, ...], str], ...] = (
    ("reward_judge_base_url", lambda c: c.reward.judge_base_url, HTTP, 'judge_base_url = "http://127.0.0.1:8000/v1"'),
    ("inference_url", lambda c: c.inference.url, HTTP, 'url = "http://127.0.0.1:8000"'),
    ("base_url", lambda c: c.model.base_url, HTTP, 'base_url = "https://service.example.com"'),
    ("teacher_url", lambda c: c.teacher.url, HTTP, 'url = "http://127.0.0.1:8000/v1"'),
    ("reward_model_url", lambda c: c.reward.model_url, HTTP, 'model_url = "http://127.0.0.1:8000"'),
)


def check_urls(c: TrainConfig) -> list[ConfigIssue]:
    issues = []
    for flat, value_of, schemes, example in URL_KEYS:
        value = value_of(c)
        if value and (why := check_url(value, schemes)):
            issues.append(ConfigIssue(f"{value!r} {why}", key=by_flat()[flat].label, hint=example))
    return issues
