# kvlab — one task runner; the README's commands are its targets. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VLLM_ENV := .engines/vllm
SGLANG_JAX_ENV := .engines/sglang-jax
SGLANG_ENV := .engines/sglang
# The GPU host's engines (`make engines GPU=1`): vLLM 0.32.0 and SGLang 0.5.23 as published on PyPI, CUDA builds.
VLLM_CUDA_ENV := .engines/vllm-cuda
SGLANG_CUDA_ENV := .engines/sglang-cuda
GPU_ENVS := $(VLLM_CUDA_ENV)/.installed $(SGLANG_CUDA_ENV)/.installed
ENVS := kvlab/engines/envs
# sglang-jax needs Python >= 3.12; found on PATH or in the usual places (or give it).
ENGINE_PYTHON312 ?= $(shell $(ENVS)/find-python.sh 3.12 2>/dev/null)
# PyTorch's CPU wheel index: the vLLM lock pins torch==2.13.0+cpu, which PyPI does not carry. These build
# machines keep that wheel in pip's find-links folder (taken from pip's configuration); elsewhere give the index:
#   make TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu report
TORCH_CPU_INDEX ?=
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
TORCH_SOURCE := $(if $(FIND_LINKS),--find-links $(FIND_LINKS),) $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX),)
# The embedded default: every CPU experiment (vLLM's CPU build and PyTorch SGLang on CPU, tiny local model).
# FULL=1: the full study (more context points, repeats); default: the quick form that finishes in minutes.
# cpu_capacity (issue 23's load ladder, report 07) is part of both forms: its quick ladder (1, 2, 4 in flight) runs on
# cpu_long_context's four servers and added about 100 s to the sweep on the 2-vCPU EPYC (docs/performance.md).
# GPU=1 (a GPU host, `make report GPU=1`): the GPU host's experiments instead, swept with the CUDA environments
# (`engines` builds them with GPU=1), in the order docs/experiments.md gives: the article's setup (reports 01, 02, 03),
# the step-fit runs (report 04), the capacity ladder (report 07). EXPERIMENTS=… picks other files either way.
# cpu_trace (issue 54: a replayed trace and load.search, report 07's real-traffic section) is part of both forms: its
# quick form (memory setting 0.92, on cpu_capacity's servers) added about 50 s on the 2-vCPU EPYC.
GPU_ON := $(filter 1 yes true,$(GPU))
FULL_ON := $(filter 1 yes true,$(FULL))
GPU_EXPERIMENTS := $(addprefix data/experiments/,b300_long_context.yaml b300_step_fit.yaml b300_capacity.yaml)
CPU_EXPERIMENTS := $(sort $(wildcard data/experiments/cpu_*.yaml))
EXPERIMENTS ?= $(if $(GPU_ON),$(GPU_EXPERIMENTS),$(CPU_EXPERIMENTS))
SWEEP_FLAGS := $(if $(FULL_ON),,--quick)
PYTEST_ARGS ?=

.PHONY: help install engines engines-sglang-jax report sweep cjk-font test test-fast format test-gpu-envs test-cluster lab bench browser clean locks

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# Every environment is built by uv from a lock file with a hash for every package (docs/environments.md):
# the workbook from uv.lock, each engine from kvlab/engines/envs/<engine>.lock. uv itself comes from a hashed
# lock too, into .tools/uv. uv never downloads a Python (the machine's interpreters are used), and its cache
# (~/.cache/uv) is shared by all four environments, which hard-link their files from it.
UV := .tools/uv/bin/uv
export UV_PYTHON_DOWNLOADS := never
# uv installs without byte-compiling (seconds instead of minutes); what make runs writes the bytecode of what
# it imports on first use, even where the machine sets PYTHONDONTWRITEBYTECODE (these build machines do).
unexport PYTHONDONTWRITEBYTECODE
UV_ENGINE := $(UV) pip install -q --no-deps --require-hashes

$(UV): $(ENVS)/uv-tool.lock
	rm -rf .tools/uv
	$(PYTHON) -m venv .tools/uv
	.tools/uv/bin/pip install -q --require-hashes -r $<

$(BIN)/.installed: pyproject.toml uv.lock | $(UV)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync -q --locked --extra test --python $(PYTHON)
	touch $@

install: $(BIN)/.installed ## create the workbook environment (.venv) from uv.lock

# One engine environment from its lock, by uv, on the machine's Python: $(1) the folder, $(2) the lock, $(3) more
# options for uv's install (vLLM's CPU build: where its torch wheel comes from).
define ENGINE_ENV
$(1)/.installed: $(2) | $$(UV)
	rm -rf $(1)
	$$(UV) venv -q --python $$(PYTHON) $(1)
	$$(UV_ENGINE) --python $(1)/bin/python $(3) -r $$<
	touch $$@
endef

