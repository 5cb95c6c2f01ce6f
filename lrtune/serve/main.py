"""``lrtune serve``: load the models once (the options of ``lrtune decode``), start the round
scheduler and serve the OpenAI API with uvicorn until SIGTERM or Ctrl-C.

Shutdown drains: on the first SIGTERM/SIGINT the server stops admitting (new requests get
503, ``/health`` says draining), every queued and running request is decoded to its end
(at most ``--drain-timeout`` seconds), then the process exits: 0 after SIGTERM, 130 after
Ctrl-C (as every lrtune command).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from annotated_types import Interval

from lrtune.schema import STRICT, Checked, NonNegative, Positive, Text

Port = Annotated[int, Interval(ge=0, le=65535)]
Slots = Annotated[int, Interval(ge=1, le=256)]
Queue = Annotated[int, Interval(ge=0, le=100_000)]
Chunk = Annotated[int, Interval(ge=0, le=100_000)]


@dataclass
class ServeOptions(Checked):
    """How ``lrtune serve`` listens and batches (models: ModelConfig; per-request defaults:
    DecodeConfig)."""

    __pydantic_config__ = STRICT

    host: Text = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: Port = field(default=8000, metadata={"help": "TCP port (0: any free port, printed at start)"})
    served_model_name: Text | None = field(
        default=None, metadata={"help": "the model name clients send (default: the target's directory name)"}
    )
    max_concurrent: Slots = field(
        default=8, metadata={"help": "requests decoded together, one batched round at a time"}
    )
    max_queue: Queue = field(
        default=64, metadata={"help": "requests waiting for a slot; more get 429 with Retry-After"}
    )
    request_timeout: Positive | None = field(
        default=600.0, metadata={"help": "seconds from a request's arrival to its answer's end (then 504)"}
    )
    target_chunk_tokens: Chunk = field(
        default=128,
        metadata={
            "help": "transformers backend: tokens a target or sd request decodes per round (they share rounds "
            "with LR requests); 0: one step per round, as LR's target rows. On vLLM such a request stays in "
            "the engine and joins between token steps"
        },
    )
    drain_timeout: NonNegative = field(
        default=60.0, metadata={"help": "seconds SIGTERM waits for in-flight requests before exiting"}
    )
    profile: Text | None = field(
        default=None,
        metadata={
            "help": "lrtune profile JSON of this machine: what a request's method 'auto' runs is chosen from it "
            "at start (without one, from the speedup model's default costs)"
        },
    )


def check_listen(opts: ServeOptions, cfg) -> None:
    """ConfigError before any model loads: a default schedule the server cannot batch, or an
    address it cannot listen on (unknown host, port taken)."""
    import socket

    from lrtune.errors import ConfigError
    from lrtune.serve.protocol import SERVED_SCHEDULES

    missing = [m for m in ("starlette", "uvicorn", "openai", "prometheus_client") if not _importable(m)]
    if missing:
        raise ConfigError(
            f"lrtune serve needs {', '.join(missing)}: install the serve extra (bash scripts/install.sh cpu,serve)"
        )
    if opts.profile is not None:  # method auto reads it at start: a bad file is refused now
        from lrtune import pricing

        pricing.plan(profile=opts.profile)
    if cfg.schedule not in SERVED_SCHEDULES:
        raise ConfigError(f"--schedule {cfg.schedule}: the server batches sync rounds ({', '.join(SERVED_SCHEDULES)})")
    try:
        infos = socket.getaddrinfo(opts.host, opts.port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"--host {opts.host}: cannot resolve it ({e.strerror})") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as e:
            raise ConfigError(f"--port {opts.port}: cannot listen on {opts.host}:{opts.port} ({e.strerror})") from None


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def served_gamma2_max(decoder, cfg) -> int:
    """The largest γ2 a request may ask for: the shared vLLM SD engine's drafts (a larger γ2
    would start another engine), any depth on transformers, else the server's γ2."""
    shared = getattr(getattr(decoder.target, "config", None), "shared_spec_tokens", 0) or 0
    if shared:
        return int(shared)
    if type(decoder.target).__name__ == "HFBackend":
        from lrtune.decodeconfig import GAMMA_MAX

        return GAMMA_MAX
    return cfg.gamma2


