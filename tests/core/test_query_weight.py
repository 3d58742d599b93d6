"""The keyword leg's weight by query: which queries name an identifier, and the weight given."""

from __future__ import annotations

import pytest

from window_retriever.core._query_weight import (
    IDENTIFIER_FACTOR,
    identifier_tokens,
    keyword_weight_for,
)

# One query a kind of token the rule marks, and the token it must find.
MARKED = [
    ("Why doesn't `chomp $cwd` chomp the command output?", "`chomp $cwd`"),
    ("Does range(10) include the number 10 itself?", "range("),
    ("What does the kptr_restrict setting hide?", "kptr_restrict"),
    ("Which builds set CONFIG_KSM?", "CONFIG_KSM"),
    ("Why won't it work on a class with __slots__?", "__slots__"),
    ("What happens if I raise ValueError without calling it?", "ValueError"),
    ("How do I map a different key to SysRq?", "SysRq"),
    ("How do I make json.dump write characters directly?", "json.dump"),
    ("What is the difference between memory.high and the limit?", "memory.high"),
    ("What do I need to sign a .ko by hand?", ".ko"),
    ("Where does File::Spec find the directory?", "File::Spec"),
    ("What does the --log option take?", "--log"),
    ("What exactly does the -l switch do in a one-liner?", "-l"),
    ("Is it a good idea to mount tmpfs with size=0?", "size=0"),
    ("What does /proc/sys/kernel/tainted hold?", "/proc/sys/kernel/tainted"),
    ("Can an admin still write to /proc?", "/proc"),
    ("When is $! meaningful after a system call?", "$!"),
    ("What does chomp strip when $/ is undef?", "$/"),
    ("Is $#array the number of elements in @array?", "@a"),
    ("What does %ENV hold under taint mode?", "%E"),
    ("My send() fails with ENOBUFS. Why?", "ENOBUFS"),
    ("What does the flag 0x1f select?", "0x1f"),
]

# Questions about meaning, some with near misses of the shapes above.
PROSE = [
    "When did Caroline go to the LGBTQ support group?",
    "Why shouldn't I store a per-object list as a class-level attribute?",
    "Is a built-in name ever removed, e.g. at interpreter exit?",
    "What changed in Python 3.11 for the CPU-bound case?",
    "Did Jon spend $100 on 50% of the tickets, i.e. most of them?",
    "Which file(s) does the tool read first?",
    "Why does -2 squared give a negative number?",
    "How does the kernel decide which page to reclaim first?",
    "What is the difference between my and local, and when should I use local?",
    "How does KSM merge pages across NUMA nodes?",
]


@pytest.mark.parametrize(("query", "token"), MARKED)
def test_each_kind_of_identifier_is_found(query: str, token: str) -> None:
    assert token in identifier_tokens(query)
    assert keyword_weight_for(query, 1.0) == IDENTIFIER_FACTOR


@pytest.mark.parametrize("query", PROSE)
def test_questions_about_meaning_keep_the_base(query: str) -> None:
    assert identifier_tokens(query) == []
    assert keyword_weight_for(query, 0.75) == 0.75


def test_the_weight_is_the_factor_times_the_base() -> None:
    query = "What does madvise(MADV_MERGEABLE) need?"
    assert IDENTIFIER_FACTOR == 2.0
    assert keyword_weight_for(query, 0.75) == 1.5
    assert keyword_weight_for(query, 1.0, factor=3.0) == 3.0
    assert keyword_weight_for("What does merging need?", 0.75, factor=3.0) == 0.75


def test_tokens_come_in_the_order_of_the_query() -> None:
    query = "Does synchronize_rcu() wait, unlike call_rcu() and rcu_read_lock?"
    assert identifier_tokens(query) == ["synchronize_rcu(", "call_rcu(", "rcu_read_lock"]
