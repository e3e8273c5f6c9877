"""What the tests run on, where it changes what they can measure."""

import sys


def emulated() -> bool:
    """Whether this interpreter runs under qemu-user (scripts/sid/test-aarch64.sh): its
    sys.executable is then a shell script that starts qemu, not the interpreter itself."""
    try:
        with open(sys.executable, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False
