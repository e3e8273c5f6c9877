#!/usr/bin/env bash
# Two custream wheels side by side on a GPU, in one call: benches/worker.py's rows for each,
# alternated round by round so that both see the same machine (what "nothing slower" needs).
#
#   bash scripts/gpu-compare.sh BEFORE_WHEEL [SECONDS] [WORKERS]
#
# AFTER is the release wheel in dist/ (scripts/build-wheel.sh dist); a custream_rust_ext wheel
# beside either (scripts/build/build-rust-ext.sh) is installed with it. WORKERS: benches/worker.py
# names (default "custream capture"). Each worker's JSON line goes to one file,
# $OUT/compare.jsonl ({"wheel": "before"|"after", "round": N, ...}); keep $OUT small, since the
# device tool brings back only a few files.
set -u
cd "$(dirname "$0")/.." || exit 2
before=$1
seconds=${2:-240}
workers=${3:-custream capture}
out=${OUT:-$PWD/gpu-out}/compare.jsonl
mkdir -p "$(dirname "$out")"
: >"$out"
tmp=$(mktemp -d)
for w in before after; do
    wheel=$before
    [ $w = after ] && wheel=$(ls dist/custream-*-manylinux_2_28_x86_64.whl)
    # The Rust crate's test extension built beside each wheel (scripts/build/build-rust-ext.sh), if
    # there: the Rust StreamRef row, each against its own custream.
    rx=$(ls "$(dirname "$wheel")"/custream_rust_ext-*.whl 2>/dev/null | head -1)
    python3 -m pip install -q --no-index --no-deps --target "$tmp/$w" "$wheel" ${rx:+"$rx"} || exit 2
done
gcc -O2 -shared -fPIC -o "$tmp/libraw_driver.so" benches/raw_driver.c -ldl || exit 2
ext=$tmp/floor_ext$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
gcc -O2 -shared -fPIC -I"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    -o "$ext" benches/floor_ext.c -ldl || exit 2
deadline=$((SECONDS + seconds))
for round in 1 2 3 4 5 6; do
    for w in before after; do
        for lib in $workers; do
            left=$((deadline - SECONDS))
            [ $left -lt 20 ] && break 3
            line=$(PYTHONPATH=$tmp/$w timeout $((left < 90 ? left : 90)) python3 benches/worker.py "$lib" --gpu \
                --raw "$tmp/libraw_driver.so" --floor-ext "$ext" 2>/dev/null | grep '^{' | tail -1)
            [ -n "$line" ] && echo "{\"wheel\": \"$w\", \"round\": $round, \"worker\": ${line}}" >>"$out"
            echo "round $round $w $lib: ${#line} bytes"
        done
    done
done