$(eval $(call ENGINE_ENV,$(VLLM_ENV),$(ENVS)/vllm-cpu.lock,$(TORCH_SOURCE)))

$(SGLANG_JAX_ENV)/.installed: $(ENVS)/sglang-jax-cpu.lock $(ENVS)/sglang-jax-cpu.patch | $(UV)
	@test -n "$(ENGINE_PYTHON312)" || $(ENVS)/find-python.sh 3.12
	rm -rf $(SGLANG_JAX_ENV)
	$(UV) venv -q --python $(ENGINE_PYTHON312) $(SGLANG_JAX_ENV)
	$(UV_ENGINE) --python $(SGLANG_JAX_ENV)/bin/python -r $<
	# kvlab's one fix to the pinned release (see the patch's header); fails loudly when it no longer applies.
	patch -p1 --forward --batch --no-backup-if-mismatch \
	  -d "$$($(SGLANG_JAX_ENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
	  < $(ENVS)/sglang-jax-cpu.patch
	touch $@

$(eval $(call ENGINE_ENV,$(SGLANG_ENV),$(ENVS)/sglang-cpu.lock))

# The GPU host's environments, from locks resolved on PyPI (kvlab/engines/envs/lock-cuda.sh): the wheels install on
# any x86-64 Linux with glibc >= 2.34, so `make test-gpu-envs` builds and checks them on a CPU machine too.
$(eval $(call ENGINE_ENV,$(VLLM_CUDA_ENV),$(ENVS)/vllm-cuda.lock))
$(eval $(call ENGINE_ENV,$(SGLANG_CUDA_ENV),$(ENVS)/sglang-cuda.lock))

engines: ## create the engine environments (.engines/vllm: vLLM CPU build; .engines/sglang: PyTorch SGLang on CPU), side by side; GPU=1: the GPU host's .engines/vllm-cuda and .engines/sglang-cuda instead
	@# two installs at once: with a cold cache each waits on its downloads
	$(MAKE) --no-print-directory -j2 $(if $(GPU_ON),$(GPU_ENVS),$(VLLM_ENV)/.installed $(SGLANG_ENV)/.installed)

engines-sglang-jax: $(SGLANG_JAX_ENV)/.installed ## opt-in: .engines/sglang-jax (SGLang's JAX runtime; its adapter's tests use it)

sweep: install engines ## run the embedded CPU experiments for real (finished runs are reused; FULL=1 for the full study; GPU=1: the b300_*.yaml files with the CUDA environments)
	@# exit 3 is kvlab's "some runs failed": they are stored as failed and the reports show them, so `make report`
	@# goes on to build the reports and says so; any other failure stops here
	@$(BIN)/kvlab sweep $(strip $(SWEEP_FLAGS) $(EXPERIMENTS)) || { rc=$$?; [ $$rc -eq 3 ] || exit $$rc; \
	  echo "make: some runs failed (kvlab sweep exit 3); they are stored as failed and the reports show them"; }

report: sweep cjk-font ## MAIN: measure on this machine, then build reports/index.html and the HTML reports (GPU=1 on a GPU host: its b300_*.yaml experiments)
	$(BIN)/kvlab report

# The CJK font the reports' Korean document title needs (Debian's Chromium brings none): Noto Sans CJK from PyPI, by
# hash (kvlab/engines/envs/cjk-font.lock), copied where fontconfig, and so Chromium, finds it. No apt, no other
# network. `make report` installs it once (a 32 MB wheel, from uv's cache after the first time) so the pages a
# fresh machine builds show the title, not empty boxes; `make browser` needs it for the rendering test.
CJK_FONT_DIR ?= $(HOME)/.local/share/fonts/kvlab
CJK_FONT := $(CJK_FONT_DIR)/NotoSansCJK-VF.otf.ttc

cjk-font: $(CJK_FONT) ## install the CJK font the reports' Korean title needs (from PyPI, by hash)

