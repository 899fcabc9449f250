#!/usr/bin/env bash
# Builds .gpu/site.tar.gz, the Python packages bench/gpu_session.sh needs that the GPU image (torch 2.11 + CUDA,
# Python 3.12, no network) lacks, copied from this checkout's .venv. Run from the repo root, then carry .gpu:
#
#   bash bench/gpu_site.sh && run(command="bash bench/gpu_session.sh ...", carry=[".gpu"], ...)
#
# What travels, and why each is enough there (the image already has numpy, pandas, pyarrow, xxhash, fsspec,
# huggingface_hub, tqdm, pyyaml, regex and tiktoken):
# - geoopt, nngeometry: pure Python on torch's public API.
# - torchao: its Python files only. Its compiled extensions (_C*.so) are built for another torch and Python and
#   are skipped; torchao then warns once and its float8 / MX paths run through torch (as torchao 0.18 did on
#   torch 2.11 in the 2026-11-27 leases, bench/results/gpu_h100.md).
# - datasets, dill, multiprocess (+ _multiprocess): the licence corpus loads through datasets. All pure Python.
# - licensedcode-data: only data/licenses, the texts training/data.py reads (data/rules, 149 MB, is never read).
# - the GPT-2 ranks: whisper/__init__.py and whisper/assets/gpt2.tiktoken alone, the first place
#   training/tokenizers.py looks (importlib.util.find_spec("whisper"); the package is never imported).
# Each package keeps its .dist-info (torchao and datasets read versions through importlib.metadata); no
# __pycache__ (the .venv's Python differs from the image's).
set -eu
VENV=${VENV:-.venv}
OUT_TAR=${1:-.gpu/site.tar.gz}
SP=$(ls -d "$VENV"/lib/python3*/site-packages | head -1)
[ -d "$SP" ] || { echo "no site-packages under $VENV" >&2; exit 2; }
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
copy() {   # copy SITE_PACKAGES_RELATIVE_PATH...: each into the stage, without bytecode or compiled extensions
    for p in "$@"; do
        [ -e "$SP/$p" ] || { echo "missing in $SP: $p" >&2; exit 2; }
        mkdir -p "$STAGE/$(dirname "$p")"
        cp -r "$SP/$p" "$STAGE/$p"
    done
}
copy geoopt nngeometry torchao datasets dill multiprocess _multiprocess
copy licensedcode/README.rst licensedcode/data/licenses licensedcode/data/cc-by-4.0.LICENSE \
    licensedcode/data/scancode-data.ABOUT
copy whisper/__init__.py whisper/assets/gpt2.tiktoken
for pkg in geoopt nngeometry torchao datasets dill multiprocess licensedcode_data openai_whisper; do
    copy "$(cd "$SP" && ls -d ${pkg}-*.dist-info | head -1)"
done
find "$STAGE" \( -name __pycache__ -o -name '*.so' -o -name '*.pyc' \) -prune -exec rm -rf {} +
mkdir -p "$(dirname "$OUT_TAR")"
tar -czf "$OUT_TAR" -C "$STAGE" .
echo "$OUT_TAR: $(du -h "$OUT_TAR" | cut -f1), $(find "$STAGE" -type f | wc -l) files from $SP"
