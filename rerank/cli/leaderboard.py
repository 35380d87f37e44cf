"""The leaderboard's options, one definition for `rerank eval`, `rerank report` and `rerank run`.

eval and report take them as they are; run takes them as overrides of the pipeline file's keys of the same names
(`measures` for -m, `tests` for --test), so each defaults to the file's key, and else to eval's default.
`judging_options` are how eval and report read and judge the runs they are given.
"""

from __future__ import annotations

from typing import Callable

import click

from ..evaluate.significance import CORRECTIONS, TESTS


def leaderboard_options(pipeline: bool = False) -> Callable:
    """-m/--measure, --baseline, --sort, --test and --correction, passed as `measures`, `baseline`, `sort_by`,
    `tests` and `correction`. With `pipeline` (rerank run), none has a default of its own: an option left out
    is None (or empty), and the file's key or eval's default applies."""

    def default(key: str, otherwise: str) -> str:
        return f"default: the file's `{key}`, else {otherwise}" if pipeline else f"default: {otherwise}"

    measured = " (default: the file's `measures`, else the data set's)" if pipeline else ""
    options = [
        click.option("-m", "--measure", "measures", multiple=True,
                     help="MAP, MRR[@k], P@k, HITS@k, nDCG[@k], Recall@k, an ir_measures name (Rprec, Bpref) "
                          f"or trec_eval's (ndcg_cut.10, P.5,10, official); repeatable{measured}."),
        click.option("--baseline", default=None,
                     help=f"{'Stage' if pipeline else 'Run (name, LABEL or file)'} the others are tested against "
                          f"({default('baseline', 'the first' + (' evaluated stage' if pipeline else ''))})."),
        click.option("--sort", "sort_by", default=None,
                     help=f"Measure to sort the leaderboard by ({default('sort', 'the first that is not a count')}); "
                          "with --per-query, each run's queries by their difference to the baseline on it, largest "
                          "gain first."),
        click.option("--test", "tests", multiple=True, type=click.Choice(list(TESTS)),
                     help="Significance test that marks a difference to the baseline; repeatable, all must agree "
                          f"({default('tests', 't and randomization')})."),
        click.option("--correction", type=click.Choice(list(CORRECTIONS)), default=None if pipeline else "holm",
                     show_default=not pipeline,
                     help="Correction of each test's p-values for the several runs compared with the baseline"
                          + (f" ({default('correction', 'holm')})." if pipeline else ".")),
    ]

    return _all(options)


def judging_options() -> Callable:
    """--qrels, --dataset, --min-rel, -M/--depth, --run-queries and --strict, passed as `qrels`, `dataset_name`,
    `min_rel`, `depth`, `run_queries` and `strict`: how eval and report judge the runs given them."""
    return _all([
        click.option("--qrels", type=click.Path(dir_okay=False),
                     help="Qrels file (default: the data set named in the run header)."),
        click.option("--dataset", "dataset_name", default=None, metavar="NAME",
                     help="The data set a run without a header is of (a plain TREC run from another tool): its qrels, "
                          "protocol and measures."),
        click.option("--min-rel", type=int, default=None, help="Lowest grade that counts as relevant (trec_eval -l)."),
        click.option("-M", "--depth", type=click.IntRange(min=1), default=None,
                     help="Evaluate each query's top DEPTH documents alone (trec_eval -M), e.g. a 1000-deep run at "
                          "100."),
        click.option("--run-queries", is_flag=True,
                     help="Average over the judged queries the runs hold (trec_eval without -c), not "
                          "over every judged query with a missing one as 0 (trec_eval -c)."),
        click.option("--strict", is_flag=True, help="Insist that ranks agree with scores."),
    ])


def _all(options: list[Callable]) -> Callable:
    def decorate(command: Callable) -> Callable:
        for option in reversed(options):  # listed in --help in the order given
            command = option(command)
        return command

    return decorate
