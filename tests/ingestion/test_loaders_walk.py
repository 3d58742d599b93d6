"""Walking folders and reading files: links, loops, odd names, old encodings, blank files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from window_retriever.ingestion._loaders import (
    GONE,
    NAME_NOT_UTF8,
    decode_text,
    expand,
    load_file,
    load_sources,
    printable,
)
from window_retriever.ingestion._web import BINARY, EMPTY, LoadOptions


def write(path: Path, text: str = "Some words about moths and lamps.") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---- walking -------------------------------------------------------------------------------------


def test_a_dangling_folder_link_is_unreadable_not_empty(tmp_path: Path) -> None:
    write(tmp_path / "ext" / "s1.txt")
    write(tmp_path / "docs" / "own.txt")
    (tmp_path / "docs" / "shared").symlink_to(Path("..") / "ext")
    (tmp_path / "ext").rename(tmp_path / "moved")
    unreadable: list[str] = []
    found = expand([str(tmp_path / "docs")], unreadable)
    assert found == [str(tmp_path / "docs" / "own.txt")]
    assert unreadable == [str(tmp_path / "docs" / "shared")]


def test_a_dangling_link_to_a_text_file_is_listed_and_gone(tmp_path: Path) -> None:
    (tmp_path / "x.txt").symlink_to(tmp_path / "nowhere.txt")
    unreadable: list[str] = []
    assert expand([str(tmp_path)], unreadable) == [str(tmp_path / "x.txt")]
    assert unreadable == []
    assert load_file(tmp_path / "x.txt").error == GONE


def test_an_unlistable_folder_is_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder the walk cannot list (no permission: root lists every folder, so the refusal
    is made here) is named, and nothing below it is listed."""
    locked = tmp_path / "locked"
    write(locked / "a.txt")
    write(tmp_path / "open.txt")
    scandir = os.scandir

    def refusing(path: Any) -> Any:
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    unreadable: list[str] = []
    assert expand([str(tmp_path)], unreadable) == [str(tmp_path / "open.txt")]
    assert unreadable == [str(locked)]


def test_a_link_to_its_own_folder_is_not_walked_again(tmp_path: Path) -> None:
    write(tmp_path / "a.txt")
    (tmp_path / "self").symlink_to(".")  # followed until ELOOP, this lists a.txt 41 times
    repeated: list[tuple[str, str]] = []
    assert expand([str(tmp_path)], [], repeated) == [str(tmp_path / "a.txt")]
    assert repeated == [(str(tmp_path / "self"), str(tmp_path))]


def test_loops_are_walked_once_and_named(tmp_path: Path) -> None:
    top = tmp_path / "L1"
    write(top / "a.txt")
    write(top / "L2" / "b.txt")
    (top / "self").symlink_to(".")
    (top / "L2" / "up").symlink_to("..")
    repeated: list[tuple[str, str]] = []
    found = expand([str(top)], [], repeated)
    assert found == [str(top / "L2" / "b.txt"), str(top / "a.txt")]
    assert sorted(repeated) == [(str(top / "L2" / "up"), str(top)), (str(top / "self"), str(top))]


def test_one_real_file_is_listed_once_under_the_first_name_walked(tmp_path: Path) -> None:
    write(tmp_path / "a" / "one.txt")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link.txt").symlink_to(tmp_path / "a" / "one.txt")
    os.link(tmp_path / "a" / "one.txt", tmp_path / "b" / "hard.txt")
    (tmp_path / "c").symlink_to(tmp_path / "a")
    repeated: list[tuple[str, str]] = []
    assert expand([str(tmp_path)], [], repeated) == [str(tmp_path / "a" / "one.txt")]
    first = str(tmp_path / "a" / "one.txt")
    assert sorted(repeated) == [
        (str(tmp_path / "b" / "hard.txt"), first),
        (str(tmp_path / "b" / "link.txt"), first),
        (str(tmp_path / "c"), str(tmp_path / "a")),
    ]


def test_a_linked_file_keeps_the_name_it_was_found_by(tmp_path: Path) -> None:
    write(tmp_path / "outside" / "o.txt")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "link.txt").symlink_to(tmp_path / "outside" / "o.txt")
    assert expand([str(tmp_path / "docs")]) == [str(tmp_path / "docs" / "link.txt")]


# ---- names ---------------------------------------------------------------------------------------


