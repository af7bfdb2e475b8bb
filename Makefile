# Two commands do all the set-up: `make train` (the main job) and `make test`. Each installs what it needs into
# .venv first. CPU machines get the CPU build of torch; GPU users set TORCH_SPEC (see README).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
OUTPUT_DIR ?= outputs/vit-digits
TRAIN_CONFIG ?= configs/train_digits.json
PYTEST_ARGS ?=

.PHONY: install train test test-slow clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_SPEC)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	touch $@

train: install
	$(PY) scripts/train.py $(TRAIN_CONFIG) --output_dir $(OUTPUT_DIR)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) outputs .pytest_cache
