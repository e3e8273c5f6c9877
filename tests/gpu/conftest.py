"""tests/gpu: the gpu tests, one file per peer library and custream's own. Their shared
helpers live in custream_gpu_helpers.py next to this file, and some tests use tests/'s
helpers (_threads.py, _capi_ctypes.py); both folders go on sys.path here so the test modules
import them under any pytest import mode, and when tests/gpu is run on its own."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for folder in (HERE, os.path.dirname(HERE)):
    if folder not in sys.path:
        sys.path.insert(0, folder)
