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
    assert "| `--async` | off | old spelling of --schedule async |" in doc  # old flags keep working
    assert doc.count("`--max-step-tokens") >= 3 and DecodeConfig.max_step_tokens == 128
