from __future__ import annotations

import threading

from predictor.store import Database, NewEvent, append_events, events_since, last_seq

T0 = 1_800_000_000.0


def test_sequence_numbers_are_gap_free_and_in_order(db: Database) -> None:
    with db.writing() as s:
        first = append_events(s, [NewEvent("job.created", {"a": 1}, "j1", "nlp"), NewEvent("decision")], T0)
    with db.writing() as s:
        second = append_events(s, [NewEvent("reservation.created", {}, "j1", "nlp")], T0 + 1)
    assert [e.seq for e in first + second] == [1, 2, 3]
    with db.session() as s:
        assert last_seq(s) == 3
        assert [e.kind for e in events_since(s, 1)] == ["decision", "reservation.created"]
        assert events_since(s, 0)[0].payload == {"a": 1}
        assert events_since(s, 3) == []


def test_a_rolled_back_append_leaves_no_gap(db: Database) -> None:
    try:
        with db.writing() as s:
            append_events(s, [NewEvent("job.created")], T0)
            raise RuntimeError("handler failed after appending")
    except RuntimeError:
        pass
    with db.writing() as s:
        [event] = append_events(s, [NewEvent("job.created")], T0)
    assert event.seq == 1


def test_team_scoped_reads_see_own_and_global_events(db: Database) -> None:
    with db.writing() as s:
        append_events(s, [NewEvent("a", team="nlp"), NewEvent("b", team="vision"), NewEvent("policy.updated")], T0)
    with db.session() as s:
        kinds = [e.kind for e in events_since(s, 0, team="nlp", only_team=True)]
    assert kinds == ["a", "policy.updated"]


def test_concurrent_writers_get_unique_gap_free_numbers(db: Database) -> None:
    barrier = threading.Barrier(4)

    def writer(k: int) -> None:
        barrier.wait()
        for i in range(10):
            with db.writing() as s:
                append_events(s, [NewEvent("e", {"writer": k, "i": i}), NewEvent("e2")], T0)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with db.session() as s:
        seqs = [e.seq for e in events_since(s, 0, limit=1000)]
    assert seqs == list(range(1, 81))


def test_the_change_probe_moves_only_when_someone_commits(db: Database, tmp_path) -> None:  # noqa: ANN001
    probe = db.change_probe()
    if not db.dialect == "sqlite":
        assert probe is None  # PostgreSQL followers are woken by NOTIFY instead
        return
    try:
        before = probe()
        with db.session() as s:
            events_since(s, 0)  # reads commit nothing
        assert probe() == before
        with db.writing() as s:
            append_events(s, [NewEvent("job.created")], T0)
        after = probe()
        assert after != before  # a pool connection's commit
        assert probe() == after
        other = Database(db.url)  # another process's connection, as another worker's
        with other.writing() as s:
            append_events(s, [NewEvent("decision")], T0 + 1)
        other.dispose()
        assert probe() != after
    finally:
        probe.close()
    assert Database("sqlite:///:memory:").change_probe() is None  # a second connection would not see it
    assert Database(f"sqlite:///{tmp_path / 'gone' / 'none.db'}").change_probe() is None  # no file: poll
