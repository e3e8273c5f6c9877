# cython: language_level=3
"""The smallest cimporting consumer; built against variant copies of custream.h to show a
layout drift fails at import (Cython's check_size error) instead of corrupting memory."""

from libc.stdint cimport uintptr_t

from custream cimport Stream


def handle(Stream s not None):
    return <uintptr_t>s.handle
