"""Named data sets with typed parts (corpus, topics, qrels, candidate runs), read lazily from the data root.

A data set is declared once, with the published file names relative to the data root; a split whose
files are absent is listed as "not present" and starts working as soon as they are put in place.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..errors import DataError, UnknownDatasetError
from ..paths import data_root
from ..runs import QueryRanking
from . import formats
from .formats import AnswerSelection, Document, Qrels

# Spelled as eval's tables label them (MAP for ir_measures' AP), so `rerank data show` and a leaderboard agree.
ADHOC_MEASURES = ("MAP", "MRR", "P@1", "nDCG@10", "Recall@100")
DL_MEASURES = ("nDCG@10", "MRR@10", "MAP", "Recall@100")
QA_MEASURES = ("MAP", "MRR", "P@1")


@dataclass
class Dataset:
    """One collection: where its files are and how to read each part. Parts load on first use."""

    name: str
    description: str
    files: dict[str, Path]
    min_rel: int = 1
    measures: tuple[str, ...] = ADHOC_MEASURES
    run_files: dict[str, str] = field(default_factory=dict)  # candidate run name -> key in `files`
    kind: str = "adhoc"
    unjudged_rule = ""  # which topics its qrels leave out on purpose (QA protocols), for the eval note

    def missing(self) -> list[Path]:
        """Files not in place: a folder where a file belongs is missing too (`data list` called it present)."""
        return [p for p in self.files.values() if not p.is_file()]

    @property
    def present(self) -> bool:
        return not self.missing()

    def require(self, *parts: str) -> "Dataset":
        """This data set, if the files of `parts` (default: all) are in place: as in ir_datasets, a part needs
        only its own files (unjudged test topics can be searched without qrels)."""
        gone = [path for path in self.missing() if not parts or path in {self.files[p] for p in parts}]
        if gone:
            raise DataError(f"data set {self.name} is not present: missing "
                            f"{', '.join(f'{p} (a folder is there)' if p.is_dir() else str(p) for p in gone)}")
        return self

    # Parts. Subclasses override the readers; callers only use these names.
    def documents(self) -> Iterator[Document]:
        return formats.sniff_documents(self.require("corpus").files["corpus"])

    def topics(self) -> dict[str, str]:
        return formats.read_topics(self.require("topics").files["topics"])

    @property
    def judged(self) -> bool:
        """Whether the data set has qrels (unjudged test topics have none)."""
        return "qrels" in self.files

    def qrels(self) -> Qrels:
        if "qrels" not in self.files:
            raise DataError(f"data set {self.name} has no qrels; pass --qrels FILE")
        return formats.read_qrels(self.require("qrels").files["qrels"])

    def candidate_run(self, run: str | None = None) -> str:
        """The name of a first-stage ranking shipped with the data set (default: its first)."""
        if not self.run_files:
            raise DataError(f"data set {self.name} ships no candidate runs; search it instead "
                            f"(rerank index {self.name}, then rerank retrieve {self.name})")
        run = run or next(iter(self.run_files))
        if run not in self.run_files:
            raise DataError(f"data set {self.name} has no run {run!r}; known: {', '.join(self.run_files)}")
        return run

    def candidates(self, run: str | None = None) -> list[QueryRanking]:
        """A first-stage ranking shipped with the data set (TREC DL, QA candidate lists)."""
        run = self.candidate_run(run)
        return [QueryRanking.from_scores(qid, [d for d, _ in hits], [s for _, s in hits], tag=run)
                for qid, hits in self._ranking(run).items()]

    def _ranking(self, run: str) -> dict[str, list[tuple[str, float]]]:
        raise NotImplementedError

    def doc_texts(self) -> dict[str, str]:
        """docid -> indexed text, for re-rankers when no index holds the raw documents."""
        return {d.docid: d.contents for d in self.documents()}

    def summary(self) -> dict:
        out = {"name": self.name, "description": self.description, "kind": self.kind,
               "present": self.present, "min_rel": self.min_rel, "measures": list(self.measures),
               "files": {k: str(v) for k, v in self.files.items()}}
        if self.run_files:
            out["candidate_runs"] = list(self.run_files)
        return out


class CandidateDataset(Dataset):
    """TREC DL style: candidate lists with passage text (the corpus is the union of the candidates)."""

    @functools.cached_property
    def _lists(self) -> dict[str, formats.CandidateList]:
        self.require(*self.run_files.values())
        return {run: formats.read_dl_candidates(self.files[key]) for run, key in self.run_files.items()}

    def documents(self) -> Iterator[Document]:
        seen: set[str] = set()
        for candidates in self._lists.values():
            for docid, doc in candidates.docs.items():
                if docid not in seen:
                    seen.add(docid)
                    yield doc

    def _ranking(self, run: str) -> dict[str, list[tuple[str, float]]]:
        return self._lists[run].ranking


class AnswerSelectionDataset(Dataset):
    """QA pairs as ranking: question = query, candidate sentences = documents, labels = qrels."""

    reader: Callable[[Path], AnswerSelection] = staticmethod(formats.read_jacana)

    @functools.cached_property
    def _pairs(self) -> AnswerSelection:
        return self.reader(self.require("pairs").files["pairs"])

    def documents(self) -> Iterator[Document]:
        return iter(self._pairs.docs.values())

    def topics(self) -> dict[str, str]:
        return self._pairs.topics

    judged = True  # the labels of its pairs
    unjudged_rule = "questions without both a right and a wrong candidate, TrecQA's clean set"

    def qrels(self) -> Qrels:
        """Judged questions as TrecQA's published evaluations count them ("clean"): questions with at least
        one right and one wrong candidate. The others stay in topics and candidate runs (unjudged)."""
        return {qid: labels for qid, labels in self._pairs.qrels.items()
                if any(labels.values()) and not all(labels.values())}

    def _ranking(self, run: str) -> dict[str, list[tuple[str, float]]]:
        return self._pairs.ranking


class WikiQADataset(AnswerSelectionDataset):
    unjudged_rule = "questions without a right answer, as Yang et al. (2015) count them"

    def qrels(self) -> Qrels:
        """Judged questions as WikiQA's published evaluations count them (Yang et al., 2015): questions with at
        least one right answer (126 in dev), those whose every candidate is right included."""
        return {qid: labels for qid, labels in self._pairs.qrels.items() if any(labels.values())}

    def reader(self, path: Path) -> AnswerSelection:
        """Questions numbered after the split (`dev-Q1`, sentences `dev-Q1-0`): every split's file starts at 1."""
        return formats.read_wikiqa(path, numbered=f"{self.name.removeprefix('wikiqa-')}-Q")


