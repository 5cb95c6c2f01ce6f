"""Asynchronous (pipelined) Lookahead Reasoning.

The draft keeps drafting ahead of the committed prefix P while the target works:

    draft:   ŝ1 = D(P), ŝ2 = D(P ŝ1), ...                 up to γ1 steps ahead of P
    target:  s_i = T(P ŝ1..ŝ(i-1)) starts as soon as ŝ(i-1) exists (i = 1 at once)
    commit:  when s1 is ready: if ŝ1 exists and V(ŝ1, s1) accepts, P <- P ŝ1 and every
             job shifts down one position (its prefix is still valid); otherwise
             P <- P s1 and all speculative work is dropped (a new epoch).

Each backend has one worker thread. The target worker runs every queued job of the
current epoch as ONE batched call, so several positions share a batch as in sync LR.
Work of an old epoch that has not started is cancelled; a call already running cannot be
interrupted, so its result is discarded. Backends that cannot run concurrently with each
other (vLLM engines in the calling process share process-global state: lrtune's default on a
CPU) declare ``concurrent_safe = False`` and their calls take one lock: then nothing overlaps
and async LR only reorders work. vLLM engine cores in their own processes (vLLM's default,
lrtune's on a GPU) and the transformers backend are safe, so draft and target calls overlap.
``DecodeStats.overlap_s`` reports the overlap obtained.

Round accounting matches sync LR: a round ends when a target step is committed, and its
verdicts are the draft steps accepted before it (plus the rejected one, if any).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from lrtune.backends.base import GenParams
from lrtune.rounds import chain_ids, ends_apart, mix_seed, step_pair, step_params
from lrtune.stats import DecodeStats
from lrtune.verifiers import accept

_ENGINE_LOCK = threading.Lock()


@dataclass
class _Job:
    epoch: int
    prefix: list[int]
    params: GenParams
    future: Future = field(default_factory=Future)


class _Worker:
    """One thread that runs a backend's jobs; queued jobs of one epoch run as one batch."""

    def __init__(self, backend, role: str, batch: bool, account) -> None:
        self.backend, self.batch, self.account = backend, batch, account
        self.cv = threading.Condition()
        self.queue: list[_Job] = []
        self.epoch = 0
        self.closed = False
        self.busy_s = 0.0
        self.thread = threading.Thread(target=self._run, name=f"lrtune-{role}", daemon=True)
        self.thread.start()

    def submit(self, job: _Job) -> Future:
        with self.cv:
            self.queue.append(job)
            self.cv.notify()
        return job.future

    def new_epoch(self, epoch: int) -> None:
        with self.cv:
            self.epoch = epoch
            for job in self.queue:
                job.future.cancel()
            self.queue.clear()

    def close(self) -> None:
        with self.cv:
            self.closed = True
            self.cv.notify()
        self.thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.queue and not self.closed:
                    self.cv.wait()
                if self.closed:
                    return
                jobs = [j for j in self.queue if j.epoch == self.epoch]
                for j in self.queue:
                    if j.epoch != self.epoch:
                        j.future.cancel()
                if not self.batch:
                    jobs = jobs[:1]
                taken = {id(j) for j in jobs}
                self.queue = [j for j in self.queue if id(j) not in taken and j.epoch == self.epoch]
            jobs = [j for j in jobs if j.future.set_running_or_notify_cancel()]
            if not jobs:
                continue
            try:
                params = jobs[0].params
                if len(jobs) > 1 and params.seeds is not None:
                    params = _with_seeds(params, tuple(s for j in jobs for s in j.params.seeds))
                if self.backend.concurrent_safe:
                    t0 = time.perf_counter()
                    out = self.backend.generate([j.prefix for j in jobs], params)
                    self.busy_s += time.perf_counter() - t0
                else:
                    with _ENGINE_LOCK:  # busy time excludes the wait for the lock
                        t0 = time.perf_counter()
                        out = self.backend.generate([j.prefix for j in jobs], params)
                        self.busy_s += time.perf_counter() - t0
                self.account(out)  # all work is billed, also work that a rejection made useless
                for j, g in zip(jobs, out.outputs):
                    j.future.set_result((g, out))
            except BaseException as e:  # noqa: BLE001 - delivered to the waiting decoder
                for j in jobs:
                    if not j.future.done():
                        j.future.set_exception(e)


