"""The Elasticsearch back end's builds on a shared server: builds that stopped before the index name was pointed at
them, two builds of one new index name at once, and the aliases someone added to the build a rebuild replaces
(against noida-db, started by the es_server fixture; each test is a few small builds)."""

from __future__ import annotations

import re
import time

import pytest

from es_server import es_client, es_indexes, es_server  # noqa: F401  (fixture)
from rerank.data.formats import Document
from rerank.errors import BackendError
from rerank.retrieve import elastic

pytestmark = [pytest.mark.elasticsearch]


def _bare_build(url, index, record, hours_ago=0.0):
    """An index as rerank's build makes it, without documents: `record` is its `_meta` record, and it was created
    `hours_ago` (noida-db, as Elasticsearch, takes a creation date given at creation)."""
    created = int((time.time() - hours_ago * 3600) * 1000)
    es_client(url).indices.create(index=index, settings={"index": {"creation_date": created}},
                                  mappings={"_meta": {"rerank": record}, "properties": {"contents": {"type": "text"}}})


def test_builds_that_stopped_over_an_hour_ago_are_deleted_and_others_named(es_server, home, capsys):  # noqa: F811
    """A build whose process was killed, or whose server was lost, stayed on the server for good: the next build of
    its index name left it as if another machine were loading it."""
    stopped = {"name": "left", "index_name": "rerank-left", "complete": False, "heartbeat": 60.0}
    _bare_build(es_server, "rerank-left-20200101000000-dead", stopped, hours_ago=2)
    _bare_build(es_server, "rerank-left-20200101000000-beef", stopped, hours_ago=2 / 60)  # alive a minute ago
    older = {key: value for key, value in stopped.items() if key != "heartbeat"}  # an older rerank's: no heartbeat
    _bare_build(es_server, "rerank-left-20200101000000-0ad0", older, hours_ago=2)
    untouched = ["rerank-left-20200101000000-cafe",  # someone gave it an alias
                 "rerank-left-other-20200101000000-dead",  # another index name's build
                 "rerank-left-20200101000000-feed"]  # named as a build, but not one of this index name
    for index, record in zip(untouched, (stopped, {**stopped, "index_name": "rerank-left-other"},
                                         {**stopped, "index_name": "someone-else"})):
        _bare_build(es_server, index, record, hours_ago=2)
    es_client(es_server).indices.put_alias(index=untouched[0], name="kept-by-someone")
    capsys.readouterr()

    elastic.build("left", [Document("d1", "a build after the lost ones")], {}, es_url=es_server)

    said = capsys.readouterr().err.splitlines()
    where = f"Elasticsearch index 'rerank-left' at {es_server}"
    assert (f"rerank: note: deleted 1 build(s) of {where} that stopped over an hour ago before the index name was "
            "pointed at them: rerank-left-20200101000000-dead") in said
    (warning,) = [line for line in said if line.startswith("rerank: warning:")]
    assert re.match(re.escape(f"rerank: warning: {where} has builds it does not find: rerank-left-20200101000000-0ad0 "
                              "(an older rerank's, which records no sign of life); rerank-left-20200101000000-beef "
                              "(last alive ") + r"\d+ s ago: loading elsewhere, or stopped lately", warning)
    assert warning.endswith(f"once no build of it is loading, delete them with: curl -X DELETE "
                            f"'{es_server}/rerank-left-20200101000000-0ad0,rerank-left-20200101000000-beef'")
    left = es_indexes(es_server, "rerank-left")
    assert "rerank-left-20200101000000-dead" not in left
    assert set(untouched) | {"rerank-left-20200101000000-beef", "rerank-left-20200101000000-0ad0"} < set(left)


