"""``lrtune`` command line, a face of the core: parses flags (generated from the config
dataclasses), then calls a stage.

Commands:
    lrtune decode PROMPT | --task-problem N   decode one prompt and print answer + stats
    lrtune prepare                            build the offline default model pair once
    lrtune evaluate [--task --limit --methods ...]  every method on the same problems: report + plots
    lrtune collect [--task --limit --teacher ...]   step-pair dataset with teacher labels (--merge, --stats)
    lrtune train verifier --data DIR [--student ...] distil the teacher into a verifier checkpoint
    lrtune train controller --data DIR [--profile F] fit the learned (γ1, γ2) controller
    lrtune calibrate --verifier V --data DIR      threshold by a false-accept budget (ε, 1-δ)
    lrtune profile [--out F]                      measure c1, c2 and b(n) for the speedup model
    lrtune demo [--size ...]                      the whole loop on the offline default pair
    lrtune pipeline --config pipeline.yaml        the whole loop for any models/tasks
    lrtune labels judge-probe|noise|vote          probe and relabel a collected dataset
    lrtune doctor [--timing] [--json F]           check what this machine runs (engines, code paths, equality)
    lrtune serve [--port 8000 ...]                an OpenAI-compatible server (LR+SD, batched across requests)

Every user error prints one line ``lrtune: error: ...`` and exits with status 2; anything
unexpected one line and status 1 (``--debug`` shows the traceback); Ctrl-C exits with 130.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import dataclasses
from dataclasses import dataclass, field

from lrtune.configs import ArgumentParser, add_dataclass_args, build, check_unknown_keys, load_config_file
from lrtune.boundary import run_guarded, split_debug
from lrtune.schema import STRICT, Checked, ProblemIndex, Seed, Text


@dataclass
class DecodeOptions(Checked):
    """What ``lrtune decode`` decodes and prints (models: ModelConfig; decoding: DecodeConfig)."""

    __pydantic_config__ = STRICT

    prompt: Text | None = field(
        default=None, metadata={"help": "the user prompt (chat template applied)", "flag": "PROMPT"}
    )
    task_problem: ProblemIndex | None = field(
        default=None, metadata={"help": "decode problem N of --task instead of PROMPT"}
    )
    task: Text = field(default="gsm_symbolic", metadata={"help": "task for --task-problem"})
    task_seed: Seed = field(default=0, metadata={"help": "task generator seed"})
    chat: bool = field(default=True, metadata={"help": "apply the chat template to PROMPT (--no-chat: feed it raw)"})
    json: bool = field(default=False, metadata={"help": "print one JSON object instead of text + table"})
    profile: Text | None = field(
        default=None, metadata={"help": "--method auto: lrtune profile JSON with this machine's measured SD and costs"}
    )


def make_parser() -> ArgumentParser:
    """The ``lrtune`` parser: every command with its flags."""
    parser = ArgumentParser(prog="lrtune", description="Lookahead Reasoning + speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    _add_decoding_commands(sub)
    _add_stage_commands(sub)
    _add_loop_commands(sub)
    _add_tool_commands(sub)
    return parser


def _add_decoding_commands(sub) -> None:
    """``decode`` and ``serve``: their own options, the models and the decoding."""
    from lrtune.modelconfig import ModelConfig
    from lrtune.decoder import DecodeConfig

    dec = sub.add_parser("decode", help="decode one prompt with target | sd | lr | lr+sd")
    dec.add_argument("prompt", nargs="?", help="the user prompt (chat template applied)")
    dec.add_argument("--config", help="YAML file with any of these options")
    add_dataclass_args(dec, DecodeOptions, skip=("prompt",))
    add_dataclass_args(dec, ModelConfig)
    add_dataclass_args(dec, DecodeConfig)
    _allow_auto(dec)

    from lrtune.serve.main import ServeOptions

    srv = sub.add_parser("serve", help="an OpenAI-compatible server: LR+SD with round-level batching across requests")
    srv.add_argument("--config", help="YAML file with any of these options")
    add_dataclass_args(srv, ServeOptions)
    add_dataclass_args(srv, ModelConfig)
    add_dataclass_args(srv, DecodeConfig)


def _add_stage_commands(sub) -> None:
    """The stages, each with the flags its own module declares: ``evaluate``, ``collect``,
    ``train verifier|controller``, ``calibrate``, ``labels ...`` and ``profile``."""
    from lrtune.eval.evaluate import add_arguments as add_eval_arguments

    ev = sub.add_parser("evaluate", help="accuracy, acceptance and speedup of every method on a task, in one run")
    add_eval_arguments(ev)

    from lrtune.data_gen.collect import add_arguments as add_collect_arguments

    col = sub.add_parser("collect", help="record every draft/target step pair with teacher labels (parquet)")
    add_collect_arguments(col)

    _add_train_commands(sub)

    from lrtune.train.recalibrate import add_arguments as add_calibrate_arguments

    cal = sub.add_parser(
        "calibrate",
        help="set a verifier's threshold by a false-accept budget with a guarantee "
        "(ε at confidence 1-δ) on labelled pairs it never trained on",
    )
    add_calibrate_arguments(cal)

    from lrtune.data_gen import judge_probe, label_noise, vote_labels

    lab = sub.add_parser("labels", help="probe and relabel a collected dataset: judge forms, label noise, vote teacher")
    lab_sub = lab.add_subparsers(dest="labels_command", required=True, parser_class=ArgumentParser)
    for word, mod, help_ in (
        ("judge-probe", judge_probe, "score a dataset's pairs with model-judge forms and compare with its labels"),
        ("noise", label_noise, "the rollout teacher on meaning-preserving edits of target steps: its flip rate"),
        ("vote", vote_labels, "relabel a rollout-labelled dataset with the vote teacher (greedy + K sampled)"),
    ):
        mod.add_arguments(lab_sub.add_parser(word, help=help_))

    from lrtune.eval.profile import add_arguments as add_profile_arguments

    prof = sub.add_parser("profile", help="measure c1, c2 and the batch-cost curve b(n) of a backend/model pair")
    add_profile_arguments(prof)


def _add_train_commands(sub) -> None:
    """``train verifier`` and ``train controller``."""
    from lrtune.train.verifier import add_arguments as add_train_verifier_arguments

    tr = sub.add_parser("train", help="train a distilled verifier or a controller")
    tr_sub = tr.add_subparsers(dest="train_command", required=True, parser_class=ArgumentParser)
    trv = tr_sub.add_parser("verifier", help="distil a collected teacher judge into a lightweight verifier checkpoint")
    add_train_verifier_arguments(trv)
    from lrtune.train.controller import add_arguments as add_train_controller_arguments

    trc = tr_sub.add_parser("controller", help="fit the learned (γ1, γ2) controller on collected problems")
    add_train_controller_arguments(trc)


def _add_loop_commands(sub) -> None:
    """``demo`` and ``pipeline``: the whole loop's options and the models (less those it trains)."""
    from lrtune.modelconfig import ModelConfig
    from lrtune.pipeline import PipelineOptions

    for name, help_ in (
        ("demo", "the whole loop on the offline default: collect, train verifier + controller, evaluate"),
        ("pipeline", "the whole loop from a config file (any models/tasks): --config pipeline.yaml"),
    ):
        pp = sub.add_parser(name, help=help_)
        pp.add_argument("--config", help="YAML file with any of these options")
        add_dataclass_args(pp, PipelineOptions)
        add_dataclass_args(pp, ModelConfig, skip=("verifier", "verifier_threshold", "controller"))


