"""The Elasticsearch back end's builds on a shared server: the aliases someone added to the build a rebuild replaces
(against noida-db, started by the es_server fixture; each test is a few small builds)."""

from __future__ import annotations

import pytest

from es_server import es_client, es_indexes, es_server  # noqa: F401  (fixture)
from rerank.data.formats import Document
from rerank.retrieve import elastic

pytestmark = [pytest.mark.elasticsearch]


def test_aliases_someone_added_move_to_the_new_build(es_server, home, capsys):  # noqa: F811
    """A rebuild deleted the build before with every alias on it, not only the index name: someone's alias of the
    index (a plain one, one with a filter, one shared with another index) was gone."""
    client = es_client(es_server)
    elastic.build("carry", [Document("d1", "the build before")], {}, es_url=es_server)
    (before,) = es_indexes(es_server, "rerank-carry-")
    client.indices.create(index="carry-other", mappings={"properties": {"contents": {"type": "text"}}})
    client.indices.update_aliases(actions=[{"add": {"index": before, "alias": "carry-mine"}},
                                           {"add": {"index": before, "alias": "carry-filtered",
                                                    "filter": {"term": {"contents": "new"}}}},
                                           {"add": {"index": before, "alias": "carry-both"}},
                                           {"add": {"index": "carry-other", "alias": "carry-both"}}])
    capsys.readouterr()
    elastic.build("carry", [Document("d2", "the new build"), Document("d3", "another one")], {}, es_url=es_server,
                  overwrite=True)
    ((after, aliases),) = es_indexes(es_server, "rerank-carry-").items()
    assert after != before and aliases == ["carry-both", "carry-filtered", "carry-mine", "rerank-carry"]
    assert es_indexes(es_server, "carry-other") == {"carry-other": ["carry-both"]}
    filtered = client.search(index="carry-filtered", query={"match_all": {}})["hits"]["hits"]
    assert [hit["_id"] for hit in filtered] == ["d2"]  # the filter came along
    assert ("rerank: note: the build replaced had other aliases too, now the new build's: carry-both, carry-filtered, "
            "carry-mine") in capsys.readouterr().err


def test_an_older_reranks_index_keeps_its_aliases_when_replaced(es_server, home):  # noqa: F811
    """An index an older rerank built under the index name itself lost the aliases someone gave it."""
    client = es_client(es_server)
    client.indices.create(index="rerank-legacy", mappings={
        "_meta": {"rerank": {"name": "legacy", "complete": True, "documents": 0, "source": {}}},
        "properties": {"contents": {"type": "text"}}})
    client.indices.put_alias(index="rerank-legacy", name="legacy-production")
    elastic.build("legacy", [Document("d1", "rebuilt")], {}, es_url=es_server, overwrite=True)
    ((build, aliases),) = es_indexes(es_server, "rerank-legacy").items()
    assert build.startswith("rerank-legacy-") and aliases == ["legacy-production", "rerank-legacy"]
