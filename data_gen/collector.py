"""The collect decoder and what happens as each problem ends: every draft/target step pair
the decoder compared becomes a row (teacher score and label, features, timings), rollout
teachers label by outcomes, and the problem's rows and its problem row go to the store."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

from lrtune.dataset import PAIR_FIELDS, PROBLEM_FIELDS
from lrtune.dataset import schema as arrow_schema
from lrtune.decoder import DecodeConfig
from lrtune.slots import Failed
from lrtune.runfiles import ProgressBar, log
from lrtune.store import ShardStore
from lrtune.verifiers.base import mean_topk_entropy
from lrtune.verifiers.pairrecords import TARGET_SCORE_COLUMNS, pair_columns

from lrtune.data_gen.config import CollectConfig, CollectOptions, teacher_name


def _lp_stats(g) -> tuple[float | None, float | None]:
    lps = getattr(g, "logprobs", None)
    if not lps:
        return None, None
    return sum(lps) / len(lps), min(lps)


def pair_rows(problem_id: str, task: str, teacher: str, rnd) -> list[dict]:
    """Every (branch, position) pair one round compared (pure given the round record)."""
    branches = rnd.branches or [rnd.drafts]
    b_targets = rnd.branch_targets or [rnd.targets]
    b_scores = rnd.branch_scores or [rnd.scores]
    b_accepted = rnd.branch_accepted or [rnd.accepted]
    n_pairs = sum(len(b) for b in branches) or 1
    n_targets = len({id(t) for ts in b_targets for t in ts}) or 1
    rows = []
    for w, chain in enumerate(branches):
        for k, d in enumerate(chain):
            t = b_targets[w][k]
            dm, dmin = _lp_stats(d)
            tm, tmin = _lp_stats(t)
            seen = rnd.pairs[w][k] if rnd.pairs else None  # exactly what the teacher judged
            cols = pair_columns(seen) if seen else {"draft_step": d.text, "target_step": t.text, "context": None}
            rows.append(
                {
                    "problem_id": problem_id,
                    "task": task,
                    "round": rnd.index,
                    "position": k,
                    "branch": w,
                    "chosen_branch": w == rnd.branch,
                    "committed": w == rnd.branch and k < rnd.committed_drafts,
                    "prefix_len": rnd.prefix_len + sum(len(x.token_ids) for x in chain[:k]),
                    "draft_step": cols["draft_step"],
                    "target_step": cols["target_step"],
                    "context": cols["context"],
                    "teacher": teacher,
                    "teacher_score": float(b_scores[w][k]),
                    "label": bool(b_accepted[w][k]),
                    "draft_len": len(d.token_ids),
                    "target_len": len(t.token_ids),
                    "draft_mean_logprob": dm,
                    "draft_min_logprob": dmin,
                    "target_mean_logprob": tm,
                    "target_min_logprob": tmin,
                    **{c: cols.get(c) for c in (*TARGET_SCORE_COLUMNS, "draft_target_scored_tokens")},
                    "draft_entropy": mean_topk_entropy(getattr(d, "top_logprobs", None)),
                    "draft_s": (rnd.draft_seconds[k] / max(1, sum(1 for c in branches if len(c) > k)))
                    if k < len(rnd.draft_seconds)
                    else None,
                    "target_s": rnd.target_seconds / n_targets,
                    "judge_s": rnd.verify_seconds / n_pairs,
                }
            )
    return rows


def divergent_starts(rounds, prompt_len: int) -> list[int]:
    """Offsets (in the answer's ids) where an accepted draft step that differs from its target
    step begins: past the last of them the answer is the target's own greedy continuation."""
    out = []
    for r in rounds:
        chain = (r.branches or [r.drafts])[r.branch]
        targets = (r.branch_targets or [r.targets])[r.branch]
        at = r.prefix_len - prompt_len
        for d, t in zip(chain[: r.committed_drafts], targets):
            if list(d.token_ids) != list(t.token_ids):
                out.append(at)
            at += len(d.token_ids)
    return out


def _finite(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


class Collector:
    """One collect run: the decoder and feature verifiers, and what happens as problems end
    (rows, rollout labels for outcome teachers, features, the store)."""

    def __init__(
        self, cfg: CollectConfig, dcfg: DecodeConfig, models, spec, live: str, task, todo, store: ShardStore
    ) -> None:
        from lrtune.decoding import Decoder
        from lrtune.verifiers.simple import ExactVerifier

        self.cfg, self.dcfg, self.opts, self.spec, self.live = cfg, dcfg, cfg.options, spec, live
        self.task, self.todo, self.store = task, todo, store
        self.teacher = teacher_name(self.opts)
        self.dec = Decoder.from_configs(models, dcfg, progress=self.opts.progress, load_all_methods=dcfg.uses_sd)
        self.dec.start_engines(dcfg)
        self.exact = ExactVerifier()
        self.embed = self.scorer = None
        if self.opts.features.embedding_feature:
            from lrtune.verifiers.embedding import EmbeddingVerifier

            self.embed = self.dec.verifier if self.dec.verifier.name == "embedding" else EmbeddingVerifier()
        if self.opts.features.target_score_feature:
            from lrtune.verifiers import make_verifier

            self.scorer = make_verifier("target_score", backend=self.dec.target)
        self.judges = {}
        if self.opts.features.judge_features:
            from lrtune.verifiers import make_verifier

            self.judges = {col: make_verifier(spec, backend=self.dec.target) for col, spec in JUDGE_FEATURES.items()}
        self.schemas = arrow_schema(PAIR_FIELDS), arrow_schema(PROBLEM_FIELDS)
        self.encoded = [self.dec.encode(task.prompt(prob)) for _, prob in todo]
        self.n_conc = self.opts.max_concurrent or _default_concurrency(self.dec, dcfg, self.opts, self.encoded)
        self.rounds: dict[int, list] = {k: [] for k in range(len(todo))}
        self.pending: list[tuple] = []  # finished problems whose pairs wait for their rollouts
        self.labels = [0, 0]
        self.bar = None

    def run(self) -> None:
        from lrtune.control import ProblemInfo

        self.bar = ProgressBar("collect", len(self.todo), self.opts.progress)
        try:
            self.dec.decoder.decode_many(
                self.encoded,
                self.dcfg,
                max_concurrent=self.n_conc,
                max_len=self.cfg.models.engine.max_model_len,
                problems=[
                    ProblemInfo(prob.id, self.task.prompt(prob), len(ids), self.opts.task)
                    for (_, prob), ids in zip(self.todo, self.encoded)
                ],
                on_round=lambda k, r: self.rounds[k].append(r),
                on_done=self.finish,
            )
            if self.pending:
                self.flush()
        finally:
            self.bar.close()

    def finish(self, k: int, result) -> None:
        """A problem ended: its pairs and its problem row go to the store at once (rollout
        teachers: once the pending problems' rollouts ran, in one call per ``n_conc``)."""
        if isinstance(result, Failed):
            log(f"skipping {self.todo[k][1].id}: {result.message}")
            self.bar.advance(1)
            return
        res, st = result
        rows, items = self.pair_rows(k, res)
        if self.spec.kind == "verifier":
            self.complete(k, res, st, rows)
            return
        self.pending.append((k, res, st, rows, items))
        if len(self.pending) >= self.n_conc:
            self.flush()

    def pair_rows(self, k: int, res) -> tuple[list[dict], list]:
        """The rows of every pair problem ``k`` compared and, for outcome teachers, what to
        roll out for each (``--rollout-pairs committed``: only the pairs on the answer's path;
        the answer itself is the committed branch's rollout where it is the target's greedy
        continuation)."""
        from lrtune.data_gen.rollout import RolloutItem, trajectory_continuation

        (_, prob), ids, opts = self.todo[k], self.encoded[k], self.opts
        rows, items = [], []
        done_rounds = self.rounds.pop(k)
        divergent = divergent_starts(done_rounds, len(ids))
        for r in done_rounds:
            prefix = ids + res.token_ids[: max(0, r.prefix_len - len(ids))]
            prefix_text = self.dec.target.decode(prefix, skip_special_tokens=True)
            for row in pair_rows(prob.id, prob.meta.get("task", opts.task), self.teacher, r):
                chain = (r.branches or [r.drafts])[row["branch"]]
                targets = (r.branch_targets or [r.targets])[row["branch"]]
                pos = row["position"]
                pre = prefix + [t for d in chain[:pos] for t in d.token_ids]
                row.update(
                    prefix_sha=hashlib.sha256(json.dumps(pre).encode()).hexdigest()[:16],
                    prefix_text=prefix_text,
                    decode_verifier=self.live,
                    verifier_score=row["teacher_score"],
                    verifier_label=row["label"],
                )
                on_path = row["chosen_branch"] and pos <= r.committed_drafts
                if self.spec.kind != "verifier" and opts.rollout.pairs == "committed" and not on_path:
                    continue
                item = RolloutItem(prob, len(ids), pre, list(chain[pos].token_ids), list(targets[pos].token_ids))
                if on_path and self.dcfg.temperature == 0:
                    branch = "draft" if pos < r.committed_drafts else "target"
                    start = len(pre) - len(ids) + len(getattr(item, branch))
                    room = min(opts.rollout.tokens, self.cfg.models.engine.max_model_len - len(ids) - start - 1)
                    known = trajectory_continuation(
                        res.token_ids, res.finish, start, room=room, divergent_starts=divergent
                    )
                    if known is not None:
                        item.known[branch] = known
                items.append(item)
                rows.append(row)
        return rows, items

    def flush(self) -> None:
        """Outcome labels of the pending problems' pairs, one engine call; then store them."""
        from lrtune.data_gen.rollout import rollout_labels, sampled_outcomes, vote_on

        batch, self.pending = self.pending, []
        items = [it for *_, its in batch for it in its]
        outcomes, secs = rollout_labels(
            self.dec.target,
            self.task,
            items,
            max_tokens=self.opts.rollout.tokens,
            max_len=self.cfg.models.engine.max_model_len,
            gamma2=self.dcfg.sd_gamma2,
        )
        votes = [None] * len(items)
        if self.opts.rollout.samples:  # the vote teacher: sampled rollouts beside the greedy ones
            votes, vsecs = sampled_outcomes(
                self.dec.target,
                self.task,
                items,
                samples=self.opts.rollout.samples,
                temperature=self.opts.rollout.temperature,
                seed=self.dcfg.seed,
                max_tokens=self.opts.rollout.tokens,
                max_len=self.cfg.models.engine.max_model_len,
            )
            secs += vsecs
        at = 0
        for k, res, st, rows, _ in batch:
            for row, lab, vote, it in zip(
                rows, outcomes[at : at + len(rows)], votes[at : at + len(rows)], items[at : at + len(rows)]
            ):
                row.update(lab)
                row["label"] = row["rollout_greedy_label"] = bool(row.pop("rollout_label"))
                row["teacher_score"] = float(row["label"])
                if vote is not None:
                    greedy = lab["rollout_draft_answer"], lab["rollout_target_answer"]
                    row["label"], row["teacher_score"], d, t = vote_on(
                        self.task, it.problem, greedy, vote, identical=it.draft == it.target
                    )
                    row["rollout_votes"] = json.dumps({"draft": d, "target": t})
                row["judge_s"] = secs / len(items) + (row["judge_s"] if self.spec.kind == "consensus" else 0.0)
            at += len(rows)
            disagreements = None
            if self.spec.kind == "consensus":  # keep the pairs both teachers agree on
                kept = [row for row in rows if row["label"] == row["verifier_label"]]
                disagreements = len(rows) - len(kept)
                rows = kept
            self.complete(k, res, st, rows, disagreements)

    def complete(self, k: int, res, st, rows: list[dict], disagreements: int | None = None) -> None:
        """Features of the labelled pairs, the problem row, and both to the store."""
        from lrtune.verifiers import StepPair

        (i, prob), ids, opts, dcfg = self.todo[k], self.encoded[k], self.opts, self.dcfg
        pairs = [StepPair(r["context"], r["draft_step"], r["target_step"]) for r in rows]
        for row, ok in zip(rows, self.exact.score(pairs)):
            row["exact_match"] = bool(ok)
        cos = self.embed.score(pairs) if self.embed is not None else [None] * len(rows)
        ts = self.scorer.score(pairs) if self.scorer is not None else [None] * len(rows)
        for row, c, t in zip(rows, cos, ts):
            row["embedding_cosine"] = c
            row["target_score"] = t
        for col, judge in self.judges.items():
            for row, v in zip(rows, judge.score(pairs)):
                row[col] = v
        answer, ok = self.task.check(prob, res.text)
        t_tok = st.target_s / st.target_step_tokens if st.target_step_tokens else None
        d_tok = st.draft_s / st.draft_step_tokens if st.draft_step_tokens else None
        c1 = d_tok / t_tok if d_tok and t_tok else None
        prow = {
            "problem_id": prob.id,
            "index": i,
            "task": prob.meta.get("task", opts.task),
            "method": dcfg.method,
            "gamma1": dcfg.gamma1,
            "gamma2": dcfg.sd_gamma2,
            "alpha1": st.alpha1,
            "alpha2": st.alpha2,
            "c1": c1,
            "c2": c1,
            "rounds": st.rounds,
            "steps": len(res.steps),
            "tokens": len(res.token_ids),
            "wall_s": st.wall_s,
            "answer": None if answer is None else str(answer),
            "expected": prob.answer,
            "correct": bool(ok),
            "pairs": len(rows),
            "baseline_answer": None,
            "baseline_correct": None,
            "baseline_wall_s": None,
            "baseline_tokens": None,
            "finished": res.finish == "eos",
            "teacher_disagreements": disagreements,
        }
        if opts.with_baseline:
            bres, bst = self.dec.decoder.decode(ids, dataclasses.replace(dcfg, method="target"))
            banswer, bok = self.task.check(prob, bres.text)
            prow.update(
                baseline_answer=None if banswer is None else str(banswer),
                baseline_correct=bool(bok),
                baseline_wall_s=bst.wall_s,
                baseline_tokens=len(bres.token_ids),
            )
        self.store.add(prob.id, i, [{c: _finite(v) for c, v in r.items()} for r in rows], prow, *self.schemas)
        for r in rows:
            self.labels[r["label"]] += 1
        n = sum(self.labels)
        self.bar.advance(1, f"{n} rows, accepted {self.labels[1] / n:.0%}" if n else f"{n} rows")


JUDGE_FEATURES = {"llm_judge_context_score": "llm_judge(context)", "llm_judge_paper_score": "llm_judge(paper)"}


def _default_concurrency(dec, dcfg: DecodeConfig, opts: CollectOptions, prompts: list[list[int]]) -> int:
    """Problems in flight: the best for the b(n) curve (``--profile``, else measured now on
    the target with a few of the problems' prompts; ``lrtune.batchcost.choose_concurrency``)."""
    from lrtune.batchcost import choose_concurrency, measure_batch_cost, read_profile_curve

    rows = dcfg.width * dcfg.gamma1 + 1  # target rows per problem and round (at most)
    cap = max(1, min(16, len(prompts)))
    if opts.profile:
        curve, source = read_profile_curve(opts.profile), opts.profile
    else:
        sizes = sorted({rows * n for n in (1, 2, 4, 8, 16) if n <= cap})
        curve, source = measure_batch_cost(dec.target, prompts[:cap], sizes, tokens=16, repeats=1), "measured"
    n = min(cap, choose_concurrency(curve, rows, max_concurrent=cap))
    log(
        f"collect: {n} problem(s) in flight (b(n) {source}: "
        + ", ".join(f"b({k})={v:.2f}" for k, v in curve.items())
        + "; --max-concurrent overrides)"
    )
    return n
