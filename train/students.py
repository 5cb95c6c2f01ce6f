"""The student kinds of ``lrtune train verifier``: fit on the train split, select
on validation AUROC, write the checkpoint files (weights, tokenizer) into a directory.

* ``features``: logistic regression (scikit-learn) on the cheap pair features; C chosen
  on validation AUROC. Weights stored as safetensors (standardisation + coefficients).
* ``router``: the ``features`` fit on the one-sided features only (no target step), for
  score rounds.
* ``forest``: a random forest (scikit-learn) on the same features; leaf size chosen on
  validation AUROC; the trees stored as flat safetensors arrays (no pickle).
* ``cross-encoder``: a sentence encoder + 1-logit head with a PEFT LoRA adapter, trained
  on BCE(σ(logit), teacher score) with AdamW; early stopping on validation AUROC; a
  resumable per-epoch state (adapter + optimizer in safetensors).
* ``lm-judge``: a LoRA adapter on a small causal LM trained with TRL's SFTTrainer on the
  judge prompt → "aligned"/"unaligned" (completion-only loss); early stopping on
  validation AUROC by a callback; resumes from TRL's last checkpoint.

Each ``fit_*`` returns a dict of metadata for ``lrtune_verifier.json`` (base model, input
settings, training history).
"""

from __future__ import annotations

import json
import math
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from lrtune.errors import ConfigError
from lrtune.runfiles import ProgressBar, log, write_atomic
from lrtune.verifiers import distilled, student_inputs
from lrtune.verifiers.base import StepPair

from lrtune.train.data import PairExample
from lrtune.train.student_state import (  # noqa: F401  (STATE_KEY, check_state: read through this module)
    COUNTERS,
    STATE_KEY,
    check_state,
    cannot_resume,
    claim_state,
    load_optimizer,
    read_counters,
    save_optimizer,
    state_dir,
    state_key,
)


FOREST_TREES = 300
FOREST_LEAF_SIZES = (1, 3, 5, 10)  # min_samples_leaf candidates, chosen on validation AUROC


def _auroc(scores, examples: Sequence[PairExample]) -> float:
    from lrtune.pairstats import auroc

    a = auroc(list(scores), [e.label for e in examples])
    return float("nan") if a is None else a


# ---- features ----------------------------------------------------------------------------
def feature_names(examples: Sequence[PairExample]) -> tuple[str, ...]:
    """The features a student trains on: every text and context feature and the embedding
    cosine, and each likelihood feature (the target's scores of the draft step, the draft's own
    confidence) that at least half of ``examples`` carry (data collected before a feature
    existed lacks it)."""
    from lrtune.verifiers.features import FEATURE_NAMES, LIKELIHOOD_FEATURES, likelihood_features

    rows = [likelihood_features(e.pair.draft_scores) for e in examples]
    have = {n: sum(r[j] is not None for r in rows) for j, n in enumerate(LIKELIHOOD_FEATURES)}
    return tuple(
        n for n in FEATURE_NAMES if n not in LIKELIHOOD_FEATURES or (examples and have[n] >= len(examples) / 2)
    )


def feature_matrix(examples: Sequence[PairExample], encoder: str, names: Sequence[str] | None = None):
    """Rows of ``names`` (default: every :data:`~lrtune.verifiers.features.FEATURE_NAMES`),
    NaN where a pair lacks a likelihood feature; the embedding cosine comes from collect's
    column when present, else from ``encoder``."""
    import numpy as np

    from lrtune.verifiers.features import FEATURE_NAMES, pair_features

    cos = [e.embedding_cosine for e in examples]
    missing = [i for i, c in enumerate(cos) if c is None or (isinstance(c, float) and math.isnan(c))]
    if missing:
        from lrtune.verifiers.embedding import EmbeddingVerifier

        enc = EmbeddingVerifier(model=distilled.resolve_encoder(encoder))
        for i, c in zip(missing, enc.score([examples[i].pair for i in missing])):
            cos[i] = c
    rows = [pair_features(e.pair, float(c)) for e, c in zip(examples, cos)]
    return np.asarray(
        [[math.nan if r[n] is None else r[n] for n in (names or FEATURE_NAMES)] for r in rows], dtype=np.float64
    )


