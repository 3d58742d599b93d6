"""The realistic corpus of the keyword benchmarks: real English documentation, resampled.

Usage: ``python benchmarks/realistic.py [--chunks 100000 1000000] [--rebuild]`` makes the
pool (once: about 15 minutes on 2 cores; cached) and prints what a corpus of each size holds.
Other benchmarks import :func:`corpus` (the shape of ``scale.corpus``), :func:`chunks`
(texts and metadatas), :func:`questions` and :func:`page_texts`.

The synthetic corpus (``synthetic.py``: 22 words, each in nine chunks of ten) is the worst
case of a keyword search, not a benchmark of it; this one is what a documentation store
holds. Its text is the documentation Debian's packages install offline, never PostgreSQL's
or Git's (reserved for checks made elsewhere):

- the Python 3.11 documentation (``python3.11-doc``: ``/usr/share/doc/python3.11/html``);
- the Linux kernel 6.1 documentation (``linux-doc-6.1``: ``/usr/share/doc/linux-doc-6.1/html``);
- Perl 5.36's manual (``perl-doc``: ``/usr/share/perl/5.36/pod``, rendered by ``pod2text``
  as ``perldocs.py`` renders it);
- the English man pages of the installed packages (``/usr/share/man/man1`` to ``man8``,
  rendered by ``man -l`` without hyphenation or justification), except those of ``git*``
  and ``postgresql*``, of ``perl-doc`` (the manual above, rendered again), of
  ``google-cloud-cli`` (16,631 generated pages, one a command, mostly the same flag
  boilerplate: more than all the other man pages together eleven times over), symbolic
  links (aliases and alternatives) and ``.so`` aliases.

Each page is loaded by :func:`window_retriever.load_file` (HTML and text as the ingest
command loads them), split by ``WindowSplitter()`` (``RecursiveCharacterTextSplitter`` of
400 characters, 40 of overlap), and every chunk text kept once (the first in the order
above): the *pool*, cached in ``benchmarks/.cache/realistic/`` (gitignored; ``--rebuild``
makes it again).

A corpus of ``n`` chunks is ``n`` draws from the pool with replacement (seeded). The draws of
one page make a file, a copy of the page: the ``c``-th draw of a chunk goes to copy ``c``,
and a copy holds its chunks in the page's order (``chunk_index`` 0, 1, ...). Every copy has
its own ``source``, ``file_id``, chunk ids and ``file_version`` as ``WindowSplitter`` stamps
them, and two filter columns, by file: ``tenant`` (``t0`` to ``t99``: a 1% filter) and
``shard`` (``s0`` to ``s9``: a 10% filter), each file given to the value that holds the
fewest chunks so far, so that each value holds its share of the chunks.

The questions are the real ones of ``benchmarks/data``: the Python, kernel and Perl
documentation's question sets (459), in a seeded order that mixes the three.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import heapq
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from window_retriever import WindowSplitter, load_file
from window_retriever.core._ids import content_version, make_chunk_id, make_file_id

HERE = Path(__file__).parent
CACHE = HERE / ".cache" / "realistic"
POOL_FORMAT = 1
"""The pool's layout and recipe; another value in the cached file means make it again."""

PYTHON_ROOT = Path("/usr/share/doc/python3.11/html")
KERNEL_ROOT = Path("/usr/share/doc/linux-doc-6.1/html")
POD_ROOT = Path("/usr/share/perl/5.36/pod")
MAN_ROOT = Path("/usr/share/man")
DPKG_LISTS = Path("/var/lib/dpkg/info")

EXCLUDED_PACKAGES = ("git", "postgresql", "google-cloud-cli", "perl-doc")
"""Packages whose man pages are left out (by prefix; see the module's docstring)."""

QUESTION_SETS = ("pydocs_questions.jsonl", "kerneldocs_questions.jsonl", "perldocs_questions.jsonl")
TENANTS = 100
SHARDS = 10
SEED = 7


# ---- the pool: every page, loaded, split, each chunk text once --------------------------------


def _html_pages(root: Path) -> list[Path]:
    """The pages of a Sphinx build, without its indexes, search page and static folders."""
    return sorted(
        path
        for path in root.rglob("*.html")
        if not any(part.startswith("_") for part in path.relative_to(root).parts)
        and not path.name.startswith(("genindex", "search", "py-modindex"))
    )


def _man_owners() -> dict[str, str]:
    """Each man page's package, from dpkg's file lists."""
    owners = {}
    for listing in DPKG_LISTS.glob("*.list"):
        package = listing.name.removesuffix(".list").split(":")[0]
        for line in listing.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(f"{MAN_ROOT}/man"):
                owners[line] = package
    return owners


def _man_pages() -> list[Path]:
    owners = _man_owners()
    pages = []
    for path in sorted(MAN_ROOT.glob("man[1-8]/*")):
        owner = owners.get(str(path))
        if path.is_symlink() or not path.is_file() or owner is None:
            continue
        if owner.startswith(EXCLUDED_PACKAGES):
            continue
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as file:
            if file.read(4) == b".so ":  # an alias of another page
                continue
        pages.append(path)
    return pages


