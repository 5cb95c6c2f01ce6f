"""Resident rows: requests that stay in a vLLM engine across calls (``lrtune serve``).

A server's target and sd requests need no rounds: they run in the target's engine from
admission to their end, like any request of ``vllm serve``, and join or leave between two
engine steps. :class:`EngineSteps` owns every request of one engine while a backend serves
(:meth:`VLLMBackend.serve_resident`): it adds and aborts requests, runs one engine step at a
time (from a :meth:`VLLMBackend.generate` call or :meth:`VLLMBackend.step_resident`), hands
each resident row its tokens after every step, and splits the engine's SD counters per step.
:func:`run_continuous` is the step loop of one engine call (with or without an
:class:`EngineSteps`).

SD counters, per step: the engine counts drafts per step, not per request, so a step's
counter delta is split over the speculative requests that advanced in it, in proportion to the
tokens each advanced (:func:`lrtune.backends.base.split_counters`); a step where none advanced
(vLLM reports a pass one step late) goes to those of the previous step still in the engine,
else to every speculative request in it, else to :attr:`EngineSteps.unowned`. Every count lands
exactly once, so the requests' counters plus ``unowned`` sum to the engine's totals.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from lrtune.backends.base import SDCounters, add_counters, split_counters


# a resident row's callback: (its tokens so far, vLLM's final RequestOutput when it ended else
# None, then its SD counters else None), called after every step that advanced it
OnUpdate = Callable[[list[int], object | None, SDCounters | None], None]


class EngineSteps:
    """Every request of one engine while a backend serves (module docstring). ``llm``: the
    ``vllm.LLM``; ``counter``: its SD stat logger (None: it does not speculate);
    ``between``: called after every step (the server admits requests there)."""

    def __init__(self, llm, counter, between: Callable[[], None] | None = None) -> None:
        self.engine = llm.llm_engine
        self.counter = counter
        self.between = between
        self.tokens: dict[str, int] = {}  # request id -> tokens so far
        self.spec: dict[str, bool] = {}  # request id -> it speculates
        self.sd: dict[str, SDCounters] = {}  # request id -> counters attributed so far
        self.residents: dict[str, OnUpdate] = {}  # request id -> its callback (resident rows)
        self._last: list[str] = []  # the speculative requests that advanced in the last step
        self.unowned = SDCounters()  # counts reported when no speculative request was in the engine

    def add(self, rid: str, prompt, sp, *, spec: bool, on_update: OnUpdate | None = None) -> None:
        """Add one request (with ``on_update``: a resident row); every output it gives is
        cumulative (its tokens so far)."""
        from vllm.sampling_params import RequestOutputKind

        sp.output_kind = RequestOutputKind.CUMULATIVE
        self.tokens[rid], self.spec[rid] = 0, spec
        if on_update is not None:
            self.residents[rid] = on_update
        self.engine.add_request(rid, prompt, sp)

    def abort(self, rids: Sequence[str]) -> dict[str, SDCounters | None]:
        """Abort requests still in the engine (resident or not) and forget them; returns the
        SD counters each aborted one was given."""
        live = [r for r in rids if r in self.tokens]
        if live:
            self.engine.abort_request(live)
        return {r: self.forget(r) for r in live}

    def forget(self, rid: str) -> SDCounters | None:
        """Drop a request's bookkeeping; returns the SD counters it was given."""
        self.tokens.pop(rid, None)
        self.spec.pop(rid, None)
        self.residents.pop(rid, None)
        return self.sd.pop(rid, None)

    def step(self) -> list:
        """One engine step: the engine's outputs (cumulative), after each resident row has seen
        its own and the step's SD counts are split (module docstring)."""
        before = self.counter.totals.copy() if self.counter is not None else None
        outs = self.engine.step()
        advanced: dict[str, int] = {}
        for out in outs:
            if out.request_id in self.tokens:
                n = len(out.outputs[0].token_ids) if out.outputs else 0
                advanced[out.request_id] = max(0, n - self.tokens[out.request_id])
                self.tokens[out.request_id] = n
        if before is not None:
            self._split(self.counter.totals.minus(before), advanced)
        for out in outs:
            on_update = self.residents.get(out.request_id)
            if on_update is not None:
                ids = list(out.outputs[0].token_ids) if out.outputs else []
                if out.finished:
                    on_update(ids, out, self.forget(out.request_id))
                else:
                    on_update(ids, None, None)
        if self.between is not None:
            self.between()
        return outs

    def _split(self, delta: SDCounters, advanced: dict[str, int]) -> None:
        spec = [r for r, n in advanced.items() if n > 0 and self.spec.get(r)]
        if spec:
            self._last = spec
        if not (delta.drafts or delta.drafted_tokens or delta.accepted_tokens):
            return
        owners = spec or [r for r in self._last if r in self.tokens] or [r for r, on in self.spec.items() if on]
        if not owners:
            self.unowned.add(delta)
            return
        weights = [advanced.get(r, 0) or 1 for r in owners]
        for r, part in zip(owners, split_counters(delta, weights)):
            self.sd[r] = add_counters([self.sd.get(r), part])

    @property
    def idle(self) -> bool:
        return not self.residents


