# Two commands do everything on a fresh machine with Python 3.11 and make:
#   make demo   - bootstrap .venv, install, run the end-to-end demo on the sandbox
#   make test   - bootstrap .venv with test extras, run the suite except the `slow` tests (make soak runs those)
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench soak sandbox docs screenshot clean

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/partnerkit demo

# The long fault runs are marked `slow` and left to `make soak`; everything else runs here, in two
# processes (pytest-xdist): the suite mostly waits on subprocesses, sockets and clocks, so two workers
# on CI's two cores take about half the time of one. Each file runs whole in one process, in its own
# order, as alone (module-scoped fixtures, such as test_security's full run, are built once). Not loadgroup:
# with pytest 9.2 it silently stops grouping (pytest-xdist issue 1386).
test: $(STAMP)
	$(PY) -m pytest -m "not slow" -n 2 --dist loadfile

bench: $(STAMP)
	$(PY) -m bench

# The slow tests (long fault runs), then the soak benchmark's full run (about 4 minutes).
soak: $(STAMP)
	$(PY) -m pytest -m slow -p no:cacheprovider
	$(PY) -m bench.soak

sandbox: $(STAMP)
	$(VENV)/bin/partnerkit sandbox

docs: $(STAMP)
	$(PY) -m partnerkit.cli._reference --write README.md

# The report as finance sees it: headless Chromium (installed from Debian if missing) renders the
# newest demo report at laptop width and printed; the images land in docs/.
screenshot: $(STAMP)
	$(PY) scripts/report_screenshot.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