def student_features(train: Sequence[PairExample], cfg) -> tuple[str, ...]:
    """The features a features/forest/router student trains on: :func:`feature_names` less
    ``--drop-features`` (a router: those of :data:`~lrtune.verifiers.features.ONE_SIDED_FEATURES`
    only); ConfigError when none remains."""
    from lrtune.verifiers.features import ONE_SIDED_FEATURES

    names = tuple(
        n
        for n in feature_names(train)
        if n not in cfg.dropped_features and (cfg.student != "router" or n in ONE_SIDED_FEATURES)
    )
    if not names:
        raise ConfigError(
            f"--drop-features leaves no feature to train on (this data offers "
            f"{', '.join(feature_names(train))}); keep at least one"
        )
    return names


def check_finite(examples: Sequence[PairExample], names: Sequence[str]) -> None:
    """ConfigError naming the column when a pair holds a non-finite value (inf or NaN) of a
    feature in ``names`` read from the data (:func:`_data_value`)."""
    for name in names:
        bad = [e for e in examples if (v := _data_value(e, name)) is not None and not math.isfinite(v)]
        if bad:
            raise ConfigError(
                f"column {name} holds non-finite values ({_data_value(bad[0], name)} in problem "
                f"{bad[0].problem_id}, {len(bad)} pair(s)): fix the data or leave the feature out "
                f"with --drop-features {name}"
            )


def _data_value(e: PairExample, name: str) -> float | None:
    """Feature ``name`` of ``e`` as the data holds it: a likelihood column or the cosine; None
    for a text feature or a missing value (it takes the training mean; a NaN cosine is
    recomputed by the encoder)."""
    from lrtune.verifiers.features import LIKELIHOOD_FEATURES, likelihood_features

    if name == "embedding_cosine":
        c = e.embedding_cosine
        return None if c is None or math.isnan(c) else float(c)
    return dict(zip(LIKELIHOOD_FEATURES, likelihood_features(e.pair.draft_scores))).get(name)


def _feature_data(train: Sequence[PairExample], val: Sequence[PairExample], cfg):
    """(encoder, feature names, x_train, y_train, x_val) for the features and forest students:
    :func:`student_features`; NaN where a pair lacks a likelihood feature."""
    import numpy as np

    encoder = cfg.neural.base_model or distilled.ENCODERS[0]
    names = student_features(train, cfg)  # values checked finite before --out was touched (verifier.check_inputs)
    return (
        encoder,
        names,
        feature_matrix(train, encoder, names),
        np.asarray([e.label for e in train]),
        feature_matrix(val, encoder, names),
    )


def _best_on_val(candidates, fit: Callable, val_scores: Callable, val: Sequence[PairExample], key: str):
    """Fit one model per candidate; return (best candidate, its model, history) by validation
    AUROC (the first of equals wins; NaN never beats a number)."""
    history, best = [], None
    for c in candidates:
        model = fit(c)
        a = _auroc(val_scores(model), val)
        history.append({key: c, "val_auroc": a})
        if best is None or (not math.isnan(a) and (math.isnan(best[0]) or a > best[0])):
            best = (a, c, model)
    return best[1], best[2], history


def fit_features(train: Sequence[PairExample], val: Sequence[PairExample], out: Path, cfg) -> dict:
    import numpy as np
    from safetensors.numpy import save_file
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    encoder, names, xtr, ytr, xva = _feature_data(train, val, cfg)
    scaler = StandardScaler().fit(xtr)  # ignores NaN; unscored pairs then get the mean (as FeatureVerifier does)
    xtr, xva = (np.where(np.isnan(x), scaler.mean_, x) for x in (xtr, xva))
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    ztr, zva = (xtr - scaler.mean_) / scale, (xva - scaler.mean_) / scale
    c, clf, history = _best_on_val(
        (0.01, 0.1, 1.0, 10.0),
        lambda c: LogisticRegression(C=c, max_iter=2000, random_state=cfg.split.seed).fit(ztr, ytr),
        lambda m: m.predict_proba(zva)[:, 1],
        val,
        "C",
    )
    save_file(
        {
            "mean": scaler.mean_.astype(np.float64),
            "scale": scale.astype(np.float64),
            "coef": clf.coef_[0].astype(np.float64),
            "intercept": clf.intercept_.astype(np.float64),
        },
        str(out / "features.safetensors"),
    )
    return {"base_model": None, "encoder": encoder, "features": list(names), "C": c, "history": history}


