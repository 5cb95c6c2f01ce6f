"""docs/cli.md: the CLI reference generated from the config dataclasses."""

from pathlib import Path


def test_cli_reference_matches_the_parser():
    """docs/cli.md is generated from the configs; a stale file fails here
    (regenerate: python -m lrtune.clidoc > docs/cli.md)."""
    from lrtune import clidoc

    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    assert doc == clidoc.render(), "docs/cli.md is stale: run python -m lrtune.clidoc > docs/cli.md"


def test_cli_reference_lists_every_config_field_with_its_default():
    from lrtune import clidoc
    from lrtune.decoder import DecodeConfig

    doc = clidoc.render()
    assert "## `lrtune train verifier`" in doc and "## `lrtune demo`" in doc
    assert "| `--gamma1 GAMMA1` | `3` |" in doc.split("## `lrtune decode`")[1]
    assert "| `--schedule SCHEDULE` | `sync` |" in doc
    assert "| `--async` | off | deprecated (removed in lrtune 0.3.0): --schedule async |" in doc  # old flags still work
    assert doc.count("`--max-step-tokens") >= 3 and DecodeConfig.max_step_tokens == 128


def test_a_deprecated_flag_warns_once_with_the_version_that_removes_it_and_still_works(capsys):
    import argparse

    from lrtune.configs import build
    from lrtune.decodeconfig import LEGACY_REMOVED_IN, DecodeConfig

    cfg = build(DecodeConfig, argparse.Namespace(async_lr=True, logprobs=True), {})
    assert cfg.schedule == "async" and cfg.record == "logprobs"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"lrtune: warning: --async, --logprobs are deprecated and will be removed in lrtune "
        f"{LEGACY_REMOVED_IN}; use --schedule async --record logprobs"
    ]
    build(DecodeConfig, argparse.Namespace(), {})  # the new spellings: no warning
    assert capsys.readouterr().err == ""
