"""`python -m custream`'s report records every check it makes: one that fails marks the run
failed. CPU only: the no-GPU round trip needs no driver."""

import importlib

import custream

report = importlib.import_module("custream.__main__")


class NoRefusalAfterClose:
    """A custream.Stream whose synchronize() does not raise after close(): the one failure
    of the no-GPU round trip that no real stream can show."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def synchronize(self):
        pass


def test_the_round_trip_passes(capsys):
    assert report.round_trip_without_gpu() is True
    assert "[FAIL]" not in capsys.readouterr().out


def test_a_closed_stream_that_does_not_refuse_use_fails_the_round_trip(monkeypatch, capsys):
    wrap = custream.as_stream
    monkeypatch.setattr(custream, "as_stream", lambda obj: NoRefusalAfterClose(wrap(obj)))
    assert report.round_trip_without_gpu() is False
    out = capsys.readouterr().out
    assert "[FAIL] a closed stream refuses use: synchronize() after close() did not raise" in out
    assert "[ok  ] close() lets the owner go" in out
