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
# from source and pytest rewrites every test module again in each worker (the cost: bench/results/make_test.md).
# __pycache__/ is gitignored.
unexport PYTHONDONTWRITEBYTECODE

NOTEBOOKS := notebooks/01_formats.ipynb notebooks/02_bf16_baseline.ipynb notebooks/03_fp8_baseline.ipynb \
             notebooks/04_exotic_formats.ipynb notebooks/05_manifold_optimizer.ipynb notebooks/06_analysis.ipynb
NBVAL     := --nbval-lax --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg

.PHONY: setup run test test-portable test-torch211 test-latest lock notebooks lab bench clean-venv

# The locked set-up: requirements.lock names the exact version of every package installed here (pip constraints, made
# by `make lock`); a change of the lock or of pyproject.toml re-installs. `make test-latest` installs the newest
# versions the bounds allow into its own venv instead, so drift is met on purpose, never by a newcomer.
# $(call install,VENV,PIP_CONSTRAINTS): the project's build backend is installed (and locked) like everything else,
# then used in place (--no-build-isolation), so an isolated build cannot fetch a newer setuptools.
LOCK      := requirements.lock
define install
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q $(2) --upgrade pip setuptools
	$(1)/bin/python -m pip install -q $(2) $(TORCH_PIN)
	# ray: the study executor's test runs against a local Ray instance (ray stays an optional extra for users)
	$(1)/bin/python -m pip install -q $(2) --no-build-isolation -e '.[dev,notebooks,ray]'
	# gpt2.tiktoken (official GPT-2 BPE ranks) ships inside openai-whisper; its heavy deps are not needed.
	# nngeometry (K-FAC Fisher monitor) declares torchvision, which it never imports and which would replace torch.
	$(1)/bin/python -m pip install -q $(2) --no-deps $(WHISPER) $(NNGEOMETRY)
endef

$(STAMP): pyproject.toml $(LOCK)
	$(call install,$(VENV),-c $(LOCK))
	touch $@

setup: $(STAMP)

run: $(STAMP)
	$(PY) tools/sweep.py --profile $(PROFILE)

# Tests train into a fresh temporary ALTGRAD_OUTPUTS, so nbval never passes on runs left by older code.
# pytest-xdist, one worker per core up to 4 (beyond that the notebooks, one unit, are the floor); wall times per
# machine: bench/results/make_test.md.
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
# baseline run; 06 trains the CI study params/studies/ci_formats.yaml and analyses it). Needed whenever library text
# they print changes (format notes, short_str, tables); commit the
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

$(STAMP211): pyproject.toml $(LOCK)
	test -x $(VENV211)/bin/python || $(PYTHON) -m venv $(VENV211)
	$(VENV211)/bin/python -m pip install -q --upgrade pip
	$(VENV211)/bin/python -m pip install -q torch==2.11.0
	grep -v '^torch==' $(LOCK) > $(VENV211)/constraints.txt
	$(VENV211)/bin/python -m pip install -q -c $(VENV211)/constraints.txt -e '.[dev]'
	touch $@

test-torch211: $(STAMP211)
	ALTGRAD_LOCK_SKIP=torch ALTGRAD_OUTPUTS=$$(mktemp -d) $(VENV211)/bin/python -m pytest -q tests/test_compile_grads.py \
		tests/test_numerics_kernel_plans.py tests/test_numerics_mt_bits.py \
		tests/test_numerics_kernels.py::test_the_direct_path_is_on_in_this_torch \
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

# The newest versions pyproject.toml's bounds allow, in a venv of their own (made anew each time): `make test-latest`
# runs the suite there and lists what differs from the lock; `make lock` writes the lock from it. Refreshing the lock
# is a commit that also re-executes the notebooks whose checked outputs the new versions change (`make notebooks`).
LATEST    ?= .venv-latest
$(LATEST)/.altgrad-installed:
	$(call install,$(LATEST),)
	touch $@

test-latest:
	rm -rf $(LATEST)   # made anew: the registry as it is today
	$(MAKE) $(LATEST)/.altgrad-installed
	$(PYTHON) tools/lock.py diff $(LATEST)
	ALTGRAD_UNLOCKED=1 ALTGRAD_OUTPUTS=$$(mktemp -d) $(LATEST)/bin/python -m pytest tests $(XDIST) $(NBVAL) $(NOTEBOOKS)

lock:
	rm -rf $(LATEST)
	$(MAKE) $(LATEST)/.altgrad-installed
	$(PYTHON) tools/lock.py write $(LATEST)

# The suite on a loaded machine, as on a shared research box (issue 53): one busy process per core beside it for its
# whole run, always stopped after (tools/cpu_load.py). It must pass, slower; its time goes to bench/results/make_test.md.
.PHONY: test-loaded
test-loaded: $(STAMP)
	$(PY) tools/cpu_load.py -- $(MAKE) test
