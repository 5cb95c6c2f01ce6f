"""Prometheus metrics of ``lrtune serve`` (``GET /metrics``), in a registry of their own.

Counters add up each finished request's :class:`~lrtune.stats.DecodeStats`, so the rates a
dashboard divides are the decoder's own: α1 = ``lrtune_accepted_steps_total /
lrtune_drafted_steps_total``, α2 = ``lrtune_sd_accepted_tokens_total /
lrtune_sd_drafted_tokens_total``; the time split is ``lrtune_decode_seconds_total{part}``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServeMetrics:
    """The server's metrics; ``queued`` and ``running`` are read when scraped."""

    def __init__(self, queued, running) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("lrtune_requests", "requests answered", ["endpoint", "method", "status"], registry=r)
        self.errors = Counter("lrtune_errors", "requests that ended in an error", ["kind"], registry=r)
        Gauge("lrtune_queue_depth", "requests waiting for a slot", registry=r).set_function(queued)
        Gauge("lrtune_running_requests", "requests in flight (slots in the round)", registry=r).set_function(running)
        self.prompt_tokens = Counter("lrtune_prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generated_tokens = Counter("lrtune_generated_tokens", "tokens generated for finished requests", registry=r)
        self.rounds = Counter("lrtune_rounds", "rounds of finished requests by kind", ["kind"], registry=r)
        self.drafted_steps = Counter("lrtune_drafted_steps", "draft steps judged by the verifier", registry=r)
        self.accepted_steps = Counter("lrtune_accepted_steps", "draft steps the verifier accepted", registry=r)
        self.sd_drafted = Counter("lrtune_sd_drafted_tokens", "tokens drafted by token-level SD", registry=r)
        self.sd_accepted = Counter("lrtune_sd_accepted_tokens", "SD draft tokens the target accepted", registry=r)
        self.seconds = Counter("lrtune_decode_seconds", "decoding time of finished requests", ["part"], registry=r)
        self.round_s = Histogram(
            "lrtune_round_seconds",
            "wall time of one batched round",
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.round_slots = Histogram(
            "lrtune_round_slots", "requests in one round", registry=r, buckets=(1, 2, 4, 8, 16, 32, 64)
        )
        self.latency = Histogram(
            "lrtune_request_seconds",
            "time from arrival to the last byte",
            registry=r,
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self.first_step = Histogram(
            "lrtune_time_to_first_step_seconds",
            "time from arrival to the first committed text",
            registry=r,
            buckets=(0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60),
        )

    def observe_round(self, slots: int, seconds: float) -> None:
        self.round_s.observe(seconds)
        self.round_slots.observe(slots)

    def observe_done(self, stats: dict, prompt_tokens: int, completion_tokens: int) -> None:
        """Add one finished request's stats (``DecodeStats.to_dict()``)."""
        self.prompt_tokens.inc(prompt_tokens)
        self.generated_tokens.inc(completion_tokens)
        for kind in ("lr", "sd", "score"):
            self.rounds.labels(kind).inc(stats.get(f"{kind}_rounds", 0) or 0)
        self.drafted_steps.inc(stats.get("drafted_steps", 0) or 0)
        self.accepted_steps.inc(stats.get("accepted_steps", 0) or 0)
        self.sd_drafted.inc(stats.get("drafted_tokens", 0) or 0)
        self.sd_accepted.inc(stats.get("accepted_tokens", 0) or 0)
        for part in ("draft", "target", "verify", "prefill"):
            self.seconds.labels(part).inc(max(0.0, stats.get(f"{part}_s", 0.0) or 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
