# AltGrad: two commands do all set-up on a fresh machine.
#   make run    — the main job: papermill sweep of every notebook over params/ (profile cpu) -> outputs/
#   make test   — the test suite: unit/oracle/property/compile tests + nbval on the committed notebooks
# Both create .venv and install what they need first (idempotent: re-running skips installed steps).
PYTHON    ?= python3
VENV      ?= .venv
PY        := $(VENV)/bin/python
PROFILE   ?= cpu
STAMP     := $(VENV)/.altgrad-installed
# The CPU wheel of torch lies on local disk; asking for it first keeps pip from pulling a 5 GB CUDA build.
TORCH_PIN := torch==2.13.0
WHISPER   := openai-whisper==20250625
NNGEOMETRY := nngeometry==0.4

export HF_HUB_OFFLINE=1
export HF_DATASETS_OFFLINE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Python's bytecode cache stays on for these commands even where the shell exports PYTHONDONTWRITEBYTECODE (this VM
# does): without it each test worker, CLI and study process, study worker and notebook kernel compiles altgrad_lib
# from source (~0.3 s a process, ~150 processes in `make test`) and pytest rewrites every test module again in each
# worker. `make test` 10 min 35 s -> 9 min 43 s on a fresh clone's first run (README). __pycache__/ is gitignored.
unexport PYTHONDONTWRITEBYTECODE

NOTEBOOKS := notebooks/01_formats.ipynb notebooks/02_bf16_baseline.ipynb notebooks/03_fp8_baseline.ipynb \
             notebooks/04_exotic_formats.ipynb notebooks/05_manifold_optimizer.ipynb notebooks/06_analysis.ipynb
NBVAL     := --nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg

.PHONY: setup run test test-portable test-torch211 notebooks lab bench clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	# ray: the study executor's test runs against a local Ray instance (ray stays an optional extra for users)
	$(PY) -m pip install -q -e '.[dev,notebooks,ray]'
	# gpt2.tiktoken (official GPT-2 BPE ranks) ships inside openai-whisper; its heavy deps are not needed.
	$(PY) -m pip install -q --no-deps $(WHISPER)
	# nngeometry (K-FAC Fisher monitor) declares torchvision, which it never imports and which would replace torch
	$(PY) -m pip install -q --no-deps $(NNGEOMETRY)
	touch $@

setup: $(STAMP)

run: $(STAMP)
	$(PY) tools/sweep.py --profile $(PROFILE)

# Tests train into a fresh temporary ALTGRAD_OUTPUTS, so nbval never passes on runs left by older code.
# pytest-xdist, one worker per core up to 4 (beyond that the notebooks, one unit, are the floor); on a 2-core box the
# wall time is within ~5 % of half the summed test time (615-668 s against 1,171-1,274 s summed; README gives the
# wall time).
# tests/conftest.py makes each test file one unit of work and all notebooks one unit, cells in order (03 reuses the
# run 02 trained), sent first (--no-loadscope-reorder keeps that order), and gives each worker its own outputs and
# cores // workers torch threads.
XDIST     := -n $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 ))) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	ALTGRAD_OUTPUTS=$$(mktemp -d) $(PY) -m pytest tests $(XDIST) $(NBVAL) $(NOTEBOOKS)

# What a user's CPU without AVX2/AVX-512 kernels sees: checked notebook outputs must not change.
# Inductor's cache key ignores ATEN_CPU_CAPABILITY: code cached by a native run then fails to compile
# ("'at::vec' has not been declared"), so this pass compiles into its own cache directory.
test-portable: $(STAMP)
	ATEN_CPU_CAPABILITY=default TORCHINDUCTOR_CACHE_DIR=$${TMPDIR:-/tmp}/torchinductor-aten-default $(MAKE) test

# Re-execute the committed notebooks in place with their CI-default parameters (no -p), in order (03 reuses 02's
# baseline run; 06 trains the CI study params/studies/ci_formats.yaml, about a minute, and analyses it). Needed whenever library text they print changes (format notes, short_str, tables); commit the
# result. A fresh ALTGRAD_OUTPUTS, as in `make test`, so no output comes from a run made by older code.
# papermill keeps the kernelspec a notebook had; tools/kernelspec.py writes the installed one ("Python 3 (ipykernel)"),
# which JupyterLab would otherwise rewrite on opening, so the notebooks open clean (tests/test_notebook_kernelspec.py).
notebooks: $(STAMP)
	export ALTGRAD_OUTPUTS=$$(mktemp -d) && for nb in $(NOTEBOOKS); do \
		$(VENV)/bin/papermill -k python3 --cwd notebooks $$nb $$nb || exit 1; done
	$(PY) tools/kernelspec.py $(NOTEBOOKS)

# torch 2.11 is the stock image of rented GPU boxes, and two of our worst bugs lived only there (compiled blocks
# got all-zero gradients; the E4M3 cast gave NaN instead of saturating). This pass re-runs the tests of those
# paths on 2.11's PyPI build (its CUDA libraries come along, ~5 GB; it runs on the CPU). CI runs it too.
VENV211   ?= .venv-torch211
STAMP211  := $(VENV211)/.altgrad-installed

$(STAMP211): pyproject.toml
	test -x $(VENV211)/bin/python || $(PYTHON) -m venv $(VENV211)
	$(VENV211)/bin/python -m pip install -q --upgrade pip
	$(VENV211)/bin/python -m pip install -q torch==2.11.0
	$(VENV211)/bin/python -m pip install -q -e '.[dev]'
	touch $@

test-torch211: $(STAMP211)
	ALTGRAD_OUTPUTS=$$(mktemp -d) $(VENV211)/bin/python -m pytest -q tests/test_compile_grads.py \
		tests/test_numerics_kernel_plans.py tests/test_numerics_mt_bits.py \
		tests/test_block_kernel_layout.py::test_compiled_block_kernels_equal_eager \
		tests/test_numerics_rounding.py::test_overflow_inf_nan_follow_the_spec_not_a_cast \
		tests/test_numerics_rounding.py::test_split_compiled_equals_the_float_kernel_at_every_tie

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

bench: $(STAMP)
	$(PY) bench/quantize.py
	$(PY) bench/train_step.py

clean-venv:
	rm -rf $(VENV)
