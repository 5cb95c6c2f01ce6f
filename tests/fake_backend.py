"""A deterministic fake backend for orchestration tests only (no model, no engine).

Vocabulary: ids 0..V-1 decode to short words; ``DELIM`` decodes to "\\n\\n", ``MERGED``
to ".\\n\\n" (a delimiter inside a bigger token) and ``EOS`` ends the sequence. The
"model" is a Markov chain: the next token is ``table[last token]`` (greedy) or a seeded
draw near it (sampling), so outputs depend only on the token-id prefix, as for a real LM.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from lrtune.backends.base import GenBatch, Generation, GenParams, SDCounters, aborted, finish_step, per_row

V = 40
EOS, DELIM, MERGED = 0, 1, 2
WORDS = {EOS: "<eos>", DELIM: "\n\n", MERGED: ".\n\n"}


def word(i: int) -> str:
    return WORDS.get(i, f" w{i}")


def chain(seed: int, eos_rate: float = 0.02, delim_rate: float = 0.15) -> list[int]:
    rng = random.Random(seed)
    table = []
    for _ in range(V):
        r = rng.random()
        if r < eos_rate:
            table.append(EOS)
        elif r < eos_rate + delim_rate:
            table.append(rng.choice([DELIM, MERGED]))
        else:
            table.append(rng.randrange(3, V))
    return table


class FakeBackend:
    concurrent_safe = False

    def __init__(self, table: list[int], name: str = "fake") -> None:
        self.table = table
        self.name = name
        self.eos_ids = frozenset({EOS})
        self.calls: list[tuple[int, GenParams]] = []  # (batch size, params or the first row's)
        self.row_params: list[list[GenParams]] = []  # every call's per-row params
        self.aborted_rows: list[list[int]] = []  # per call with on_done: the rows it stopped

    def encode_prompt(self, prompt: str, *, chat: bool = True) -> list[int]:
        return [3 + (ord(c) % (V - 3)) for c in prompt]

    def encode_messages(self, messages, *, prefill: str = "") -> list[int]:
        return self.encode_prompt("\n\n".join(m["content"] for m in messages) + prefill)

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return "".join("" if (skip_special_tokens and t == EOS) else word(t) for t in token_ids)

    def _next(self, last: int, rng: random.Random | None) -> int:
        nxt = self.table[last]
        if rng is not None and rng.random() < 0.3:
            nxt = rng.randrange(0, V)
        return nxt

    def generate(self, prefixes: Sequence[Sequence[int]], params, max_concurrent=None, on_done=None) -> GenBatch:
        """Rows end in order of their length (shortest first, then by index), as in a batch."""
        rows = per_row(params, len(prefixes))
        self.calls.append((len(prefixes), params if isinstance(params, GenParams) else rows[0]))
        self.row_params.append(rows)
        outs = []
        for prefix, params in zip(prefixes, rows):
            rng = None
            if params.temperature > 0:
                rng = random.Random(hash((params.seeds[0] if params.seeds else 0, tuple(prefix))))
            ids, last = [], prefix[-1]
            while len(ids) < params.max_tokens + 3:  # overshoot on purpose: finish_step must cut
                last = self._next(last, rng)
                ids.append(last)
                if last == EOS:
                    break
            ids, finish = finish_step(ids, self.decode, params, self.eos_ids)
            scores = None
            if params.score_from is not None:  # the fake's greedy next token scores 0 nats, any other -2
                scores = [
                    None if t == 0 else ((0.0, True) if self.table[prefix[t - 1]] == prefix[t] else (-2.0, False))
                    for t in range(params.score_from, len(prefix))
                ]
            tops = None
            if params.top_logprobs:  # the fake puts 0.8 on its next token, 0.2 on the one after it
                tops = [{t: math.log(0.8), self.table[t]: math.log(0.2)} for t in ids]
            outs.append(
                Generation(
                    token_ids=ids,
                    text=self.decode(ids),
                    finish=finish,
                    prompt_scores=scores,
                    logprobs=[math.log(0.8)] * len(ids) if tops or params.logprobs else None,
                    top_logprobs=tops,
                )
            )
        if on_done is not None:
            stopped: set[int] = set()
            for i in sorted(range(len(outs)), key=lambda i: (len(outs[i].token_ids), i)):
                if i not in stopped:
                    stopped |= set(on_done(i, outs[i])) - {i}
            self.aborted_rows.append(sorted(stopped))
            outs = [aborted() if i in stopped else o for i, o in enumerate(outs)]
        k = max(r.num_speculative_tokens for r in rows) if rows else 0
        sd = SDCounters(drafts=1, drafted_tokens=k, accepted_tokens=0) if k else None
        return GenBatch(outputs=outs, seconds=0.0, sd=sd)

    def start(self, num_speculative_tokens: int = 0) -> None:
        pass

    def close(self) -> None:
        pass


class SlowFakeBackend(FakeBackend):
    """A FakeBackend whose calls take a random time (thread-safe; for async LR tests)."""

    concurrent_safe = True

    def __init__(self, table, name="slow", seed=0, max_delay=0.004):
        super().__init__(table, name)
        self._rng = random.Random(seed)
        self._max_delay = max_delay
        import threading

        self._lock = threading.Lock()

    def generate(self, prefixes, params, max_concurrent=None, on_done=None):
        import time

        with self._lock:
            delay = self._rng.random() * self._max_delay
        time.sleep(delay)
        with self._lock:
            return super().generate(prefixes, params, on_done=on_done)
