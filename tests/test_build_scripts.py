"""The build scripts' refusals: what they say, before they build anything, when the input is
wrong or a tool is missing (scripts/build-wheel.sh --arch, scripts/sid/debian-root.sh,
scripts/sid/test-aarch64.sh). The builds themselves run in CI (.ci/run)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(
    BASH is None or not (SCRIPTS / "build-wheel.sh").is_file(), reason="needs bash and the source tree's scripts/"
)


def run(*argv, env=None):
    return subprocess.run([BASH, *map(str, argv)], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("script", ["build-wheel.sh", "build/build-rust-ext.sh"])
@pytest.mark.parametrize("arch", ["riscv64", "arm64", "x86-64", ""])
def test_the_builds_refuse_an_unknown_arch_in_one_line(script, arch, tmp_path):
    out = tmp_path / "out"
    proc = run(SCRIPTS / script, out, "--arch", arch)
    assert proc.returncode == 2, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "x86_64" in lines[0] and "aarch64" in lines[0], lines[0]
    assert not out.exists(), "the refusal came after the build began"


def without_debootstrap(tmp_path):
    """An environment whose PATH has bash and coreutils but no debootstrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "cat", "dirname", "basename", "mkdir", "id", "printf", "rm", "date", "env", "unshare"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return dict(os.environ, PATH=str(bin_dir))


def test_debian_root_names_the_package_of_a_missing_debootstrap(tmp_path):
    proc = run(SCRIPTS / "sid" / "debian-root.sh", tmp_path / "root", env=without_debootstrap(tmp_path))
    assert proc.returncode == 1, proc
    assert "debootstrap not found" in proc.stderr and "Debian's debootstrap package" in proc.stderr, proc.stderr


def test_the_aarch64_build_names_a_missing_debootstrap_before_building(tmp_path):
    env = dict(without_debootstrap(tmp_path), CUSTREAM_DEBIAN_ROOT=str(tmp_path / "root"))
    out = tmp_path / "out"
    proc = run(SCRIPTS / "build-wheel.sh", out, "--arch", "aarch64", env=env)
    assert proc.returncode == 1, proc
    assert "Debian's debootstrap package" in proc.stderr, proc.stderr
    assert not out.exists(), "the refusal came after the build began"


def test_test_aarch64_refuses_a_wheel_for_another_machine(tmp_path):
    wheel = tmp_path / "custream-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    proc = run(SCRIPTS / "sid" / "test-aarch64.sh", wheel)
    assert proc.returncode == 2, proc
    assert "is not an aarch64 wheel" in proc.stderr, proc.stderr
