"""What the Stream type shows Python, with no driver: `s.flags` (custream.h's CUSTREAM_FLAG_*
bits), equality without order (and no ordering in help()), and the signatures help() gives."""

import inspect
import os
import pydoc
import re

import pytest

import custream
from custream import Stream

# custream.h's CUSTREAM_FLAG_* bits, as the installed header defines them.
HEADER_FLAGS = {
    name: int(value, 16)
    for name, value in re.findall(
        r"#define CUSTREAM_FLAG_(\w+) (0x[0-9a-fA-F]+)u", open(os.path.join(custream.get_include(), "custream.h")).read()
    )
}
OWNED, DEFAULT, SHARED = HEADER_FLAGS["OWNED"], HEADER_FLAGS["DEFAULT"], HEADER_FLAGS["SHARED"]


def test_the_modules_flag_constants_are_the_headers():
    assert set(HEADER_FLAGS) == {"OWNED", "DEFAULT", "NON_BLOCKING", "SHARED", "POOLED", "GREEN"}
    assert {name: getattr(custream, "FLAG_" + name) for name in HEADER_FLAGS} == HEADER_FLAGS
    assert all("FLAG_" + name in custream.__all__ for name in HEADER_FLAGS)


def test_a_wrapped_stream_has_no_flag():
    owner = object()
    s = Stream.from_handle(0x7F00_1234_5000, owner=owner)
    assert s.flags == 0
    assert not s.owned and not s.is_default


@pytest.mark.parametrize("token", [0, 1, 2])
def test_a_default_stream_token_has_the_default_flag(token):
    s = Stream.from_handle(token)
    assert s.flags == DEFAULT
    assert s.is_default


@pytest.mark.parametrize("name", ["DEFAULT_STREAM", "LEGACY_DEFAULT_STREAM", "PER_THREAD_DEFAULT_STREAM"])
def test_the_modules_default_streams_are_default_and_shared(name):
    s = getattr(custream, name)
    assert s.flags == DEFAULT | SHARED
    assert isinstance(s.flags, int)


def test_flags_is_read_only_and_readable_after_close():
    s = Stream.from_handle(0x7F00_1234_6000)
    with pytest.raises(AttributeError):
        s.flags = OWNED
    s.close()
    assert s.flags == 0


def test_streams_compare_equal_by_handle_and_have_no_order():
    a, b = Stream.from_handle(0x7F00_1234_7000), Stream.from_handle(0x7F00_1234_7000)
    c = Stream.from_handle(0x7F00_1234_8000)
    assert a == b and not (a != b) and hash(a) == hash(b)
    assert a != c and not (a == c)
    assert a != 0x7F00_1234_7000  # an int is not a Stream
    for compare in (lambda: a < c, lambda: a <= c, lambda: a > c, lambda: a >= c):
        with pytest.raises(TypeError, match="not supported between instances of 'custream.Stream'"):
            compare()


ORDERINGS = ("__lt__", "__le__", "__gt__", "__ge__")


@pytest.mark.parametrize("cls", [Stream, custream.IpcEventHandle])
def test_help_lists_equality_and_no_ordering(cls):
    """CPython gives a type with a comparison slot all six comparison wrappers; custream's
    types with == and no order keep only __eq__ and __ne__, so help() lists no ordering."""
    assert {"__eq__", "__ne__"} <= set(cls.__dict__)
    assert not set(ORDERINGS) & set(cls.__dict__)
    assert all(getattr(cls, name) is getattr(object, name) for name in ORDERINGS)
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "__eq__(self, value, /)" in text
    assert not [name for name in ORDERINGS if name + "(" in text]


def test_orderings_still_raise_and_equality_still_holds_once_taken_out_of_the_dict():
    a, b = Stream.from_handle(0x7F00_1234_7000), Stream.from_handle(0x7F00_1234_7000)
    assert a == b and Stream.__eq__(a, b) and Stream.__ne__(a, b) is False
    assert Stream.__lt__(a, b) is NotImplemented  # object's, as for any unordered type
    with pytest.raises(TypeError, match="'<=' not supported"):
        a <= b  # noqa: B015 - the comparison is the test


def test_help_gives_the_context_manager_and_pickle_methods_signatures():
    assert str(inspect.signature(Stream.__enter__)) == "(self, /)"
    assert str(inspect.signature(Stream.__exit__)) == "(self, exc_type, exc_value, traceback, /)"
    assert str(inspect.signature(Stream.__reduce__)) == "(self, /)"
    assert not re.search(r"^ \|  \w+\(\.\.\.\)$", pydoc.render_doc(Stream, renderer=pydoc.plaintext), re.M)


def test_help_shows_new_with_its_signature():
    sig = inspect.signature(Stream.__new__)
    assert str(sig) == "(cls, /, *, device=None, non_blocking=True, priority=0, green_context=None, sync_policy=None)"
    text = pydoc.render_doc(Stream, renderer=pydoc.plaintext)
    # pydoc of 3.13 and later folds a long signature over lines: compared without the folding.
    assert "__new__(cls,/,*,device=None,non_blocking=True" in re.sub(r"[\s|]+", "", text)
    assert "See help(type) for accurate signature" not in text
    assert "flags" in text


def test_new_refuses_what_is_not_the_stream_type():
    with pytest.raises(TypeError, match="not enough arguments"):
        Stream.__new__()
    with pytest.raises(TypeError, match="must be custream.Stream, got <class 'int'>"):
        Stream.__new__(int)
    with pytest.raises(TypeError, match=r"Stream\(\) takes no positional arguments but 1 was given"):
        Stream.__new__(Stream, 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Stream.__new__(Stream, colour=1)