def _render_man(path: Path) -> Path | None:
    """``man -l`` of one page as plain text in the cache (done once)."""
    target = CACHE / "man" / path.parent.name / (path.name.removesuffix(".gz") + ".txt")
    if target.is_file():
        return target
    env = {**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8", "MAN_KEEP_FORMATTING": ""}
    done = subprocess.run(  # noqa: S603 - the system's man
        ["man", "--nh", "--nj", "-l", "-P", "cat", str(path)],  # noqa: S607
        capture_output=True,
        env=env,
        check=False,
        timeout=120,
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(done.stdout)
    return target


def _split(task: tuple[str, str]) -> tuple[str, str, list[tuple[int, str]]]:
    """One page loaded and split: its label, its title, and its chunks (start, text)."""
    label, name = task
    path = Path(name)
    if label.startswith("man/"):
        rendered = _render_man(path)
        if rendered is None:
            return label, "", []
        path = rendered
    loaded = load_file(path)
    if loaded.document is None:
        return label, "", []
    document = loaded.document
    title = str(document.metadata.get("title") or "")
    document.metadata = {"source": label}
    split = WindowSplitter().split_documents([document])
    return label, title, [(c.metadata["start_index"], c.page_content) for c in split]


def _tasks() -> list[tuple[str, str]]:
    """Every page to load, labelled by its set, in the pool's order."""
    for root, package in ((PYTHON_ROOT, "python3.11-doc"), (KERNEL_ROOT, "linux-doc-6.1")):
        if not root.is_dir():
            msg = f"{root} not found: install it with `apt-get install {package}`"
            raise SystemExit(msg)
    from perldocs import CACHE as POD_CACHE
    from perldocs import render

    pods = sorted(path.with_suffix(".txt").name for path in POD_ROOT.glob("*.pod"))
    render(pods)
    tasks = [(f"python/{p.relative_to(PYTHON_ROOT)}", str(p)) for p in _html_pages(PYTHON_ROOT)]
    tasks += [(f"kernel/{p.relative_to(KERNEL_ROOT)}", str(p)) for p in _html_pages(KERNEL_ROOT)]
    tasks += [(f"perl/{name}", str(POD_CACHE / name)) for name in pods]
    tasks += [(f"man/{p.parent.name}/{p.name}", str(p)) for p in _man_pages()]
    return tasks


def make_pool(workers: int = 2) -> dict[str, Any]:
    """Load and split every page (in ``workers`` processes); keep each chunk text once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    tasks = _tasks()
    seen: set[str] = set()
    pages: list[list[Any]] = []
    counts: Counter[str] = Counter()
    with ProcessPoolExecutor(workers) as pool:
        for number, (label, title, split) in enumerate(pool.map(_split, tasks, chunksize=8)):
            kept = []
            for start, text in split:
                counts[f"{label.split('/')[0]} chunks"] += 1
                if text not in seen:
                    seen.add(text)
                    kept.append([start, text])
            counts[f"{label.split('/')[0]} kept"] += len(kept)
            if kept:
                pages.append([label, title, kept])
            if number % 500 == 0:
                print(f"{number} of {len(tasks)} pages, {len(seen)} chunks", file=sys.stderr)
    return {"format": POOL_FORMAT, "pages": pages, "counts": dict(sorted(counts.items()))}


def _pool_path() -> Path:
    return CACHE / f"pool-{POOL_FORMAT}.json.gz"


@cache
def pool() -> list[list[Any]]:
    """The pool's pages, ``[label, title, [[start_index, text], ...]]``: made once, then read."""
    import orjson

    path = _pool_path()
    if not path.is_file():
        made = make_pool()
        temporary = path.with_suffix(".tmp")
        with gzip.open(temporary, "wb", compresslevel=1) as file:
            file.write(orjson.dumps(made))
        temporary.rename(path)
    with gzip.open(path, "rb") as file:
        found = orjson.loads(file.read())
    if found.get("format") != POOL_FORMAT:
        msg = f"{path} is of another format: remove it, or run benchmarks/realistic.py --rebuild"
        raise SystemExit(msg)
    pages: list[list[Any]] = found["pages"]
    return pages


def pool_counts() -> dict[str, int]:
    """Chunks each set gave, and those kept once duplicates were dropped."""
    import orjson

    pool()
    with gzip.open(_pool_path(), "rb") as file:
        counts: dict[str, int] = orjson.loads(file.read())["counts"]
    return counts


# ---- a corpus of n chunks -----------------------------------------------------------------------


def chunks(n: int, seed: int = SEED) -> tuple[list[str], list[dict[str, Any]]]:
    """``n`` chunks drawn from the pool with replacement: their texts and metadatas.

    The metadata is what ``WindowSplitter`` stamps on a chunk of a copy of its page
    (``source``, ``title`` where the page has one, ``file_id``, ``chunk_index``,
    ``chunk_id``, ``start_index``, ``file_version``) and the filter columns ``tenant`` (100
    values, by file, 1% of the chunks each) and ``shard`` (10, 10% each). The same ``n`` and ``seed`` give the same corpus.
    """
    pages = pool()
    page_of = [number for number, page in enumerate(pages) for _ in page[2]]
    first = [0] * len(pages)  # each page's first chunk in the flat numbering
    for number in range(1, len(pages)):
        first[number] = first[number - 1] + len(pages[number - 1][2])
    rng = random.Random(seed)
    drawn = [0] * len(page_of)
    files: dict[tuple[int, int], list[int]] = {}
    for chunk in rng.choices(range(len(page_of)), k=n):
        copy, drawn[chunk] = drawn[chunk], drawn[chunk] + 1
        files.setdefault((copy, page_of[chunk]), []).append(chunk)
    texts: list[str] = []
    metadatas: list[dict[str, Any]] = []
    tenants = [(0, number) for number in range(TENANTS)]  # (chunks so far, tenant)
    shards = [(0, number) for number in range(SHARDS)]
    for (copy, page), members in sorted(files.items()):
        label, title, split = pages[page]
        members.sort()
        source = f"copy{copy}/{label}"
        file_id = make_file_id({"source": source}, ("source",))
        own: dict[str, Any] = {"source": source, **({"title": title} if title else {})}
        own["tenant"] = f"t{_smallest(tenants, len(members))}"
        own["shard"] = f"s{_smallest(shards, len(members))}"
        layout = [split[chunk - first[page]][0] for chunk in members]
        version = content_version(label, {"copy": copy, "layout": layout})
        for index, chunk in enumerate(members):
            start, text = split[chunk - first[page]]
            texts.append(text)
            metadatas.append(
                {
                    **own,
                    "file_id": file_id,
                    "chunk_index": index,
                    "chunk_id": make_chunk_id(file_id, index),
                    "start_index": start,
                    "file_version": version,
                }
            )
    return texts, metadatas


def _smallest(heap: list[tuple[int, int]], size: int) -> int:
    """The value (tenant, shard) that holds the fewest chunks so far; it takes ``size`` more."""
    held, value = heapq.heappop(heap)
    heapq.heappush(heap, (held + size, value))
    return value


def questions(seed: int = SEED) -> list[str]:
    """The 459 real questions of the Python, kernel and Perl sets, in a seeded mixed order."""
    found = []
    for name in QUESTION_SETS:
        for line in (HERE / "data" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                found.append(json.loads(line)["question"])
    random.Random(seed).shuffle(found)
    return found


def corpus(n: int, seed: int = SEED) -> tuple[list[Document], list[str]]:
    """``scale.corpus``'s shape: ``n`` chunks as stamped documents, and the questions."""
    texts, metadatas = chunks(n, seed)
    documents = [
        Document(page_content=text, metadata=metadata, id=metadata["chunk_id"])
        for text, metadata in zip(texts, metadatas, strict=True)
    ]
    return documents, questions(seed)


def page_texts(count: int, per_page: int = 8, seed: int = SEED) -> Iterator[str]:
    """``count`` page texts: ``per_page`` consecutive chunks of a pool page each, joined.

    About 3,000 characters at 8, for benchmarks that ingest files.
    """
    pages = [page for page in pool() if len(page[2]) >= per_page] or pool()
    rng = random.Random(seed)
    for _ in range(count):
        split = rng.choice(pages)[2]
        start = rng.randrange(max(1, len(split) - per_page + 1))
        yield "\n\n".join(text for _, text in split[start : start + per_page])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--rebuild", action="store_true", help="make the pool again")
    arguments = parser.parse_args(argv)
    if arguments.rebuild:
        _pool_path().unlink(missing_ok=True)
        shutil.rmtree(CACHE / "man", ignore_errors=True)
        pool.cache_clear()
    started = time.perf_counter()
    pages = pool()
    summary: dict[str, Any] = {
        "pool_seconds": round(time.perf_counter() - started, 1),
        "pages": len(pages),
        "pool_chunks": sum(len(page[2]) for page in pages),
        "counts": pool_counts(),
        "questions": len(questions()),
    }
    for n in arguments.chunks:
        started = time.perf_counter()
        texts, metadatas = chunks(n)
        files = Counter(metadata["file_id"] for metadata in metadatas)
        tenants = Counter(metadata["tenant"] for metadata in metadatas)
        shards = Counter(metadata["shard"] for metadata in metadatas)
        summary[str(n)] = {
            "seconds": round(time.perf_counter() - started, 1),
            "files": len(files),
            "distinct_texts": len(set(texts)),
            "mean_characters": round(sum(map(len, texts)) / len(texts), 1),
            "tenant_share_min_max": [min(tenants.values()) / n, max(tenants.values()) / n],
            "shard_share_min_max": [min(shards.values()) / n, max(shards.values()) / n],
            "digest": hashlib.sha256("\0".join(texts[:1000]).encode()).hexdigest()[:12],
        }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