def test_a_loading_build_says_it_is_alive_and_another_build_leaves_it(es_server, home, capsys, monkeypatch):  # noqa: F811
    """A build loading on another machine is told from one that stopped by the sign of life it records while it
    loads (here at every document); one that finishes meanwhile leaves it alone and names it. The loading one, an
    --overwrite, then replaces that one (it failed: the build it was to replace was gone)."""
    monkeypatch.setattr(elastic, "HEARTBEAT_EVERY", 0)
    monkeypatch.setattr(elastic, "BULK_CHUNK", 2)
    elastic.build("alive", [Document("d0", "the build before")], {}, es_url=es_server)
    seen = {}

    def documents():
        for i in range(6):
            if i == 4:  # two bulk requests loaded
                (loading,) = [index for index, aliases in es_indexes(es_server, "rerank-alive-").items() if not aliases]
                record = es_client(es_server).indices.get_mapping(index=loading).body[loading]["mappings"]["_meta"]
                seen["heartbeat"] = record["rerank"]["heartbeat"]
                capsys.readouterr()
                elastic.build("alive", [Document("e1", "another machine's build")], {}, es_url=es_server,
                              overwrite=True)
                seen["said"] = capsys.readouterr().err
                seen["left"] = es_indexes(es_server, loading)
            yield Document(f"n{i}", f"a loading build {i}")

    last = elastic.build("alive", documents(), {}, es_url=es_server, overwrite=True).source["index_build"]
    assert seen["heartbeat"] > 0
    (loading,) = seen["left"]
    assert re.search(f"has builds it does not find: {loading} \\(last alive \\d+ s ago: loading elsewhere", seen["said"])
    assert loading == last and es_indexes(es_server, "rerank-alive-") == {last: ["rerank-alive"]}


def test_a_new_index_name_another_build_took_meanwhile_is_refused(es_server, home):  # noqa: F811
    """A build of a new index name that another build took while it loaded added the name as a second alias: the
    name found two builds, and every search of it was refused."""
    other = {}

    def documents():
        yield Document("a1", "the build that finishes second")
        other["build"] = elastic.build("race", [Document("b1", "the build that finishes first")], {},
                                       es_url=es_server).source["index_build"]

    with pytest.raises(BackendError, match="another build of Elasticsearch index 'rerank-race' at .*, "
                                           "'rerank-race-.*', finished while this one loaded; this one is deleted: "
                                           "pass --overwrite to replace that one"):
        elastic.build("race", documents(), {}, es_url=es_server)
    assert es_indexes(es_server, "rerank-race-") == {other["build"]: ["rerank-race"]}
    index = elastic.open_index("race", es_url=es_server)
    assert [ranking.docids for ranking in index.search({"1": "build"})] == [["b1"]]


@pytest.mark.parametrize("settles_first", ["older", "newer"])
def test_builds_that_point_a_new_name_at_once_agree_on_the_newer(es_server, capsys, settles_first):  # noqa: F811
    """Two machines point a new index name at their builds at the same moment, then each checks what the name finds,
    in either order: the newer build keeps it, whichever machine deletes the older one first."""
    index_name = f"at-once-{settles_first}"
    older, newer = f"{index_name}-20240101000000-ffff", f"{index_name}-20240101000001-0000"
    for build in (older, newer):
        _bare_build(es_server, build, {"name": "x", "index_name": index_name, "complete": True, "heartbeat": 1.0})
    connection = elastic.Connection(es_server)
    where = f"Elasticsearch index {index_name!r} at {es_server}"
    for build in (older, newer):
        elastic._point(connection, index_name, build, None)
    assert es_indexes(es_server, index_name) == {older: [index_name], newer: [index_name]}  # the race
    capsys.readouterr()
    for build in ((older, newer) if settles_first == "older" else (newer, older)):
        if build == older:
            with pytest.raises(BackendError, match=f"the name finds {newer}: this build is deleted"):
                elastic._settle(connection, index_name, older, where)
        else:
            elastic._settle(connection, index_name, newer, where)
    assert es_indexes(es_server, index_name) == {newer: [index_name]}
    said = capsys.readouterr().err
    assert (f"another build of {where}, {older}, took the index name as this one did" in said) == (
        settles_first == "newer")


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


def test_a_build_is_named_by_the_utc_time_it_began(monkeypatch):
    """Builds were named by the machine's local time, so of two machines in other time zones building one name, the
    one `_settle` took for the newer was not the one that began later."""
    import datetime

    monkeypatch.setenv("TZ", "Etc/GMT-14")  # fourteen hours east of UTC, where no day is UTC's day at noon
    time.tzset()
    try:
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0, tzinfo=None)
        began = datetime.datetime.strptime(elastic._build_name("x").split("-")[1], "%Y%m%d%H%M%S")
    finally:
        monkeypatch.undo()  # TZ as it was
        time.tzset()
    assert before <= began <= before + datetime.timedelta(minutes=1)
