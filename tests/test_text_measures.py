"""BLEU and the n-gram precisions of suggested queries, through the shared evaluator."""

from __future__ import annotations

import pytest
from sacrebleu.metrics import BLEU

from rerank.data.sessions import docid
from rerank.evaluate.measures import evaluate, parse_measures
from rerank.evaluate.report import leaderboard
from rerank.runs import QueryRanking, Run, RunHeader

REFERENCES = {"q1": "cheap flights to paris", "q2": "paris hotels", "q3": "weather in rome"}


def run(name: str, suggestions: dict[str, list[str]]) -> Run:
    queries = {q: QueryRanking.from_scores(q, [docid(t) for t in texts], [-i for i in range(len(texts))])
               for q, texts in suggestions.items()}
    return Run(RunHeader(), queries, name)


QRELS = {q: {docid(text): 1} for q, text in REFERENCES.items()}
MEASURES = parse_measures(["BLEU", "1gram", "2-gram", "4gram", "MRR"], 1)


def test_corpus_bleu_is_sacrebleus_and_a_missing_query_suggests_nothing():
    suggestions = {"q1": ["flights to paris cheap"], "q2": ["paris hotels", "hotels"]}
    ev = evaluate(run("r", suggestions), QRELS, MEASURES)
    expected = BLEU(tokenize="none").corpus_score(["flights to paris cheap", "paris hotels", ""],
                                                  [[REFERENCES[q] for q in ("q1", "q2", "q3")]]).score / 100
    assert ev.overall("BLEU") == pytest.approx(expected)
    assert ev.per_query["BLEU"]["q2"] == pytest.approx(1.0) and ev.per_query["BLEU"]["q3"] == 0.0
    assert ev.overall("MRR") == pytest.approx((0 + 1 + 0) / 3)  # the exact next query, ranked as a document


def test_ngram_precision_is_position_independent_and_clipped():
    ev = evaluate(run("r", {"q1": ["paris paris to cheap flights"], "q2": ["hotels"], "q3": ["rome"]}), QRELS, MEASURES)
    assert ev.per_query["1gram"]["q1"] == pytest.approx(4 / 5)  # "paris" counted once: the reference has one
    assert ev.per_query["2gram"]["q1"] == pytest.approx(1 / 4)  # "cheap flights" alone is a reference bigram
    assert ev.per_query["4gram"]["q2"] == 0.0  # one word has no 4-gram
    assert ev.overall("1gram") == pytest.approx((4 / 5 + 1 + 1) / 3)  # a mean over the judged queries


def test_suggestion_runs_share_a_leaderboard_with_significance_per_prefix():
    better = run("better", {q: [t] for q, t in REFERENCES.items()})
    worse = run("worse", {q: ["nothing alike"] for q in REFERENCES})
    evaluations = [evaluate(r, QRELS, MEASURES) for r in (worse, better)]
    rows = {row.run: row for row in leaderboard(evaluations, MEASURES, 0)}
    assert rows["worse"].means["BLEU"] == 0.0 and rows["better"].means["BLEU"] == pytest.approx(1.0)
    assert rows["better"].versus["BLEU"] is not None  # compared per prefix (sentence BLEU), as any measure
