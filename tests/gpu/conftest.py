"""tests/gpu: the peer-library gpu tests. Their shared helpers live in
custream_gpu_helpers.py next to this file; this folder goes on sys.path here so the test
modules import it under any pytest import mode."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