def _with_seeds(params: GenParams, seeds: tuple[int, ...] | None) -> GenParams:
    from dataclasses import replace

    return replace(params, seeds=seeds)


def decode_async(dec, prompt: list[int], cfg, stats: DecodeStats, on_commit, verifier, problem_text: str):
    """Async LR (see module docstring) with ``dec``'s target and draft engines and
    ``verifier`` (its pairs' context: ``problem_text`` and the solution tail, as in sync LR);
    returns ``(token_ids, steps, finished_by_eos)``."""
    run = _AsyncRun(dec, prompt, cfg, stats, on_commit, verifier, problem_text)
    t_start = time.perf_counter()
    try:
        run.loop()
    finally:
        run.draft_w.close()
        run.target_w.close()
        wall = time.perf_counter() - t_start
        stats.overlap_s += max(0.0, run.draft_w.busy_s + run.target_w.busy_s - wall)
    return run.gen, run.steps, bool(run.gen) and run.gen[-1] in run.eos


class _AsyncRun:
    """The state of one async LR decode: the committed prefix ``P = prompt + gen``, the
    draft ``chain`` after it, and the target jobs ``tjobs[i] = T(P ŝ1..ŝ(i-1))``."""

    def __init__(self, dec, prompt: list[int], cfg, stats: DecodeStats, on_commit, verifier, problem_text: str) -> None:
        self.dec, self.prompt, self.cfg, self.stats = dec, prompt, cfg, stats
        self.on_commit, self.verifier, self.problem_text = on_commit, verifier, problem_text
        self.eos = dec.target.eos_ids  # the answer ends on the target's EOS only
        self.gen: list[int] = []
        self.steps: list[tuple[str, list[int]]] = []
        self.verdicts: list[bool] = []  # of the current round
        self.epoch = 0
        self.chain: list = []  # draft steps after P, in order
        self.draft_job: Future | None = None
        self.tjobs: dict[int, Future] = {}  # position i (1-based after P) -> target step
        self.draft_dead = False  # the draft produced an empty step: no more drafting this epoch
        self.draft_w = _Worker(dec.draft, "draft", batch=False, account=self._account_draft)
        self.target_w = _Worker(dec.target, "target", batch=True, account=self._account_target)

    # ---- accounting (worker threads) -------------------------------------------------
    def _account_draft(self, out) -> None:
        self.stats.draft_calls += 1
        self.stats.draft_s += out.seconds
        self.stats.draft_step_tokens += sum(len(o.token_ids) for o in out.outputs)

    def _account_target(self, out) -> None:
        self.stats.observe_target_call(out.seconds, out.sd)
        self.stats.target_step_tokens += sum(len(o.token_ids) for o in out.outputs)

    # ---- scheduling ----------------------------------------------------------------------
    def _params(self, role: int, prefix_len: int, budget: int, draft: bool) -> GenParams:
        # seeded by the prefix, so a step's sample never depends on when it was scheduled
        seeds = (mix_seed(self.cfg.seed, prefix_len, role),) if self.cfg.temperature > 0 else None
        return _with_seeds(step_params(self.cfg, budget, 0, 0, 1, gamma2=self.cfg.sd_gamma2, draft=draft), seeds)

    def _schedule(self) -> None:
        """Submit the next draft step (up to γ1 ahead of P) and every target step whose
        prefix exists (up to position γ1 + 1)."""
        cfg, chain = self.cfg, self.chain
        budget = cfg.max_new_tokens - len(self.gen)
        base = self.prompt + self.gen
        drafted = sum(len(s.token_ids) for s in chain)
        answer_ended = bool(chain) and chain[-1].token_ids[-1] in self.eos
        chain_ended = answer_ended or (bool(chain) and chain[-1].finish == "eos")  # a draft-only EOS ends the chain
        if (
            self.draft_job is None
            and len(chain) < cfg.gamma1
            and drafted < budget
            and not chain_ended
            and not self.draft_dead
        ):
            prefix = base + chain_ids(chain)
            self.draft_job = self.draft_w.submit(_Job(self.epoch, prefix, self._params(1, len(prefix), budget, True)))
        for i in range(1, min(len(chain) + 1, cfg.gamma1 + 1) + 1):
            if i in self.tjobs:
                continue
            if i == len(chain) + 1 and (answer_ended or drafted >= budget):
                break
            prefix = base + chain_ids(chain[: i - 1])
            self.tjobs[i] = self.target_w.submit(_Job(self.epoch, prefix, self._params(2, len(prefix), budget, False)))

    def _restart(self) -> None:
        """A target step was committed: all speculative work is stale (a new epoch)."""
        self.epoch += 1
        self.draft_w.new_epoch(self.epoch)
        self.target_w.new_epoch(self.epoch)
        self.chain, self.draft_job, self.tjobs, self.draft_dead = [], None, {}, False

    # ---- committing ------------------------------------------------------------------------
    def _commit(self, source: str, ids: list[int]) -> bool:
        """Append a step; True when decoding is over."""
        ids = ids[: self.cfg.max_new_tokens - len(self.gen)]
        if not ids:
            return True
        self.gen.extend(ids)
        self.steps.append((source, ids))
        if self.on_commit:
            self.on_commit(source, ids)
        return ids[-1] in self.eos or len(self.gen) >= self.cfg.max_new_tokens

    def _verify_first(self, s1) -> bool:
        """The verifier's verdict on ŝ1 against s1 (both after P); rejected unasked when exactly
        one of them ends the answer (:func:`lrtune.rounds.ends_apart`)."""
        if ends_apart(self.chain[0].token_ids, s1.token_ids, self.eos):
            self.verdicts.append(False)
            return False
        pair = step_pair(
            self.dec.target, self.problem_text, self.gen, self.cfg.context_tokens, self.chain[0].token_ids, s1.token_ids
        )
        tv = time.perf_counter()
        (ok,), _ = accept(self.verifier, [pair])
        self.stats.verify_s += time.perf_counter() - tv
        self.stats.verifier_calls += 1
        self.verdicts.append(ok)
        return ok

    def loop(self) -> None:
        """Until EOS or the budget: a ready draft step extends the chain first; when s1 is
        ready, ŝ1 is committed if accepted (jobs shift down one position), else s1 is."""
        done = False
        while not done:
            self._schedule()
            _wait_first([f for f in (self.draft_job, self.tjobs.get(1)) if f is not None])
            if self.draft_job is not None and self.draft_job.done():
                g, _ = self.draft_job.result()  # a draft step that is ready is used before s1
                self.draft_job = None
                if g.token_ids:
                    self.chain.append(g)
                else:
                    self.draft_dead = True
                continue
            s1, _ = self.tjobs[1].result()
            if self.chain and self._verify_first(s1):
                first = self.chain.pop(0)
                self.tjobs = {i - 1: f for i, f in self.tjobs.items() if i > 1}
                done = self._commit("draft", list(first.token_ids))
                if done:
                    self.stats.observe_round(self.verdicts, committed_target_steps=0)
                continue
            self.stats.observe_round(self.verdicts)
            self.verdicts = []
            done = self._commit("target", list(s1.token_ids))
            self._restart()


def _wait_first(futures: list[Future]) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait

    wait(futures, return_when=FIRST_COMPLETED)
