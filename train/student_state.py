"""Resumable training state of the neural students (DESIGN §5): it lives beside the checkpoint,
never inside it (``<out>.train-state``), holds no pickles, and records the settings and data it
was trained with (``state_key.json``), so a resume with other settings or data is refused in one
line that says to delete it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from lrtune.train.data import PairExample, fingerprint

from lrtune.errors import ConfigError
from lrtune.runfiles import read_json, write_atomic

STATE_KEY = "state_key.json"  # in the state dir: the settings and data its state was trained with
STATE_SETTINGS = (
    "student",
    "base_model",
    "seed",
    "batch_size",
    "learning_rate",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "soft_targets",
    "context_chars",
    "max_length",
)  # what a resumed state depends on
COUNTERS = {"best_auroc": (float, int, type(None)), "bad_epochs": int, "history": list}  # of every state file


def state_dir(out: Path) -> Path:
    """Training state (resumable epochs; TRL's checkpoints hold pickles) lives beside the
    checkpoint, never inside it: ``<out>.train-state``; removed after a successful export."""
    return out.with_name(out.name + ".train-state")


def state_key(train: Sequence[PairExample], val: Sequence[PairExample], cfg) -> dict:
    """What a resumable training state must have been trained with: :data:`STATE_SETTINGS`
    and the train/val data (the stopping rules, epochs and patience, may change on resume)."""
    from lrtune.configs import flat_dict

    settings = flat_dict(cfg)
    return {"settings": {k: settings[k] for k in STATE_SETTINGS}, "data": fingerprint([*train, *val])}


def check_state(sdir: Path, key: dict) -> None:
    """Refuse (one line: delete it) to resume from a state dir whose recorded key differs from
    ``key`` (other settings or data); a state dir without a key (older lrtune) is let through."""
    if not (sdir / STATE_KEY).exists():
        return
    old = read_json(sdir / STATE_KEY) or {}
    changed = sorted(k for k in key["settings"] if old.get("settings", {}).get(k) != key["settings"][k])
    changed += ["data"] if old.get("data") != key["data"] else []
    if changed:
        raise ConfigError(
            f"{sdir} holds the training state of a run with other settings or data "
            f"({', '.join(changed)} differ); delete it (or pass --no-resume) to start over"
        )


def claim_state(sdir: Path, key: dict, resume: bool, resumable: Sequence[Path]) -> None:
    """Record ``key`` in the state dir (the state written from now on is this run's): resuming,
    after :func:`check_state`; starting over, after removing the ``resumable`` state of before."""
    if resume:
        check_state(sdir, key)
    else:
        for p in resumable:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
    sdir.mkdir(parents=True, exist_ok=True)
    write_atomic(sdir / STATE_KEY, json.dumps(key))


def _first_line(e: Exception) -> str:
    """The telling line of an error message (torch's load errors span many lines)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    line = next((ln for ln in lines if "mismatch" in ln), lines[0] if lines else type(e).__name__)
    return line[:300]


def cannot_resume(sdir: Path, what: Path, e: Exception) -> ConfigError:
    return ConfigError(
        f"cannot resume from {what} ({_first_line(e)}); delete {sdir} (or pass --no-resume) to start over"
    )


def read_counters(path: Path, sdir: Path, keys: dict) -> dict:
    """The JSON object in state file ``path`` holding ``keys`` (name -> type); ConfigError
    (delete the state dir) when it is unreadable or lacks one."""
    try:
        st = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(st, dict) or not all(isinstance(st.get(k), t) for k, t in keys.items()):
            raise ValueError(f"not the counters {', '.join(keys)}")
    except (OSError, ValueError) as e:
        raise cannot_resume(sdir, path, e) from None
    return st


def save_optimizer(opt, path: Path) -> None:
    from safetensors.torch import save_file

    sd = opt.state_dict()
    tensors = {f"{i}.{k}": v.contiguous() for i, st in sd["state"].items() for k, v in st.items()}
    save_file(tensors, str(path / "optimizer.safetensors"))
    write_atomic(path / "optimizer.json", json.dumps({"param_groups": sd["param_groups"]}))


def load_optimizer(opt, path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(path / "optimizer.safetensors"))
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = v
    opt.load_state_dict(
        {"state": state, "param_groups": json.loads((path / "optimizer.json").read_text())["param_groups"]}
    )
