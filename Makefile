# One entry point for every job; each target is one line in the README.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        ?= .venv
PY          := $(VENV)/bin/python
MODEL_DIR   ?= models/kokoro
PORT        ?= 8080
HOST        ?= 127.0.0.1
TTS_URL     ?= http://127.0.0.1:8080
TARGET      ?= local
UV          := $(shell command -v uv 2>/dev/null || echo "$(HOME)/.local/bin/uv")
PYTHON312    = $(shell scripts/find_python.sh)

export KOKORO_MODEL_DIR ?= $(abspath $(MODEL_DIR))
# Python writes its bytecode cache (into .venv and the repo's __pycache__, which git ignores): where the environment
# says PYTHONDONTWRITEBYTECODE (CI, the images), every process the jobs start would compile each module it imports
# from source again, seconds for the server's imports alone.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help install weights serve demo agent bench soak gpu-check prereqs test tf-check lint lock clean deploy destroy

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(UV):
	python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv

# The environment is rebuilt only when the lock or the project metadata changes.
$(VENV)/.installed: requirements.lock pyproject.toml | $(UV)
	@test -x $(PY) || $(UV) venv --quiet --python "$(PYTHON312)" $(VENV)
	$(UV) pip sync --quiet --python $(PY) requirements.lock
	$(UV) pip install --quiet --python $(PY) --no-deps -e .
	@touch $@

# The native kernels (container/native): a faster generator on a CPU (docs/engine.md). The server runs without them,
# slower, and says so: a machine that cannot build them still installs.
KERNELS_LIB := container/kokoro_tts/engine/backends/libkokoro_kernels.so
$(KERNELS_LIB): $(wildcard container/native/*.c container/native/*.h) container/native/build.py | $(VENV)/.installed
	@$(PY) container/native/build.py || echo "warning: no native kernels; the server runs without them, slower"

install: $(VENV)/.installed $(KERNELS_LIB) weights ## create .venv from the lock, build the kernels, fetch the weights

weights: $(VENV)/.installed ## fetch the Kokoro weights into MODEL_DIR, derive the torch weights (no-ops when done)
	$(PY) -m scripts.weights fetch --dest "$(MODEL_DIR)"
	$(PY) -m scripts.weights derive-torch --dest "$(MODEL_DIR)"
	$(PY) -m scripts.weights derive-stages --dest "$(MODEL_DIR)"

serve: install ## run the TTS server in the foreground on the embedded default (PORT=8080)
	$(VENV)/bin/serve --host $(HOST) --port $(PORT)

demo: install ## TTS server + agent + scripted LLM: bidi vs batch first audio, out/demo-*.wav (KEEP=1: the page stays up)
	$(PY) -m scripts.demo $(if $(KEEP),--keep)

# 8081, so it runs beside `make serve` (8080); TTS_URL stays the TTS server's. It checks the TTS server answers first.
agent: PORT = 8081
agent: install ## run the agent app on the scripted LLM, PORT=8081; start `make serve` first (TTS_URL=its URL)
	TTS_URL=$(TTS_URL) $(VENV)/bin/voice-agent serve --host $(HOST) --port $(PORT)

bench: install ## benchmarks (TARGET=local|deployed): bench/results/latest.{json,md}, plots; QUICK=1: bench/results/quick/
	$(PY) -m scripts.bench --target $(TARGET) $(if $(QUICK),--quick)

soak: install ## resource soak of the real serve: churn, vanishing sessions, bombs; fds/threads/RSS/CPU back to baseline
	$(PY) -m scripts.soak --json bench/results/soak.json

gpu-check: install ## on an NVIDIA GPU host: torch backend on CUDA, first audio, streams with and without batching (bench/results/gpu.json)
	timeout 480 $(PY) -m scripts.gpu_check

prereqs: ## check what make test needs besides .venv: Python 3.12, npm, Terraform, Chromium (one line each)
	@scripts/check_prerequisites.sh

# The Terraform checks mostly wait (the provider's own consistency waits, moto), so they run beside the install (its
# weights' derivation) and the lint; pytest starts once all three are done, with the machine to itself. The sub-make
# is called as `make`, not $(MAKE): a line naming $(MAKE) runs even under `make -n`. A background job ignores
# Ctrl-C, so the recipe passes an interrupt on to the checks.
test: prereqs $(VENV)/.installed ## lint, type-check, the Terraform checks, then the test suite (about 30 minutes on 2 cores)
	@log=$$(mktemp); scripts/terraform_checks.sh >"$$log" 2>&1 & checks=$$!; trap 'kill $$checks' INT TERM; \
	make --no-print-directory install lint; built=$$?; \
	wait $$checks; checked=$$?; cat "$$log"; rm -f "$$log"; [ $$built -eq 0 ] && [ $$checked -eq 0 ]
	$(VENV)/bin/pytest

tf-check: $(VENV)/.installed ## Terraform only: fmt, validate, mocked tests, checkov, apply/destroy against moto
	scripts/terraform_checks.sh

deploy: $(VENV)/.installed ## deploy the endpoint and agent runtime to AWS (BEDROCK_MODEL_ID=... required; docs/deploy.md)
	scripts/deploy/deploy.sh

destroy: $(VENV)/.installed ## remove the deployment (DESTROY_SHARED=1: the images and weights too; docs/deploy.md)
	scripts/deploy/destroy.sh

lint: $(VENV)/.installed ## ruff and mypy only
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy

LOCK := $(UV) pip compile pyproject.toml --generate-hashes --quiet --python-version 3.12 --custom-compile-command "make lock"
lock: | $(UV) ## re-pin every lock (exact versions with hashes, no download addresses)
	$(LOCK) --extra server --extra agent --extra mirror --extra gpu --extra dev -o requirements.lock
	$(LOCK) --extra server --python-platform x86_64-manylinux_2_28 -o container/requirements-onnx.lock
	$(LOCK) --extra server --extra gpu --python-platform x86_64-manylinux_2_28 -o container/requirements-torch.lock
	$(LOCK) --extra agent --python-platform aarch64-manylinux_2_28 -o agent/requirements.lock

clean: ## remove the environment (weights in MODEL_DIR are kept)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(KERNELS_LIB)
