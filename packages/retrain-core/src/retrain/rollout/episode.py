"""Multi-turn episodes: the token stream of a conversation the policy held with an environment,
and the datums it becomes.

An episode is one or more segments. A segment is one token stream: a prompt, then turns; a
turn is the tokens the environment and the chat template inserted after the previous turn
(its observation: a user message, a tool result, the template's role tags), then the tokens
the policy sampled. Token-in/token-out: a turn's prompt is the previous turn's prompt + its
sampled tokens + the observation, never a re-tokenisation of text, so a datum trains on
exactly the tokens the policy conditioned on and produced. A new segment starts only where
an environment rewrote the conversation (its next prompt does not extend the stream).

In a datum, observation tokens carry mask 0 (like the prompt), logprob 0 and advantage 0: the
policy loss neither reads them nor counts them in its denominators, so they get no policy
gradient. ECHO (retrain.training.echo) may give them a weight in its auxiliary supervised loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from retrain.types import Completion, Datum, FinishReason

#: Why an episode was cut short: the next prompt would not fit the model's context, the policy
#: hit max_tokens where an action was due, the episode reached [environment] max_turns, or its
#: tokens reached [environment] max_episode_tokens.
TRUNCATIONS = ("context_window", "action_token_limit", "max_turns", "max_episode_tokens")


class Turn(msgspec.Struct, kw_only=True):
    """`observation_mask` (one per observation token, optional): True where the environment
    wrote the token, False where only the chat template did (ECHO trains on the first kind);
    None: every observation token is the environment's."""

    token_ids: list[int]
    logprobs: list[float]
    observation: list[int] = msgspec.field(default_factory=list)
    entropies: list[float] | None = None
    finish_reason: str = "stop"
    observation_mask: list[bool] | None = None


class Segment(msgspec.Struct, kw_only=True):
    """`tail`: tokens after the last turn (a terminal observation) that no prompt showed the
    policy; only ECHO reads them. `overlap`, for a segment that began because the next prompt
    did not extend the previous segment's token row: the share of the shorter of the two that
    is their common prefix (retrain.rollout.stitch.prefix_overlap); 1.0 for a first segment.
    ECHO counts the segments whose overlap is under `[echo] min_prompt_overlap`."""

    prompt_ids: list[int]
    turns: list[Turn] = msgspec.field(default_factory=list)
    tail: list[int] = msgspec.field(default_factory=list)
    overlap: float = 1.0


class Episode(msgspec.Struct, kw_only=True):
    """`turn_advantages` (TL-GRPO) gives each turn's tokens one advantage, replacing the
    pipeline's token advantages; `env_s` is the wall time this episode spent in the
    environment; `text` is the transcript the generations log shows."""

    segments: list[Segment]
    truncated: str = ""
    turn_advantages: list[float] | None = None
    env_s: float = 0.0
    text: str = ""

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.segments for t in s.turns]

    @property
    def observation_tokens(self) -> int:
        return sum(len(t.observation) for t in self.turns) + sum(len(s.tail) for s in self.segments)

    def completion(self) -> Completion:
        """The policy's own tokens, all turns concatenated: what the advantage pipeline scores
        (surprisal, entropy, planning masks) as if it were one completion."""
        turns = self.turns
        entropies = None
        if turns and all(t.entropies is not None for t in turns):
            entropies = [e for t in turns for e in (t.entropies or [])]
        finish: FinishReason = "length" if self.truncated or (turns and turns[-1].finish_reason == "length") else "stop"
        return Completion(token_ids=[i for t in turns for i in t.token_ids],
                          logprobs=[lp for t in turns for lp in t.logprobs], finish_reason=finish,
                          entropies=entropies)

    def datums(self, advantages: Sequence[float] | np.ndarray, *, policy_version: int = 0,
               echo: Sequence[Sequence[float]] | None = None) -> list[Datum]:
        """One datum per segment. `advantages` are the token advantages of `completion()`
        (one per sampled token, in order); with `turn_advantages` set they are replaced turn
        by turn. `echo`: per segment, the ECHO weight of each of its non-prompt positions
        (`echo_layout`), or None."""
        adv = np.asarray(advantages, dtype=np.float64)
        turns = self.turns
        if adv.shape[0] != sum(len(t.token_ids) for t in turns):
            raise ValueError(f"{adv.shape[0]} advantages for {sum(len(t.token_ids) for t in turns)} sampled tokens")
        if self.turn_advantages is not None:
            if len(self.turn_advantages) != len(turns):
                raise ValueError(f"{len(self.turn_advantages)} turn advantages for {len(turns)} turns")
            adv = np.concatenate([np.full(len(t.token_ids), a) for t, a in zip(turns, self.turn_advantages,
                                                                                strict=True)]
                                 or [np.zeros(0)])
        out: list[Datum] = []
        at = 0
        for k, seg in enumerate(self.segments):
            tokens, lps, advs = list(seg.prompt_ids), [0.0] * len(seg.prompt_ids), [0.0] * len(seg.prompt_ids)
            mask = [0] * len(seg.prompt_ids)
            for t in seg.turns:
                n = len(t.token_ids)
                tokens += t.observation + t.token_ids
                mask += [0] * len(t.observation) + [1] * n
                lps += [0.0] * len(t.observation) + list(t.logprobs)
                advs += [0.0] * len(t.observation) + adv[at:at + n].tolist()
                at += n
            weights = None
            if echo is not None and any(echo[k]):
                tokens += seg.tail
                lps += [0.0] * len(seg.tail)
                advs += [0.0] * len(seg.tail)
                mask += [0] * len(seg.tail)
                weights = [0.0] * len(seg.prompt_ids) + list(echo[k])
                if len(weights) != len(tokens):
                    raise ValueError(f"segment {k}: {len(weights)} ECHO weights for {len(tokens)} tokens")
            out.append(Datum(tokens=tokens, logprobs=lps, advantages=advs, policy_version=policy_version,
                             mask=mask, echo_weights=weights))
        return out


def echo_layout(segment: Segment) -> list[bool]:
    """For each position after a segment's prompt (turns, then its tail): True where the
    environment put the token (an observation; where a turn's `observation_mask` says so),
    False where the policy sampled it or only the chat template wrote it."""
    out: list[bool] = []
    for t in segment.turns:
        mask = [True] * len(t.observation) if t.observation_mask is None else t.observation_mask
        if len(mask) != len(t.observation):
            raise ValueError(f"a turn's observation_mask has {len(mask)} entries for {len(t.observation)} "
                             "observation tokens")
        out += [bool(m) for m in mask] + [False] * len(t.token_ids)
    return out + [True] * len(segment.tail)


def episode_metrics(episodes: Sequence[Episode], dropped: int = 0) -> dict[str, float]:
    """Per-step multi-turn counters for the metrics row (`env/...`)."""
    if not episodes and not dropped:
        return {}
    turns = [len(e.turns) for e in episodes]
    out: dict[str, float] = {
        "env/episodes": float(len(episodes)),
        "env/turns_mean": float(np.mean(turns)) if turns else 0.0,
        "env/turns_max": float(max(turns, default=0)),
        "env/turns_total": float(sum(turns)),
        "env/observation_tokens": float(sum(e.observation_tokens for e in episodes)),
        "env/segments_extra": float(sum(len(e.segments) - 1 for e in episodes)),
        "env/truncated_episodes": float(sum(bool(e.truncated) for e in episodes)),
        "env/dropped_episodes": float(dropped),
    }
    for reason in TRUNCATIONS:
        out[f"env/truncated/{reason}"] = float(sum(e.truncated == reason for e in episodes))
    return out
