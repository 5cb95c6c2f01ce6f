"""The CLI reference (``docs/cli.md``), generated from the parser, hence from the configs.

Every flag of every command comes from :func:`lrtune.cli.make_parser`, whose options are
built from the config dataclasses (field name → flag, field default → default, field
``help`` → text). Regenerate after changing a config::

    python -m lrtune.clidoc > docs/cli.md

``tests/test_cli_reference.py`` fails when the committed file is stale.
"""

from __future__ import annotations

import argparse
import sys

HEADER = (
    "# lrtune command-line reference\n\n"
    "Generated from the config dataclasses by `python -m lrtune.clidoc > docs/cli.md`; "
    "do not edit by hand. Every option can also be given in a YAML file (`--config FILE`, "
    "keys are the option names with `_`); flags override the file.\n"
)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _split_help(action: argparse.Action) -> tuple[str, str]:
    """(text, default) of an option. Config flags carry their dataclass default at the end
    of the help, "(default: X)", because their argparse default is None (so that a
    ``--config`` file can fill them); hand-written flags use argparse's default."""
    text = (action.help or "").replace("%%", "%")
    cut = text.rfind(" (default: ")
    if cut >= 0 and text.endswith(")"):
        text, value = text[:cut], text[cut + len(" (default: ") : -1]
        value = {"True": "on", "False": "off", "None": ""}.get(value, value)
        default = value if value in ("on", "off", "") else f"`{value.strip(chr(39))}`"
    elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        default = "on" if action.default else "off"
    elif action.default is None or action.default == argparse.SUPPRESS:
        default = ""
    else:
        default = f"`{action.default}`"
    if action.choices and "one of" not in text:
        text += f" (one of: {', '.join(map(str, action.choices))})"
    return text, default


def _flag(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.dest.upper()}` (positional)"
    flags = [f for f in action.option_strings if f.startswith("--")] or action.option_strings
    if isinstance(action, argparse.BooleanOptionalAction):
        return " / ".join(f"`{f}`" for f in flags)
    meta = action.metavar or (action.dest.upper() if action.nargs != 0 else "")
    return ", ".join(f"`{f}{' ' + meta if meta else ''}`" for f in flags[:1])


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def command_section(path: str, help_: str, parser: argparse.ArgumentParser) -> list[str]:
    """Markdown for one (sub)command: its help, then one table per argument group."""
    lines = [f"## `{path}`", "", help_ or parser.description or "", ""]
    for group in parser._action_groups:
        acts = [
            a for a in group._group_actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        ]
        if not acts:
            continue
        title = {"options": "options", "positional arguments": "arguments"}.get(group.title, group.title)
        lines += [f"**{title}**", "", "| option | default | meaning |", "|---|---|---|"]
        for a in acts:
            text, default = _split_help(a)
            lines.append(f"| {_flag(a)} | {_cell(default)} | {_cell(text)} |")
        lines.append("")
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole reference: one section per leaf command, in parser order."""
    from lrtune.cli import make_parser

    parser = parser or make_parser()
    lines = [HEADER]

    def walk(prefix: str, help_: str, p: argparse.ArgumentParser) -> None:
        subs = list(_subcommands(p))
        if not subs:
            lines.extend(command_section(prefix, help_, p))
            return
        for name, h, sp in subs:
            walk(f"{prefix} {name}", h, sp)

    walk("lrtune", "", parser)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