def fit_forest(train: Sequence[PairExample], val: Sequence[PairExample], out: Path, cfg) -> dict:
    """A random forest (scikit-learn, 300 trees) on the same features as ``features``; the
    leaf size is chosen on validation AUROC. Missing likelihood features take the training
    mean. The trees are exported as flat arrays (:func:`lrtune.verifiers.trees.pack_forest`)."""
    import numpy as np
    from safetensors.numpy import save_file
    from sklearn.ensemble import RandomForestClassifier

    from lrtune.verifiers.trees import pack_forest

    encoder, names, xtr, ytr, xva = _feature_data(train, val, cfg)
    mean = np.nanmean(xtr, axis=0)  # feature_names keeps a likelihood feature only where half the pairs carry it
    xtr, xva = (np.where(np.isnan(x), mean, x) for x in (xtr, xva))
    leaf, clf, history = _best_on_val(
        FOREST_LEAF_SIZES,
        lambda leaf: RandomForestClassifier(
            n_estimators=FOREST_TREES, min_samples_leaf=leaf, random_state=cfg.split.seed, n_jobs=1
        ).fit(xtr, ytr),
        lambda m: m.predict_proba(xva)[:, 1],
        val,
        "min_samples_leaf",
    )  # classes_ = [False, True]
    save_file(
        {"mean": mean.astype(np.float64), **pack_forest(clf.estimators_, positive=1)}, str(out / "forest.safetensors")
    )
    return {
        "base_model": None,
        "encoder": encoder,
        "features": list(names),
        "trees": FOREST_TREES,
        "min_samples_leaf": leaf,
        "history": history,
    }


# ---- cross-encoder -----------------------------------------------------------------------
def _lora_targets(model, skip: set[str]) -> list[str]:
    """Full names of the encoder's Linear layers, excluding new (head) modules."""
    import torch

    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and not any(n == s or n.startswith(s + ".") for s in skip)
    ]


def _new_modules(model, missing_keys: Sequence[str]) -> set[str]:
    """Modules holding weights the base checkpoint lacks (the new head): the parent
    module of each missing parameter."""
    names = {n for n, _ in model.named_modules()}
    return {k.rsplit(".", 1)[0] for k in missing_keys if "." in k and k.rsplit(".", 1)[0] in names}


def build_cross_encoder(base: str, cfg):
    """(tokenizer, PEFT model) of a fresh cross-encoder student."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    tok = AutoTokenizer.from_pretrained(base)
    hf_logging.set_verbosity_error()  # "newly initialized head" is expected here
    model, info = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, output_loading_info=True)
    new = _new_modules(model, info.get("missing_keys", []))
    lora = LoraConfig(
        r=cfg.neural.lora_r,
        lora_alpha=cfg.neural.lora_alpha,
        lora_dropout=cfg.neural.lora_dropout,
        target_modules=_lora_targets(model, new),
        modules_to_save=sorted(new),
    )
    return tok, get_peft_model(model, lora)


def _resume_cross_encoder(model, opt, sdir: Path) -> dict:
    """The counters of the last finished epoch in ``sdir``, its adapter and optimizer loaded
    into ``model`` and ``opt``; ConfigError (delete the state dir) when the state does not fit."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    last = sdir / "last"
    st = read_counters(last / "trainer.json", sdir, {"epoch": int, **COUNTERS})
    try:
        set_peft_model_state_dict(model, load_file(str(last / "adapter_model.safetensors")))
        load_optimizer(opt, last)
    except Exception as e:  # noqa: BLE001 - safetensors, torch, json: their own types for a state that does not fit
        raise cannot_resume(sdir, last, e) from None
    return st


