"""The policy endpoint a verifiers multi-turn Env samples from (vLLM's /inference/v1/generate on
127.0.0.1, a real uvicorn server, a real HTTP client), and how a trace's token stream becomes
turns: what a sampler returns is what the client reads and what the trainer reads back."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from retrain.environments.verifiers.endpoint import PolicyEndpoint, Served
from retrain.environments.verifiers.episodes import segments
from retrain.types import Completion, SamplingParams

EOS = 2


class Recorder:
    """A sampler: completion = last prompt token + 1, then EOS; logprob -0.5 per token."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.calls: list[int] = []
        self.lock = threading.Lock()
        self.seconds = seconds  # a model's time per call

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        with self.lock:
            self.calls.append(len(prompts))
        time.sleep(self.seconds)
        out = []
        for p in prompts:
            ids = [p[-1] + 1, EOS][:params.max_tokens]
            out.append(Completion(token_ids=ids, logprobs=[-0.5] * len(ids),
                                  finish_reason="stop" if ids[-1] == EOS else "length"))
        return out


@pytest.fixture
def endpoint():
    sampler = Recorder(seconds=0.2)
    ep = PolicyEndpoint(sampler, stop_token_ids=[EOS], max_model_len=512)
    ep.start()
    try:
        yield ep, sampler
    finally:
        ep.stop()


def _post(ep: PolicyEndpoint, body: object, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {ep.api_key if key is None else key}"}
    return httpx.post(ep.url.removesuffix("/v1") + "/inference/v1/generate", json=body, headers=headers, timeout=30)


def test_generate_answers_token_ids_logprobs_and_remembers_them(endpoint) -> None:
    ep, _ = endpoint
    r = _post(ep, {"model": "policy", "token_ids": [5, 6, 7],
                   "sampling_params": {"max_tokens": 4, "temperature": 1.0, "stop_token_ids": [EOS], "logprobs": 1,
                                       "skip_special_tokens": False}})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["token_ids"] == [8, EOS] and choice["finish_reason"] == "stop"
    assert choice["logprobs"]["content"] == [{"token": "token_id:8", "logprob": -0.5},
                                             {"token": f"token_id:{EOS}", "logprob": -0.5}]
    assert ep.served.by_key[((5, 6, 7), (8, EOS))].logprobs == [-0.5, -0.5]
    models = httpx.get(ep.url + "/models", headers={"Authorization": f"Bearer {ep.api_key}"}).json()
    assert models["data"][0]["id"] == "policy" and models["data"][0]["max_model_len"] == 512


def test_the_endpoint_needs_its_key_and_refuses_what_it_would_ignore(endpoint) -> None:
    ep, sampler = endpoint
    assert _post(ep, {"token_ids": [1]}, key="wrong").status_code == 401
    assert httpx.get(ep.url + "/models").status_code == 401
    r = _post(ep, {"token_ids": [1], "sampling_params": {"max_tokens": 2, "repetition_penalty": 1.1}})
    assert r.status_code == 400 and "sampling_params.repetition_penalty" in r.text
    r = _post(ep, {"token_ids": [1], "sampling_params": {"max_tokens": 2, "stop_token_ids": [9]}})
    assert r.status_code == 400 and "stop_token_ids" in r.text
    assert _post(ep, {"token_ids": []}).status_code == 400
    assert _post(ep, {"token_ids": [1], "model": "other"}).status_code == 400
    assert not sampler.calls, "a refused request reached the sampler"
    assert ep.api_key not in r.text


def test_requests_in_flight_together_share_a_backend_call(endpoint) -> None:
    ep, sampler = endpoint
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: _post(ep, {"token_ids": [10 * i + 1], "sampling_params": {"max_tokens": 2}}),
                                range(8)))
    assert all(a.status_code == 200 for a in answers)
    assert [a.json()["choices"][0]["token_ids"][0] for a in answers] == [10 * i + 2 for i in range(8)]
    assert sum(sampler.calls) == 8 and len(sampler.calls) < 8, sampler.calls
    assert ep.served.requests == 8 and ep.served.calls == len(sampler.calls)