def _add_tool_commands(sub) -> None:
    """``doctor`` and ``prepare``: check this machine, build the offline default pair."""
    from lrtune.doctor import DoctorOptions

    doc = sub.add_parser(
        "doctor",
        help="check this machine end to end on a small pair: versions, device, vLLM code "
        "path, per-request speculation, prompt scores, greedy equality (--timing)",
    )
    add_dataclass_args(doc, DoctorOptions)

    prep = sub.add_parser("prepare", help="assemble and convert the offline default pair into the cache")
    prep.add_argument("--cache-dir", default=None, help="cache root (default: $LRTUNE_CACHE or ~/.cache/lrtune)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command through the error boundary (:func:`lrtune.boundary.run_guarded`: one line
    on stderr per error; exit 2 for a user error, 1 for anything unexpected, 130 for Ctrl-C;
    ``--debug`` anywhere on the command line shows the traceback instead)."""
    argv, debug = split_debug(list(sys.argv[1:] if argv is None else argv))
    return run_guarded(lambda: _dispatch(make_parser().parse_args(argv)), debug)


def _dispatch(args) -> int:
    if args.command == "decode":
        return cmd_decode(args)
    if args.command == "prepare":
        return cmd_prepare(args)
    if args.command == "serve":
        return cmd_serve(args)
    if args.command == "doctor":
        from lrtune.doctor import DoctorOptions
        from lrtune.doctor import main as doctor_main

        return doctor_main(build(DoctorOptions, args, {}))
    if args.command == "collect":
        from lrtune.data_gen.collect import main_from_args

        return main_from_args(args)
    if args.command in ("demo", "pipeline"):
        return cmd_pipeline(args)
    if args.command == "profile":
        from lrtune.eval.profile import main_from_args as profile_main

        return profile_main(args)
    if args.command == "train":
        return cmd_train(args)
    if args.command == "calibrate":
        from lrtune.train.recalibrate import config_from_args as calibrate_config, main as calibrate_main

        return calibrate_main(calibrate_config(args))
    if args.command == "labels":
        from lrtune.data_gen import judge_probe, label_noise, vote_labels

        mod = {"judge-probe": judge_probe, "noise": label_noise, "vote": vote_labels}[args.labels_command]
        res = mod.main(mod.config_from_args(args))
        return res if isinstance(res, int) else 0
    if args.command == "evaluate":
        from lrtune.eval.evaluate import config_from_args
        from lrtune.eval.evaluate import main as evaluate_main

        return evaluate_main(config_from_args(args))
    return 2


def cmd_pipeline(args) -> int:
    from lrtune.modelconfig import ModelConfig
    from lrtune.errors import ConfigError
    from lrtune.pipeline import PipelineOptions, run, sized_context

    if args.command == "pipeline" and not args.config:
        raise ConfigError("lrtune pipeline needs --config FILE (lrtune demo runs the built-in default)")
    file_values = load_config_file(args.config)
    check_unknown_keys(file_values, PipelineOptions, ModelConfig)
    opts = build(PipelineOptions, args, file_values)
    res = run(opts, build(ModelConfig, args, sized_context(opts.size, args, file_values)))
    from lrtune.pipeline import closing_lines

    print("\n".join(closing_lines(res)))
    return 0


def cmd_train(args) -> int:
    if args.train_command == "verifier":
        from lrtune.train.verifier import config_from_args, main as train_verifier_main

        return train_verifier_main(config_from_args(args))
    if args.train_command == "controller":
        from lrtune.train.controller import config_from_args as controller_config, main as train_controller_main

        return train_controller_main(controller_config(args))
    return 2


def cmd_prepare(args) -> int:
    from lrtune import gate
    from lrtune.models import resolve_model

    gate.passed("prepare")  # nothing to check but the flags: the cache is what it builds

    for role in ("target", "draft"):
        path = resolve_model("default", role, cache_dir=args.cache_dir, progress=True)
        print(f"{role}: {path}")
    return 0


def command_configs(args, options: type):
    """A decoding command's three configs from its flags and ``--config`` file: its own
    ``options``, the models (:class:`ModelConfig`) and the decoding (:class:`DecodeConfig`),
    each checked; a file key none of them has is refused."""
    from lrtune.decoder import DecodeConfig
    from lrtune.modelconfig import ModelConfig

    file_values = load_config_file(args.config)
    check_unknown_keys(file_values, ModelConfig, DecodeConfig, options)
    return (
        build(options, args, file_values),
        build(ModelConfig, args, file_values).validate(),
        build(DecodeConfig, args, file_values).validate(),
    )


def _allow_auto(parser) -> None:
    """``lrtune decode --method auto``: the method a user can pick blindly (policies.auto)."""
    for action in parser._actions:
        if action.dest == "method":
            action.choices = (*action.choices, "auto")
            action.help = action.help.replace("lr+sd", "lr+sd | auto" + AUTO_HELP, 1)


AUTO_HELP = " (target, sd or adaptive lr+sd, whichever the measured SD of --profile and the verifier's promise allow)"


def _take_auto(args) -> bool:
    """True when ``--method auto`` (or ``method: auto`` in --config) was asked; the configs are
    then built with lr+sd and the choice replaces it."""
    asked = args.method if args.method is not None else load_config_file(args.config).get("method")
    if asked != "auto":
        return False
    args.method = "lr+sd"
    return True


def cmd_decode(args) -> int:
    from lrtune import gate
    from lrtune.build import check_configs
    from lrtune.decoding import Decoder
    from lrtune.errors import ConfigError

    auto = _take_auto(args)
    opts, models, cfg = command_configs(args, DecodeOptions)
    if opts.profile is not None and not auto:
        raise ConfigError("--profile: used by --method auto only")
    prompt, problem, task = opts.prompt, None, None
    if opts.task_problem is None:  # --task and --task-seed choose the problem --task-problem names
        from lrtune.consumers import check_read, unread_fields

        check_read(unread_fields(opts, ("task", "task_seed"), "read with --task-problem N only"))
    if opts.task_problem is not None:
        from lrtune.tasks import get_task

        if prompt is not None:
            raise ConfigError("give either PROMPT or --task-problem, not both")
        task = get_task(opts.task)
        problem = task.load(limit=opts.task_problem + 1, seed=opts.task_seed)[opts.task_problem]
        prompt = task.prompt(problem)
    if prompt is None or not prompt.strip():
        raise ConfigError("empty prompt: pass PROMPT or --task-problem N")

    controller, choice = None, None
    if auto:
        from lrtune.build import auto_controller
        from lrtune.decoding import auto_choice_for

        spec = models.control.controller
        choice = auto_choice_for(
            models, cfg.gamma1, cfg.gamma2, cfg.max_step_tokens, cfg.seed, opts.profile, spec, own_verifier=False
        )
        cfg = dataclasses.replace(cfg, method=choice.decode_method)
        controller = (spec or auto_controller()) if choice.method == "adaptive" else None
        if not opts.json:
            print(f"auto: {choice.method}: {choice.reason}", file=sys.stderr)
    if not auto:  # one method runs: an option it does not read is refused (auto reads them all)
        from lrtune.consumers import check_read, method_unread

        check_read(method_unread(cfg, models))
    check_configs(models, cfg, progress=not opts.json)
    gate.passed("decode")
    dec = Decoder.from_configs(models, cfg, controller=controller, progress=not opts.json)
    out = dec.generate([prompt], chat=opts.chat)[0]
    if out.error:
        raise ConfigError(out.error)
    record = {"method": cfg.method, "text": out.text, "finish": out.finish, "stats": out.stats.to_dict()}
    if choice is not None:
        record["auto"] = choice.to_dict()
    if problem is not None:
        pred, ok = task.check(problem, out.text)
        record.update(problem_id=problem.id, expected=problem.answer, answer=pred, correct=ok)
    if opts.json:
        print(json.dumps(record))
    else:
        print(out.text)
        print_stats(record)
    return 0


def cmd_serve(args) -> int:
    from lrtune import gate
    from lrtune.serve.main import ServeOptions, check_listen, main as serve_main

    opts, models, cfg = command_configs(args, ServeOptions)
    check_listen(opts, cfg)  # before any model loads
    gate.passed("serve")
    return serve_main(opts, models, cfg)


def print_stats(record: dict) -> None:
    """A compact rich table of one decode (DESIGN §4 names)."""
    from lrtune.runfiles import console
    from rich.table import Table

    s = record["stats"]
    t = Table(title=f"lrtune decode — {record['method']}", show_header=False)

    def fmt(v, spec=".3f"):
        return "—" if v is None else format(v, spec)

    rows = [
        ("wall (s)", fmt(s["wall_s"], ".2f")),
        (
            "  draft / target / verify / other",
            " / ".join(fmt(s[k], ".2f") for k in ("draft_s", "target_s", "verify_s", "other_s")),
        ),
        ("generated tokens", str(s["generated_tokens"])),
        ("tokens/s", fmt(s["tokens_per_s"], ".2f")),
        ("rounds", str(s["rounds"])),
        ("α1 (step acceptance)", fmt(s["alpha1"])),
        ("α1 by position", ", ".join(fmt(a, ".2f") for a in s["alpha1_by_pos"]) or "—"),
        ("mean accepted steps / round (incl. target step)", fmt(s["mean_accepted_steps_per_round"], ".2f")),
        ("α2 (token acceptance)", fmt(s["alpha2"])),
        (
            "target calls / draft calls / verifier calls",
            f"{s['target_calls']} / {s['draft_calls']} / {s['verifier_calls']}",
        ),
        ("finish", record["finish"]),
    ]
    if "correct" in record:
        rows.append(
            (
                "answer (expected)",
                f"{record['answer']} ({record['expected']}) — {'correct' if record['correct'] else 'wrong'}",
            )
        )
    for k, v in rows:
        t.add_row(k, v)
    console().print(t)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