def test_a_name_that_is_not_utf8_fails_alone(tmp_path: Path) -> None:
    write(tmp_path / "good.txt")
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.txt"), "wb") as file:
        file.write(b"Espresso and crema.")
    results = list(load_sources(expand([str(tmp_path)]), LoadOptions()))
    assert [(printable(r.name), r.error) for r in results] == [
        (f"{tmp_path}/caf\\xe9.txt", NAME_NOT_UTF8),
        (str(tmp_path / "good.txt"), None),
    ]


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("caf\udce9.txt", "caf\\xe9.txt"),
        ("café.txt", "café.txt"),
        ("two\nlines.txt", "two\\nlines.txt"),
        ("odd\ud800.txt", "odd\\ud800.txt"),
    ],
)
def test_printable_names(name: str, shown: str) -> None:
    assert printable(name) == shown
    printable(name).encode("utf-8")  # never raises


# ---- encodings -----------------------------------------------------------------------------------

LATIN = "Un café crème à la terrasse, la naïveté du résumé. " * 8


@pytest.mark.parametrize(
    ("text", "encoding", "named"),
    [
        (LATIN, "latin-1", "cp1252"),  # Windows-1252 decodes Latin-1 text the same
        ("café naïve résumé", "latin-1", "cp1252"),
        ("café", "latin-1", "cp1252"),  # the detector alone says UTF-16 here
        ("Grüße", "latin-1", "cp1252"),
        ("He said “hello” – then ‘goodbye’… and paid 5€.", "cp1252", "cp1252"),  # noqa: RUF001
        ("Kettles “whistle” when the water boils.", "utf-16", "utf-16"),
        ("Kettles “whistle”.", "utf-8-sig", "utf-8"),
        ("Привет, как дела? Это русский текст в кодировке Windows. " * 4, "cp1251", "cp1251"),
        ("Καλημέρα, τι κάνεις; Αυτό είναι ελληνικό κείμενο. " * 5, "cp1253", "cp1253"),
        ("plain ascii and “utf-8”", "utf-8", "utf-8"),
        ("Idée, épée, fée", "latin-1", "cp1252"),  # "Id嶪" in Big5
        ("São Paulo ação não", "latin-1", "cp1252"),
        ("日本語のテキストです。これはテストです。" * 5, "shift_jis", "cp932"),
        ("한국어 텍스트 테스트입니다. " * 5, "euc_kr", "cp949"),
    ],
)
def test_text_in_other_encodings_is_decoded(text: str, encoding: str, named: str) -> None:
    assert decode_text(text.encode(encoding)) == (text, named)


def test_a_declared_charset_is_used_for_html() -> None:
    page = '<meta charset="iso-8859-1"><p>Crème brûlée</p>'.encode("latin-1")
    assert decode_text(page, declared="iso8859-1") == (page.decode("latin-1"), "iso8859-1")


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)) * 4,
        bytes(range(1, 256)) * 4,
        b"Readable words. " * 100 + b"\x00",  # one NUL: not text, though all else is
        b"\x89PNG\r\n\x1a\n" * 30,
    ],
)
def test_binary_is_refused(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "blob.txt").write_bytes(data)
    assert load_file(tmp_path / "blob.txt").error == BINARY


def test_the_encoding_is_recorded_only_when_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_bytes(LATIN.encode("latin-1"))
    write(tmp_path / "new.txt", LATIN)
    old, new = load_file(tmp_path / "old.txt"), load_file(tmp_path / "new.txt")
    assert old.document is not None and new.document is not None
    assert old.document.page_content == new.document.page_content == LATIN.strip()
    assert old.document.metadata["encoding"] == "cp1252"
    assert "encoding" not in new.document.metadata


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("empty.txt", b""),
        ("spaces.md", b"  \n\n\t \n"),
        ("bom.txt", b"\xef\xbb\xbf \n"),
        ("front.md", b"---\ntitle: x\n---\n\n"),
        ("nothing.html", b"<html><head><title>Only a title</title></head><body> </body></html>"),
        ("script.html", b"<html><body><script>var x = 1;</script><div>\n</div></body></html>"),
    ],
)
def test_a_file_without_text_is_empty(tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    assert load_file(tmp_path / name).error == EMPTY


# ---- paths as a user passes them -----------------------------------------------------------------


def test_load_file_takes_a_str_as_well_as_a_path(tmp_path: Path, monkeypatch: Any) -> None:
    page = write(tmp_path / "x.html", "<html><title>X</title><body><p>Moths.</p></body></html>")
    from_path = load_file(page)
    assert from_path.document is not None and from_path.error is None
    from_str = load_file(str(page))
    assert from_str == from_path
    monkeypatch.chdir(tmp_path)
    relative = load_file("x.html")
    assert relative.document is not None
    assert relative.document.metadata["source"] == str(page)  # stored under its absolute path
    assert load_file("missing.html").error == GONE