def test_a_completion_stops_where_the_models_context_ends(endpoint) -> None:
    ep, sampler = endpoint  # max_model_len = 512
    r = _post(ep, {"token_ids": [5] * 511, "sampling_params": {"max_tokens": 4}})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["token_ids"] == [6] and choice["finish_reason"] == "length"  # clamped to the one token left
    r = _post(ep, {"token_ids": [5] * 512, "sampling_params": {"max_tokens": 4}})
    assert r.status_code == 400 and "context of 512 tokens" in r.text
    assert sampler.calls == [1]


def test_a_sampler_that_raises_fails_its_requests_and_is_kept_for_the_run() -> None:
    calls: list[int] = []

    def broken(prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        calls.append(len(prompts))
        raise RuntimeError("CUDA out of memory")

    ep = PolicyEndpoint(broken, stop_token_ids=[EOS])
    ep.start()
    try:
        first = _post(ep, {"token_ids": [1], "sampling_params": {"max_tokens": 2}})
        later = _post(ep, {"token_ids": [1], "sampling_params": {"max_tokens": 2}})
    finally:
        ep.stop()
    assert first.status_code == later.status_code == 500 and "RuntimeError" in first.text
    assert calls == [1], "a request after the failure reached the sampler"
    assert isinstance(ep.served.error, RuntimeError) and "out of memory" in str(ep.served.error)
    ep.served.clear()
    assert ep.served.error is None


def test_a_token_stream_splits_into_turns_with_the_served_logprobs() -> None:
    # prompt [1, 2], turn 1 sampled [3, EOS], observation [4, 5], turn 2 sampled [6] (cut), tail [7]
    tokens = [1, 2, 3, EOS, 4, 5, 6, 7]
    mask = [False, False, True, True, False, False, True, False]
    served = Served()
    served.by_key[((1, 2), (3, EOS))] = Completion(token_ids=[3, EOS], logprobs=[-0.25, -0.125], entropies=[1.0, 0.5])
    served.by_key[((1, 2, 3, EOS, 4, 5), (6,))] = Completion(token_ids=[6], logprobs=[-2.0], finish_reason="length")
    seg, unmatched = segments(tokens, mask, [0.0] * len(tokens), served)
    assert seg.prompt_ids == [1, 2] and seg.tail == [7] and unmatched == 0
    assert [(t.observation, t.token_ids, t.logprobs) for t in seg.turns] == [([], [3, EOS], [-0.25, -0.125]),
                                                                            ([4, 5], [6], [-2.0])]
    assert [t.finish_reason for t in seg.turns] == ["stop", "length"] and seg.turns[0].entropies == [1.0, 0.5]
    # a turn the endpoint did not serve keeps the trace's logprobs and is counted
    seg, unmatched = segments(tokens, mask, [0.0, 0.0, -1.0, -1.0, 0.0, 0.0, -3.0, 0.0], Served())
    assert unmatched == 2 and seg.turns[1].logprobs == [-3.0]


def test_branches_sharing_a_prefix_train_each_sampled_node_once() -> None:
    """Two root-to-leaf paths of one trace (verifiers starts a new one where it could not extend
    the previous prompt) share their first reply: it trains in the first segment only, and is
    prompt in the second."""
    import verifiers.v1 as vf
    from verifiers.v1.episode import Episode as VfEpisode
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    from retrain.environments.verifiers.episodes import played

    def node(parent: int | None, ids: list[int], sampled: bool) -> MessageNode:
        message = vf.AssistantMessage(content="a") if sampled else vf.UserMessage(content="u")
        return MessageNode(parent=parent, message=message, sampled=sampled, token_ids=ids, mask=[sampled] * len(ids),
                           logprobs=[-1.0] * len(ids) if sampled else [])

    nodes = [node(None, [1, 2], False), node(0, [3, 4], True), node(1, [5], False), node(2, [6], True),
             node(1, [7, 8], False), node(4, [9], True)]
    task = TraceTask(type="T", data=vf.TaskData(prompt=None))
    trace = vf.Trace(task=task, agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes, ok=True,
                     stop_condition="max_turns")
    trace.record_reward("hit", 0.5)
    served = Served()
    served.by_key[((1, 2), (3, 4))] = Completion(token_ids=[3, 4], logprobs=[-0.1, -0.2])
    out = played(0, VfEpisode(task=task, traces=[trace], ok=True), served)
    assert out.episode is not None and out.reward == 0.5 and out.episode.truncated == "max_turns"
    first, second = out.episode.segments
    assert [(t.observation, t.token_ids) for t in first.turns] == [([], [3, 4]), ([5], [6])]
    assert first.turns[0].logprobs == [-0.1, -0.2]  # what the endpoint served, not the trace's
    assert second.prompt_ids == [1, 2, 3, 4, 7, 8] and [t.token_ids for t in second.turns] == [[9]]
    assert len(out.episode.turns) == 3 and out.unmatched_turns == 2
    assert out.parts == {"env/reward/hit": 0.5}


@pytest.mark.slow
def test_a_broken_sampler_stops_the_step_with_its_own_error() -> None:
    """The guess fixture's Env plays through its harness against a sampler that raises: the
    step raises the sampler's exception, not "every group lost its episodes"."""
    tiny = pytest.importorskip("retrain.models.tiny", reason="the tiny tokenizer ships with retrain-backends-local")
    from transformers import AutoTokenizer

    from retrain.environments.verifiers.episodes import VerifiersEpisodes
    from retrain.environments.verifiers.load import load_tasks

    hf = AutoTokenizer.from_pretrained(str(tiny.ASSETS))

    class BrokenBackend:
        tokenizer = SimpleNamespace(hf=hf, eos_token_ids=(hf.eos_token_id,))
        max_context = 256

        def sample(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
            raise RuntimeError("CUDA out of memory (test)")

    tasks, env = load_tasks("retrain-fixture-guess", {"num_tasks": 2}, max_turns=2)
    episodes = VerifiersEpisodes("retrain-fixture-guess", env, tasks, workers=2)
    try:
        with pytest.raises(RuntimeError, match="CUDA out of memory"):
            episodes.collect(BrokenBackend(), [(episodes.examples()[0], [1])], group_size=2,  # type: ignore[arg-type]
                             sampling=SamplingParams(max_tokens=3))
        assert episodes.endpoint is not None and episodes.endpoint.max_model_len == 256
    finally:
        episodes.close()


@pytest.mark.slow
def test_a_failed_episode_is_dropped_and_its_group_trains_on_the_rest() -> None:
    """The guess Env's first episode raises: verifiers reports it failed, retrain drops it
    (counted) and the group trains on the two that finished; each kept episode's turns are
    what the sampler returned, the Env's "higher"/"lower" between them as observations."""
    tiny = pytest.importorskip("retrain.models.tiny", reason="the tiny tokenizer ships with retrain-backends-local")
    from transformers import AutoTokenizer

    from retrain.environments.verifiers.episodes import VerifiersEpisodes
    from retrain.environments.verifiers.load import load_tasks

    hf = AutoTokenizer.from_pretrained(str(tiny.ASSETS))
    eos = hf.eos_token_id
    digit = hf.encode("0", add_special_tokens=False)  # never the target (1..9): every episode plays all turns

    class Backend:
        tokenizer = SimpleNamespace(hf=hf, eos_token_ids=(eos,))

        def sample(self, prompts: list[list[int]], n: int, params: SamplingParams) -> list[list[Completion]]:
            ids = [*digit, eos]
            return [[Completion(token_ids=ids, logprobs=[-0.5] * len(ids))] for _ in prompts]

    tasks, env = load_tasks("retrain-fixture-guess", {"num_tasks": 2, "fail_first": 1}, max_turns=3)
    episodes = VerifiersEpisodes("retrain-fixture-guess", env, tasks, workers=3)
    try:
        out = episodes.collect(Backend(), [(episodes.examples()[0], [1])], group_size=3,  # type: ignore[arg-type]
                               sampling=SamplingParams(max_tokens=4))
    finally:
        episodes.close()
    (group,) = out.groups
    assert out.env_metrics["env/dropped_episodes"] == 1.0 and out.env_metrics["env/dropped_groups"] == 0.0
    assert group.episodes is not None and len(group.episodes) == 2
    for ep in group.episodes:
        turns = ep.turns
        assert len(turns) == 3 and all(t.token_ids == [*digit, eos] for t in turns)
        assert all(t.logprobs == [-0.5] * (len(digit) + 1) for t in turns)
        assert "higher" in hf.decode(turns[1].observation)  # the target is above 0
    assert out.env_metrics["env/unmatched_turns"] == 0.0 and out.env_metrics["env/policy_requests"] == 6.0