def fit_cross_encoder(train: Sequence[PairExample], val: Sequence[PairExample], out: Path, cfg) -> dict:
    import torch

    torch.manual_seed(cfg.split.seed)
    base = distilled.resolve_encoder(cfg.neural.base_model or distilled.ENCODERS[0])
    tok, model = build_cross_encoder(base, cfg)
    device = _device(cfg.neural.device)
    model.to(device)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.neural.learning_rate, weight_decay=0.01
    )
    sdir = state_dir(out)
    st = _cross_encoder_state(model, opt, sdir, state_key(train, val, cfg), cfg)
    while st["epoch"] < cfg.neural.epochs and st["bad_epochs"] < cfg.neural.patience:
        losses = _cross_encoder_epoch(model, opt, tok, train, cfg, device, st["epoch"])
        _end_cross_encoder_epoch(
            model, opt, sdir, st, losses, _auroc(_cross_encoder_scores(model, tok, val, cfg, device), val)
        )
    _export_adapter(sdir / "best", out)
    tok.save_pretrained(str(out))
    return {
        "base_model": cfg.neural.base_model or distilled.ENCODERS[0],
        "context_chars": cfg.context_chars,
        "context_form": student_inputs.CONTEXT_FORM,
        "max_length": cfg.neural.max_length,
        "history": st["history"],
        "best_val_auroc": st["best_auroc"],
    }


def _cross_encoder_state(model, opt, sdir: Path, key: str, cfg) -> dict:
    """Claim the state dir ``sdir`` for this training (``key``); the counters to start from:
    fresh, or those of the last finished epoch (its adapter and optimizer loaded) with ``--resume``."""
    last = sdir / "last"
    st = {"epoch": 0, "best_auroc": None, "bad_epochs": 0, "history": []}
    claim_state(sdir, key, cfg.neural.resume, (last,))
    if cfg.neural.resume and (last / "trainer.json").is_file():
        st = _resume_cross_encoder(model, opt, sdir)
        log(f"resuming cross-encoder training after epoch {st['epoch']} (best val AUROC {st['best_auroc']})")
    return st


def _encode_pairs(tok, batch: Sequence[PairExample], cfg, device: str):
    """The cross-encoder's inputs of ``batch``, on ``device``."""
    pairs = [e.pair for e in batch]
    return student_inputs.encode_cross_encoder(tok, pairs, cfg.context_chars, cfg.neural.max_length).to(device)


def _cross_encoder_scores(model, tok, val: Sequence[PairExample], cfg, device: str) -> list[float]:
    """The model's acceptance probabilities of ``val``'s pairs (eval mode, 64 at a time)."""
    import torch

    model.eval()
    out_s = []
    with torch.inference_mode():
        for i in range(0, len(val), 64):
            out_s += torch.sigmoid(model(**_encode_pairs(tok, val[i : i + 64], cfg, device)).logits[:, 0]).tolist()
    return out_s


