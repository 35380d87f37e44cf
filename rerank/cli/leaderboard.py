"""The leaderboard's options, one definition for `rerank eval` and `rerank run`.

eval takes them as they are; run takes them as overrides of the pipeline file's keys of the same names
(`measures` for -m, `tests` for --test), so each defaults to the file's key, and else to eval's default.
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

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):  # listed in --help in the order above
            command = option(command)
        return command

    return decorate