$(CJK_FONT): | $(UV)
	rm -rf .tools/cjk-font
	$(UV) pip install -q --no-deps --require-hashes --python $(PYTHON) --target .tools/cjk-font -r $(ENVS)/cjk-font.lock
	mkdir -p $(CJK_FONT_DIR)
	cp .tools/cjk-font/manimgx_fonts_cjk/*.ttc $(CJK_FONT_DIR)/
	@command -v fc-cache >/dev/null && fc-cache -f $(CJK_FONT_DIR) >/dev/null || true

browser: cjk-font | $(UV) ## install Debian's headless Chromium (needs root) and a CJK font (from PyPI) for the report rendering test
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium missing and not root: the browser test will say so"; }

# The suite in three streams, side by side (docs/testing.md, "Three streams side by side"): the engine tests (marker
# engine: real vLLM and SGLang servers, one at a time) in the foreground, then AFTER_ENGINES; every other test but the
# computing ones (the notebooks, the reports in Chromium, the fake engines, the other engine_env tests) in one process
# pinned to the last core at nice 10, let onto every core once the engine pass is done (what it starts then may use core
# 0); and the computing tests (SCAVENGE) idle-scheduled on any core. The reports of the last two are held back and
# printed after the engine pass's. The engines compute on the cores below the last: vLLM's CPU build binds its compute
# threads there itself (VLLM_CPU_OMP_THREADS_BIND=auto keeps one core back), and the engine pass gives SGLang the same
# cores (SGLANG_CPU_OMP_THREADS_BIND). With one core, or without taskset, the engine-free tests and the engine tests run
# one after the other. make fails if any fails, and its last lines name each stream that failed with its failing tests
# (a CI log's tail shows them, whichever stream it was). All share one fit cache (kvlab.perfmodel.fitcache), a fresh
# file of this run's own removed at the end: a fit one process made is read, not refitted, by the others, and no
# developer's ~/.cache/kvlab is read or written.
LAST_CORE := $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$((n - 1)))
# FULL=1 adds the tests marked `full` (pyproject.toml): slow checks whose mechanism a cheaper test of the default run
# shows too (docs/testing.md lists them); without it make test says how many it left out
NOT_FULL := $(if $(filter 1 yes true,$(FULL)),, and not full)
ENGINE_FREE := -m "not cluster and not engine$(NOT_FULL)"
ENGINE_PASS := -m "engine and not cluster$(NOT_FULL)"
# engine-free tests that time their own deadlines against fixture servers (the fault and hostile soaks, the SLO
# search) run once the engine pass is done, unpinned at nice 0, one xdist worker a file (they mostly wait on their
# servers' drips): the three streams end closer together
AFTER_ENGINES := tests/test_fault_soak.py tests/test_hostile_servers.py tests/test_search.py
# engine-free tests that only compute (the studies, the model, the notebooks' parameters, the engines' argv parsers) run
# under SCHED_IDLE (`chrt --idle 0`; nice 19 where chrt is missing or refused), on any core, in the time the other
# passes leave idle (a server starting, a client waiting on a stream, the pinned pass done): any other process that
# wakes preempts them at once, so an engine's step is not delayed (at nice 19 it waits out a time slice)
IDLE_POLICY := $(shell command -v chrt >/dev/null && chrt --idle 0 true 2>/dev/null && echo "chrt --idle 0" || echo "nice -n 19")
# (in this order: the model's fits late, once the pinned pass's first report build has put them in the fit cache;
# last the engines' own argv parsers, each an engine's import in its environment, once the engine pass leaves a core)
SCAVENGE := tests/test_house.py tests/test_imports.py tests/test_plots.py tests/test_fitcache.py tests/test_perfmodel_terms.py tests/test_perfmodel_outside.py tests/test_perfmodel.py tests/studies tests/test_notebook_parameters.py tests/test_engines.py
# the cores below the last: "0" on two cores, "0-6" on eight
ENGINE_CORES := $(shell c=$(LAST_CORE); if [ $$c -gt 1 ]; then echo 0-$$((c - 1)); else echo 0; fi)
test: install engines engines-sglang-jax browser ## run the test suite (real engine tests included; FULL=1 adds the slow tests marked full; the Ray cluster tests are `make test-cluster`)
	@status=0; tmp=$$(mktemp -d); export KVLAB_FIT_CACHE=$$tmp/fits.sqlite; \
	stream() { name=$$1; shift; "$$@" > $$tmp/$$name.log 2>&1; echo $$? > $$tmp/$$name.rc; }; \
	shown() { name=$$1; shift; { "$$@"; echo $$? > $$tmp/$$name.rc; } 2>&1 | tee $$tmp/$$name.log; }; \
	shown ruff-check $(BIN)/ruff check --quiet .; shown ruff-format $(BIN)/ruff format --check --quiet .; \
	if [ "$(LAST_CORE)" -gt 0 ] && command -v taskset >/dev/null; then \
	  echo "make test: the engine-free tests run beside the engine tests, on core $(LAST_CORE) and idle-scheduled; their reports follow"; \
	  stream pinned taskset -c $(LAST_CORE) nice -n 10 $(BIN)/pytest $(ENGINE_FREE) $(addprefix --ignore=,$(AFTER_ENGINES) $(SCAVENGE)) $(PYTEST_ARGS) & free=$$!; \
	  stream computing $(IDLE_POLICY) $(BIN)/pytest $(ENGINE_FREE) $(SCAVENGE) $(PYTEST_ARGS) & scavenge=$$!; \
	  shown engine env SGLANG_CPU_OMP_THREADS_BIND=$(ENGINE_CORES) $(BIN)/pytest $(ENGINE_PASS) $(PYTEST_ARGS); \
	  for p in $$(pgrep -P $$free 2>/dev/null); do taskset -a -p -c 0-$(LAST_CORE) $$p >/dev/null 2>&1; done; \
	  shown after-engines $(BIN)/pytest -n $(words $(AFTER_ENGINES)) --dist loadfile $(ENGINE_FREE) $(AFTER_ENGINES) $(PYTEST_ARGS); \
	  wait $$scavenge; echo "---------------- the computing tests (idle-scheduled) ----------------"; cat $$tmp/computing.log; \
	  wait $$free; echo "---------------- the engine-free tests (core $(LAST_CORE)) ----------------"; cat $$tmp/pinned.log; \
	else \
	  shown engine-free $(BIN)/pytest $(ENGINE_FREE) $(PYTEST_ARGS); \
	  shown engine $(BIN)/pytest $(ENGINE_PASS) $(PYTEST_ARGS); \
	fi; \
	$(if $(NOT_FULL),echo "make test: left out $$(grep -rl 'pytest.mark.full' tests | wc -l | tr -d ' ') files' tests marked full ($$(grep -rho 'pytest.mark.full' tests | wc -l | tr -d ' ') marks); make test FULL=1 runs them";) \
	for rc in $$tmp/*.rc; do \
	  n=$$(cat $$rc); [ "$$n" = 0 ] && continue; status=$$n; name=$$(basename $$rc .rc); \
	  echo "make test: FAILED: $$name exited $$n"; { grep -h -E '^(FAILED|ERROR) |^E +' $$tmp/$$name.log || tail -20 $$tmp/$$name.log; } | head -40; \
	done; rm -rf $$tmp; exit $$status

format: install ## rewrite the code as `make test`'s lint step wants it (ruff format, then ruff check --fix)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

TEST_WORKERS ?= 2
test-fast: install ## the suite without engine and browser tests (for development)
	$(BIN)/pytest -m "not engine and not browser and not cluster" -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Opt-in, not part of `make test`: builds both CUDA environments here (a large download, docs/environments.md), starts
# kvlab's entry points in them, parses every GPU experiment's command lines with the CUDA builds' own argument parsers
# and classifies the failure texts read out of them. Needs nothing else built: the one comparison with the CPU
# environments runs where `make engines` built them, and says why it skips where not.
test-gpu-envs: install ## opt-in: build .engines/vllm-cuda and .engines/sglang-cuda here and check every GPU experiment's argv with their parsers
	$(MAKE) --no-print-directory -j2 $(GPU_ENVS)
	KVLAB_TEST_GPU_ENVS=1 $(BIN)/pytest tests/test_gpu_envs.py $(PYTEST_ARGS)

test-cluster: install engines ## the Ray cluster tests (installs kvlab[cluster]; a local two-node cluster, real vLLM)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync -q --locked --extra test --extra cluster --python $(PYTHON)
	$(BIN)/pytest -m cluster $(PYTEST_ARGS)

# `make lab PORT=8890`: JupyterLab's port on 127.0.0.1 (8888 unless given).
PORT ?= 8888
lab: install ## JupyterLab on lab/, copies of the notebooks (saving never changes notebooks/), with reports/ (127.0.0.1:PORT, default 8888, Jupyter's token; as root too)
	$(BIN)/kvlab lab --port $(PORT)

bench: install engines engines-sglang-jax ## run the benchmarks and print their table (QUICK=1: a fast pass; ONLY="peer_agreement ...": those)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync -q --locked --extra test --extra cluster --python $(PYTHON)
	$(BIN)/python -m benchmarks.run_all $(if $(QUICK),--quick) $(if $(ONLY),--only $(ONLY))

locks: | $(UV) ## refresh the lock files from the working environments, and the CUDA ones from PyPI (docs/environments.md)
	$(UV) lock --python $(PYTHON)
	FIND_LINKS="$(FIND_LINKS)" $(ENVS)/lock.sh $(UV) $(VLLM_ENV) $(ENVS)/vllm-cpu.lock
	FIND_LINKS="$(FIND_LINKS)" $(ENVS)/lock.sh $(UV) $(SGLANG_ENV) $(ENVS)/sglang-cpu.lock
	FIND_LINKS="$(FIND_LINKS)" $(ENVS)/lock.sh $(UV) $(SGLANG_JAX_ENV) $(ENVS)/sglang-jax-cpu.lock
	$(ENVS)/lock-cuda.sh $(UV) $(ENVS)/vllm-cuda.txt $(ENVS)/vllm-cuda.lock
	$(ENVS)/lock-cuda.sh $(UV) $(ENVS)/sglang-cuda.txt $(ENVS)/sglang-cuda.lock $(ENVS)/sglang-cpu.lock

clean: ## remove generated reports (keeps data and environments)
	rm -rf reports/