def run_continuous(
    llm, prompts: list, sps: list, max_concurrent: int, finished=None, steps: EngineSteps | None = None, spec=None
) -> tuple[list, list[float], list]:
    """Run ``prompts`` with at most ``max_concurrent`` in the engine (``LLMEngine.add_request``
    + ``step``, as ``LLM.generate`` does with all at once): a finished request's slot takes
    the next prompt at once. ``finished(i, output)`` (optional) sees each request as it ends
    and returns requests to abort now (``abort_request``; their result stays ``None``).
    ``steps``: the engine's :class:`EngineSteps` while it serves resident rows (``spec``:
    which prompts speculate); they step the engine and give each row its SD counters.
    Returns the outputs in prompt order, each request's seconds from admission to end, and
    (with ``steps``) each request's SD counters (else Nones)."""
    from vllm.sampling_params import RequestOutputKind

    engine = llm.llm_engine
    tag = f"lrtune-{os.getpid()}-{time.monotonic_ns()}"
    pending = list(range(len(prompts)))
    in_flight: dict[str, int] = {}
    admitted: dict[int, float] = {}
    results: list = [None] * len(prompts)
    seconds = [0.0] * len(prompts)
    row_sd: list = [None] * len(prompts)

    def top_up() -> None:
        while pending and len(in_flight) < max_concurrent:
            i = pending.pop(0)
            in_flight[f"{tag}-{i}"] = i
            if steps is not None:
                steps.add(f"{tag}-{i}", prompts[i], sps[i], spec=bool(spec[i]) if spec else False)
            else:
                sps[i].output_kind = RequestOutputKind.FINAL_ONLY
                engine.add_request(f"{tag}-{i}", prompts[i], sps[i])
            admitted[i] = time.perf_counter()

    def abort(rids: list[str]) -> None:
        if steps is not None:
            for rid, sd in steps.abort(rids).items():
                row_sd[in_flight[rid]] = sd
        else:
            engine.abort_request(rids)

    try:
        top_up()
        while in_flight:
            for out in steps.step() if steps is not None else engine.step():
                i = in_flight.pop(out.request_id, None) if out.finished else None
                if i is None:
                    continue
                results[i] = out
                seconds[i] = time.perf_counter() - admitted[i]
                if steps is not None:
                    row_sd[i] = steps.forget(out.request_id)
                stop = {j for j in finished(i, out) if results[j] is None} if finished is not None else set()
                live = [rid for rid, j in in_flight.items() if j in stop]
                if live:
                    abort(live)
                    for rid in live:
                        del in_flight[rid]
                pending[:] = [j for j in pending if j not in stop]
            top_up()
    except BaseException:
        if in_flight:  # never leave requests behind in an engine other calls share
            abort(list(in_flight))
        raise
    return results, seconds, row_sd