def _vaswani(root: Path) -> Dataset:
    d = root / "vaswani"
    return Dataset("vaswani", "Vaswani (NPL) physics abstracts: 11,429 docs, 93 queries",
                   {"corpus": d / "corpus" / "doc-text.trec", "topics": d / "query-text.trec", "qrels": d / "qrels"})


def _cacm(root: Path) -> Dataset:
    d = root / "cacm"
    return Dataset("cacm", "CACM abstracts: 3,204 docs, 64 topics (52 judged)",
                   {"corpus": d / "cacm.jsonl", "topics": d / "topics.cacm.txt", "qrels": d / "qrels.cacm.txt"})


def _trec_dl(year: int, topics_name: str) -> Callable[[Path], Dataset]:
    short = f"dl{year % 100}"

    def make(root: Path) -> Dataset:
        d = root / "trec-dl"
        return CandidateDataset(
            f"trec-dl-{year}",
            f"TREC Deep Learning {year} passages: BM25 / BM25+RM3 top-100 candidates with text, graded qrels",
            {"topics": d / "topics" / topics_name, "qrels": d / "qrels" / f"qrels.{short}-passage.txt",
             "bm25": d / "bm25" / f"retrieve_results_{short}.json",
             "bm25-rm3": d / "bm25-rm3" / f"retrieve_results_{short}.json"},
            min_rel=2, measures=DL_MEASURES, run_files={"bm25": "bm25", "bm25-rm3": "bm25-rm3"}, kind="candidates")

    return make