def _cross_encoder_epoch(model, opt, tok, train: Sequence[PairExample], cfg, device: str, epoch: int) -> list[float]:
    """One epoch of BCE training over ``train`` in the order seeded by ``epoch``; its batch losses."""
    import torch

    loss_fn = torch.nn.BCEWithLogitsLoss()
    order = list(range(len(train)))
    random.Random(cfg.split.seed * 1000 + epoch).shuffle(order)
    model.train()
    bar = ProgressBar(
        f"epoch {epoch + 1}/{cfg.neural.epochs}", math.ceil(len(train) / cfg.neural.batch_size), cfg.progress
    )
    losses = []
    for i in range(0, len(order), cfg.neural.batch_size):
        batch = [train[j] for j in order[i : i + cfg.neural.batch_size]]
        y = torch.tensor([e.target if cfg.neural.soft_targets else float(e.label) for e in batch], device=device)
        loss = loss_fn(model(**_encode_pairs(tok, batch, cfg, device)).logits[:, 0].float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        bar.advance(1, f"loss {sum(losses[-20:]) / len(losses[-20:]):.4f}")
    bar.close()
    return losses


def _end_cross_encoder_epoch(model, opt, sdir: Path, st: dict, losses: list[float], a: float) -> None:
    """Record the finished epoch (train loss, validation AUROC ``a``) in ``st``; keep the adapter
    when it is the best so far; save the resumable state (adapter, optimizer, counters)."""
    epoch = st["epoch"]
    last = sdir / "last"
    improved = st["best_auroc"] is None or (not math.isnan(a) and a > st["best_auroc"])
    st["history"].append({"epoch": epoch + 1, "train_loss": sum(losses) / len(losses), "val_auroc": a})
    st["epoch"] = epoch + 1
    st["bad_epochs"] = 0 if improved else st["bad_epochs"] + 1
    if improved:
        st["best_auroc"] = a
        _save_adapter(model, sdir / "best")
    log(
        f"epoch {epoch + 1}: train loss {st['history'][-1]['train_loss']:.4f}, val AUROC {a:.4f}"
        + (" (best)" if improved else "")
    )
    _save_adapter(model, last)  # the resumable state: adapter, optimizer, counters
    save_optimizer(opt, last)
    write_atomic(last / "trainer.json", json.dumps(st))


def _save_adapter(model, d: Path) -> None:
    tmp = d.with_name(d.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)


def _export_adapter(src: Path, out: Path) -> None:
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copyfile(src / name, out / name)


def _device(spec: str) -> str:
    import torch

    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return spec


# ---- lm-judge (TRL SFT) ------------------------------------------------------------------
def _judge_dataset(examples: Sequence[PairExample], tokenizer, context_chars: int, max_length: int):
    """Prompt/completion rows with every prompt fitted to ``max_length`` (SFT's keep-start
    truncation would otherwise cut the answer and drop the example)."""
    from datasets import Dataset

    rows, shortened = [], 0
    for e in examples:
        prompt, _ = student_inputs.fit_judge_prompt(e.pair, tokenizer, context_chars, max_length)
        shortened += prompt != student_inputs.judge_student_prompt(e.pair, context_chars)
        rows.append(
            {
                "prompt": [{"role": "user", "content": prompt}],
                "completion": [{"role": "assistant", "content": "aligned" if e.label else "unaligned"}],
            }
        )
    if shortened:
        log(f"{shortened} of {len(rows)} judge prompts shortened to fit --max-length {max_length}")
    return Dataset.from_list(rows)


def sft_args(cfg, output_dir: Path, device: str):
    """TRL ``SFTConfig`` for the lm-judge student: prompt → answer SFT (loss on the answer only),
    fp32 weights, one checkpoint per epoch so training resumes where it stopped."""
    import torch
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=cfg.neural.epochs,
        per_device_train_batch_size=cfg.neural.batch_size,
        learning_rate=cfg.neural.learning_rate,
        logging_steps=5,
        save_strategy="epoch",
        save_total_limit=1,
        report_to="none",
        seed=cfg.split.seed,
        max_length=cfg.neural.max_length,
        disable_tqdm=not cfg.progress,
        use_cpu=device == "cpu",
        model_init_kwargs={"dtype": torch.float32},
        completion_only_loss=True,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        # TRL turns bf16 autocast on by default; CPUs without bf16 matrix units then fall back to
        # torch's single-threaded reference GEMM (measured: >7 min per step of 8 pairs vs ~50 s in fp32)
        bf16=device.startswith("cuda") and torch.cuda.is_bf16_supported(),
    )