def resolve_auto(dec, cfg, profile: str | None, gamma2_max: int):
    """What method ``auto`` runs on this server (:mod:`lrtune.policies.auto`, through
    :func:`lrtune.decoding.auto_choice_for`): the choice and, for adaptive rounds, the
    controller each such request gets a copy of (the server's own ``--controller`` if it has
    one, else :data:`lrtune.policies.auto.CONTROLLER`; its copies share what they learn),
    priced for the engine that drafts ``gamma2_max`` tokens."""
    from dataclasses import replace

    from lrtune import pricing
    from lrtune.build import auto_controller, build_controller
    from lrtune.decoding import auto_choice_for

    models = dec.models
    choice = auto_choice_for(
        models, cfg.gamma1, cfg.gamma2, cfg.max_step_tokens, cfg.seed, profile, models.control.controller, False
    )
    controller = None
    if choice.method == "adaptive":
        controller = dec.decoder.controller or pricing.priced(
            build_controller(models.control.controller or auto_controller(), replace(cfg, method="lr+sd")),
            pricing.plan(profile=profile, engine_drafts=gamma2_max, verifier=dec.verifier),
        )
    return choice, controller


def build_server(dec, cfg, opts: ServeOptions, *, log=None):
    """The scheduler, the app and its metrics for a loaded :class:`~lrtune.decoding.Decoder`
    (requests default to ``cfg``). The caller shuts the scheduler down."""
    from lrtune.serve.app import AppSettings, make_app
    from lrtune.serve.metrics import ServeMetrics
    from lrtune.serve.protocol import ServerLimits
    from lrtune.serve.scheduler import RoundScheduler

    name = opts.served_model_name or Path(str(getattr(dec.target, "model", "lrtune"))).name
    gamma2_max = served_gamma2_max(dec.decoder, cfg)
    auto, auto_controller = resolve_auto(dec, cfg, opts.profile, gamma2_max)
    # the gauges read the scheduler when scraped; the scheduler reports rounds to the metrics
    metrics = ServeMetrics(lambda: scheduler.queued, lambda: scheduler.running)
    scheduler = RoundScheduler(
        dec.decoder,
        auto_controller=auto_controller,
        max_concurrent=opts.max_concurrent,
        max_queue=opts.max_queue,
        max_len=dec.models.engine.max_model_len,
        horizon=opts.target_chunk_tokens,
        log=log or (lambda line: print(line, file=sys.stderr, flush=True)),
        on_round=lambda jobs, seconds: metrics.observe_round(len(jobs), seconds),
    )
    limits = ServerLimits(
        defaults=cfg,
        models=(name,),
        has_draft=dec.draft is not None,
        gamma2_max=gamma2_max,
        auto_method=auto.decode_method,
        one_sided=bool(getattr(dec.decoder.verifier, "one_sided", False)),
    )
    app = make_app(scheduler, AppSettings(limits=limits, request_timeout=opts.request_timeout), metrics)
    app.state.model = name
    app.state.auto = auto
    return scheduler, app


def main(opts: ServeOptions, models, cfg) -> int:
    """Load, start the engines, serve until a signal, drain, exit 0."""
    import uvicorn

    from lrtune.decoding import Decoder

    dec = Decoder.from_configs(models, cfg, load_all_methods=bool(models.draft))
    dec.start_engines(cfg)
    if dec.draft is not None:
        dec.target.start(cfg.gamma2)
        dec.draft.start(0)
    scheduler, app = build_server(dec, cfg, opts)

    signals: list[int] = []
    drain_started: list[float] = []

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:  # stop admitting at once; uvicorn drains the connections
            scheduler.stop_admitting()
            drain_started.append(time.monotonic())
            super().handle_exit(sig, frame)
            signals.extend(self._captured_signals)  # lrtune's exit status says it, not a re-raised signal
            self._captured_signals.clear()

    config = uvicorn.Config(
        app,
        host=opts.host,
        port=opts.port,
        log_level="warning",
        timeout_graceful_shutdown=max(1, round(opts.drain_timeout)) if opts.drain_timeout else 0,
        lifespan="off",
    )
    server = Server(config)

    import threading

    def announce() -> None:
        while not server.started and not server.should_exit:
            threading.Event().wait(0.05)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1] if server.servers else opts.port
            print(
                f"lrtune serve: listening on http://{opts.host}:{port} (model {app.state.model}"
                f"; default method {cfg.method}; {opts.max_concurrent} in flight, queue {opts.max_queue})\n"
                f"lrtune serve: method auto runs {app.state.auto.method}: {app.state.auto.reason}",
                file=sys.stderr,
                flush=True,
            )

    threading.Thread(target=announce, daemon=True).start()
    server.run()
    spent = time.monotonic() - drain_started[0] if drain_started else 0.0
    drained = scheduler.shutdown(timeout=max(0.0, opts.drain_timeout - spent))
    if not drained:
        print("lrtune serve: stopped with requests still running (--drain-timeout)", file=sys.stderr)
    dec.close()
    import signal

    return 130 if signal.SIGINT in signals else 0