def _answer_selection(kind: type[AnswerSelectionDataset], name: str, description: str,
                      relative: str) -> Callable[[Path], Dataset]:
    def make(root: Path) -> Dataset:
        return kind(name, description, {"pairs": root / relative}, measures=QA_MEASURES,
                    run_files={"candidates": "pairs"}, kind="qa")

    return make


def _sessions(split: str) -> Callable[[Path], Dataset]:
    def make(root: Path) -> Dataset:
        from .session_sets import aol_missions  # its module imports this one

        return aol_missions(split)(root)

    return make


DATASETS: dict[str, Callable[[Path], Dataset]] = {
    "vaswani": _vaswani,
    "cacm": _cacm,
    "trec-dl-2019": _trec_dl(2019, "topics.dl19-passage.txt"),
    "trec-dl-2020": _trec_dl(2020, "topics.dl20.txt"),
    "trec-dl-2021": _trec_dl(2021, "topics.dl21.txt"),
    **{f"trecqa-{split}": _answer_selection(AnswerSelectionDataset, f"trecqa-{split}",
                                            f"TrecQA answer selection ({split.upper()}.xml, jacana version)",
                                            f"trecqa/jacana/{split.upper()}.xml") for split in ("train", "dev", "test")},
    **{f"wikiqa-{split}": _answer_selection(WikiQADataset, f"wikiqa-{split}", f"WikiQA answer selection ({split} split)",
                                            f"wikiqa/official/WikiQASent-{split}.txt") for split in ("train", "dev", "test")},
    "movie-kb": lambda root: _movie_dialog().knowledge_base(root),
    **{f"movie-dialog-{task}-{part}": functools.partial(lambda task, part, root: _movie_dialog().task_dataset(
        task, part, root), task, part) for task in ("qa", "recs") for part in ("train", "valid", "test")},
    **{f"aol-missions{'' if split == 'train' else '-' + split}": _sessions(split) for split in ("train", "dev", "test")},
}


def _movie_dialog():
    from . import movie_dialog  # it subclasses Dataset, defined above

    return movie_dialog


def dataset_names() -> list[str]:
    return list(DATASETS)


def unknown_dataset(name: str, remedy: str = "", option: str = "", own_index: str = "") -> UnknownDatasetError:
    """The error for a NAME that is no data set, wherever one is named (`data show`, `retrieve`, `--dataset`,
    `--train`, a pipeline's `dataset`): one message, and exit 2 (some commands exited 1), saying what NAME is where
    it is a file of runs or qrels. `remedy`: what to give instead, '; ...'; `own_index`: the remedy for an index of
    one's own ('pass --topics FILE'), which a pipeline words as its own; `option`: the option it was given to."""
    kind = formats.file_kind(name) if Path(name).is_file() else None
    what = f" (it is {kind}, not a data set)" if kind else ""
    remedy = f"; for an index of your own, {own_index}" if own_index else remedy
    return UnknownDatasetError(f"{option}{': ' if option else ''}unknown data set {name!r}{what}; known: "
                               f"{', '.join(DATASETS)}{remedy}", name, own_index)


def searched_index(name: str) -> str:
    """The index (and data set of documents) a search for data set NAME's topics opens: its own, or the one it names
    (a Movie Dialog task's knowledge base)."""
    return getattr(get_dataset(name), "searches", name) if name in DATASETS else name


def get_dataset(name: str, root: str | Path | None = None) -> Dataset:
    if name not in DATASETS:
        raise unknown_dataset(name)
    return DATASETS[name](data_root(root))


def files_dataset(corpus: str | None = None, topics: str | None = None) -> Dataset:
    """A data set made of files the user names directly (formats detected from content); qrels given as files
    are read by evaluation (`session.judgements_for`), not through a data set."""
    files = {k: Path(v) for k, v in (("corpus", corpus), ("topics", topics)) if v}
    for path in files.values():
        if not path.exists():  # a folder is named when read (formats.open_text)
            raise DataError(f"file not found: {path}")
        formats.refuse_pipe(path)  # before `require`, which called it missing
    return Dataset("custom", "files given on the command line", files)
