"""Shards: a deterministic partition by hash or by durations, and the files merge reads."""

from __future__ import annotations

import argparse
import json

import pytest

from harness.contract.errors import UsageError
from harness.running.shard import (
    ShardSpec,
    assign,
    load_durations,
    parse_shard,
    read_shard,
    select,
    shard_bytes,
    stable_shard,
)

IDS = [f"case-{i}" for i in range(40)]


def test_parse_shard_accepts_i_of_n_and_explains_the_rest():
    assert parse_shard("2/3") == ShardSpec(2, 3)
    for bad in ("0/3", "4/3", "1/0", "x", "1-2", "1/2/3"):
        with pytest.raises(argparse.ArgumentTypeError, match="shard|I/N"):
            parse_shard(bad)


def test_hash_assignment_is_a_stable_partition():
    shards = assign(IDS, 3)
    assert shards == assign(list(IDS), 3) and set(shards) == {0, 1, 2}
    assert stable_shard("case-0", 3) == shards[0]
    # the same id lands in the same shard whatever the other cases are
    assert assign(["case-7"], 3) == [shards[7]]
    parts = [select(IDS, IDS, ShardSpec(i, 3)) for i in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(IDS)
    assert all(p == sorted(p, key=IDS.index) for p in parts)  # original order kept


def test_durations_balance_the_shards_longest_first():
    durations = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0, "e": 1.0}
    shards = assign(list(durations), 2, durations)
    loads = [sum(d for c, d in durations.items() if shards[list(durations).index(c)] == s)
             for s in (0, 1)]
    assert sorted(loads) == [12.0, 14.0]  # longest first: a|b, c->b, d->a, e->b
    # an unknown case counts as the mean; each case's shard does not depend on input order
    forward = dict(zip(["z", *durations], assign(["z", *durations], 2, durations)))
    backward = dict(zip([*reversed(durations), "z"],
                        assign([*reversed(durations), "z"], 2, durations)))
    assert forward == backward


def test_load_durations_names_what_is_wrong(tmp_path):
    good = tmp_path / "d.json"
    good.write_text(json.dumps({"cases": {"a": 1.5}}))
    assert load_durations(str(good)) == {"a": 1.5}
    assert load_durations(None) is None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cases": {"a": -1}}))
    with pytest.raises(UsageError, match="seconds >= 0"):
        load_durations(str(bad))
    with pytest.raises(UsageError, match="cannot read"):
        load_durations(str(tmp_path / "missing.json"))
    (tmp_path / "nojson").write_text("{")
    with pytest.raises(UsageError, match="not JSON"):
        load_durations(str(tmp_path / "nojson"))


def test_shard_file_round_trips_and_a_dir_without_one_is_refused(tmp_path):
    (tmp_path / "shard.json").write_bytes(shard_bytes("run", ShardSpec(1, 2), IDS, IDS[:3]))
    data = read_shard(tmp_path)
    assert data["kind"] == "run" and data["cases"] == IDS and data["selected"] == IDS[:3]
    with pytest.raises(UsageError, match="no readable shard.json"):
        read_shard(tmp_path / "nowhere")


def test_durations_without_a_shard_is_a_usage_error():
    from harness.running.shard import check_shard_options

    with pytest.raises(UsageError, match="add --shard"):
        check_shard_options(argparse.Namespace(durations="d.json", shard=None))
    check_shard_options(argparse.Namespace(durations="d.json", shard=ShardSpec(1, 2)))
    check_shard_options(argparse.Namespace(durations=None, shard=None))
