"""Every criterion states its requirement in English; the Chinese clause is kept as its source."""

from __future__ import annotations

import dataclasses
import re

import pytest

from harness.criteria import catalogue
from harness.criteria.base import CriteriaError

CJK = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uff00-\uffef]")
IDS = ("X1 X2 X3 X4 X5 X6 " + " ".join(f"L1.{i}" for i in range(1, 9)) + " "
       + " ".join(f"L2.{i}" for i in range(1, 12)) + " " + " ".join(f"L3.{i}" for i in range(1, 11))
       + " " + " ".join(f"L4.{i}" for i in range(1, 11)) + " " + " ".join(f"L5.{i}" for i in range(1, 6))
       + " M1 M2 M3 M4 M5").split()


def test_the_55_criteria_each_have_an_english_statement_and_a_source_clause():
    assert catalogue.ids() == tuple(IDS) and len(IDS) == 55
    for cid in IDS:
        criterion = catalogue.by_id(cid)
        assert criterion.statement.strip() and not CJK.search(criterion.statement), cid
        assert len(criterion.statement.split()) >= 6, f"{cid}: a statement is a sentence"
        assert criterion.title.strip() and not CJK.search(criterion.title), cid
        assert CJK.search(criterion.seed_clause), f"{cid}: the source clause is the original text"


def test_a_statement_that_is_not_english_is_refused():
    good = catalogue.by_id("X1")
    with pytest.raises(CriteriaError, match="X1: its statement must be non-empty English"):
        catalogue._check_statements((dataclasses.replace(good, statement=good.seed_clause),))
    with pytest.raises(CriteriaError, match="X1: its title"):
        catalogue._check_statements((dataclasses.replace(good, title=" "),))
    catalogue._check_statements((good,))