def fit_lm_judge(train: Sequence[PairExample], val: Sequence[PairExample], out: Path, cfg) -> dict:
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    base_spec = cfg.neural.base_model or "default:draft"
    base = distilled.resolve_base_lm(base_spec)
    device = _device(cfg.neural.device)
    tok = AutoTokenizer.from_pretrained(base)
    sdir = state_dir(out)
    best_dir = sdir / "best"
    track = _lm_judge_track(sdir, state_key(train, val, cfg), cfg)
    trainer = SFTTrainer(
        model=base,
        args=sft_args(cfg, sdir, device),
        train_dataset=_judge_dataset(train, tok, cfg.context_chars, cfg.neural.max_length),
        processing_class=tok,
        peft_config=_judge_lora(cfg),
        callbacks=[_early_stop_on_auroc(tok, val, cfg, device, track, sdir)],
    )
    ckpts = sorted(sdir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    resume = str(ckpts[-1]) if cfg.neural.resume and ckpts else None
    if resume:
        log(f"resuming lm-judge training from {resume}")
    if track["bad_epochs"] < cfg.neural.patience:
        trainer.train(resume_from_checkpoint=resume)
    if not (best_dir / "adapter_model.safetensors").is_file():
        raise ConfigError("lm-judge training produced no adapter (no epoch finished)")
    _export_adapter(best_dir, out)
    tok.save_pretrained(str(out))
    return {
        "base_model": base_spec,
        "context_chars": cfg.context_chars,
        "context_form": student_inputs.CONTEXT_FORM,
        "max_length": cfg.neural.max_length,
        "history": track["history"],
        "best_val_auroc": track["best_auroc"],
    }


def _lm_judge_track(sdir: Path, key: str, cfg) -> dict:
    """Claim the state dir ``sdir`` for this training (``key``); the early-stopping counters:
    those saved there with ``--resume``, else fresh."""
    track_file = sdir / "early_stopping.json"
    claim_state(sdir, key, cfg.neural.resume, (track_file, *sdir.glob("checkpoint-*")))
    if cfg.neural.resume and track_file.is_file():
        return read_counters(track_file, sdir, COUNTERS)
    return {"best_auroc": None, "bad_epochs": 0, "history": []}


def _judge_lora(cfg):
    """The lm-judge's LoRA adapter on the attention projections."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.neural.lora_r,
        lora_alpha=cfg.neural.lora_alpha,
        lora_dropout=cfg.neural.lora_dropout,
        task_type="CAUSAL_LM",
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    )


def _early_stop_on_auroc(tok, val: Sequence[PairExample], cfg, device: str, track: dict, sdir: Path):
    """A trainer callback that updates ``track`` (saved in ``sdir``) after each epoch."""
    from transformers import TrainerCallback

    best_dir, track_file = sdir / "best", sdir / "early_stopping.json"

    class EarlyStopOnAuroc(TrainerCallback):
        """Scores the validation pairs after each epoch; keeps the best adapter; stops
        after ``patience`` epochs without a better validation AUROC."""

        def on_epoch_end(self, args, state, control, model=None, **kw):
            scorer = distilled.LMJudgeStudent.from_model(
                model, tok, cfg.context_chars, device, max_length=cfg.neural.max_length
            )
            was_training = model.training
            model.eval()
            a = _auroc(scorer.score([e.pair for e in val]), val)
            if was_training:
                model.train()
            improved = track["best_auroc"] is None or (not math.isnan(a) and a > track["best_auroc"])
            track["history"].append(
                {
                    "epoch": round(state.epoch or 0, 3),
                    "val_auroc": a,
                    "train_loss": next((h["loss"] for h in reversed(state.log_history) if "loss" in h), None),
                }
            )
            track["bad_epochs"] = 0 if improved else track["bad_epochs"] + 1
            if improved:
                track["best_auroc"] = a
                _save_adapter(model, best_dir)
            write_atomic(track_file, json.dumps(track))
            log(f"epoch {state.epoch:.0f}: val AUROC {a:.4f}" + (" (best)" if improved else ""))
            if track["bad_epochs"] >= cfg.neural.patience:
                control.should_training_stop = True
            return control

    return EarlyStopOnAuroc()


FITTERS: dict[str, Callable] = {
    "features": fit_features,
    "forest": fit_forest,
    "cross-encoder": fit_cross_encoder,
    "lm-judge": fit_lm_judge,
    "router": fit_features,
}  # router: fit_features on one-sided features


def score_pairs(verifier, pairs: Sequence[StepPair], batch_size: int = 64) -> list[float]:
    out: list[float] = []
    for i in range(0, len(pairs), batch_size):
        out += verifier.score(pairs[i : i + batch_size])
    return out
