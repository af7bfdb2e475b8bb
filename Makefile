# Two commands do all the set-up: `make train` (the main job) and `make test`. Each installs what it needs first.
# .venv gets TORCH_SPEC (default torch==2.13.0, a CPU build where pip is set up for one); on a GPU machine set it to
# your CUDA build, e.g. `make train TORCH_SPEC=torch` (README: "GPUs, several processes and TORCH_SPEC"). `make test`
# also builds .venv-timm for the timm parity tests: timm needs torchvision, and PyPI's torchvision needs PyPI's torch.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TIMM_VENV ?= .venv-timm
TIMM_TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
PIP := -m pip install --quiet --disable-pip-version-check
# uv installs each virtual environment (pip installs uv into it first): the same versions as pip, several times faster.
# .venv is compiled to bytecode as pip does (where PYTHONDONTWRITEBYTECODE is set, every process would compile
# transformers anew); .venv-timm, whose torch is a large CUDA build, is not: what uses it writes the bytecode of what it
# imports (PYTHONDONTWRITEBYTECODE cleared for those commands), about a third of the files.
# It looks where pip is told to look (PIP_FIND_LINKS, pip's extra index URLs) and, as pip does, takes the best version
# any of them holds, so a machine whose pip is set up for a local CPU build of torch gets that build through uv too.
PIP_INDEXES = $(shell $(PYTHON) -m pip config get global.extra-index-url 2>/dev/null)
UV_INSTALL = UV_FIND_LINKS="$${UV_FIND_LINKS-$${PIP_FIND_LINKS-}}" UV_EXTRA_INDEX_URL="$${UV_EXTRA_INDEX_URL-$(PIP_INDEXES)}" \
	UV_INDEX_STRATEGY=unsafe-best-match $(1)/bin/uv pip install --quiet $(2) --python $(1)/bin/python
TIMM_PY := PYTHONDONTWRITEBYTECODE= $(TIMM_VENV)/bin/python
OUTPUT_DIR ?= outputs/vit-digits
TRAIN_CONFIG ?= configs/train_digits.json
TRAIN_ARGS ?=
# the training seed (recorded in the output folder's training_record.json); the data splits do not depend on it
SEED ?= 0
# `make train-distilled`: a small ResNet teacher (trained once into TEACHER_DIR), then a ViT taught by it (DeiT)
TEACHER_DIR ?= outputs/teacher-digits
TEACHER_CONFIG ?= configs/models/model_digits_teacher.json
TEACHER_EPOCHS ?= 60
DISTILLED_OUTPUT_DIR ?= outputs/vit-digits-distilled
PYTEST_ARGS ?=
# pytest-xdist workers (`auto`: one per core; 0: every test in the one pytest process, in order)
PYTEST_WORKERS ?= auto
PYTEST := -m pytest -n $(PYTEST_WORKERS) --dist worksteal
BENCHMARK_ARGS ?=
# The bars `make benchmark` judges our model by (README, Performance); empty: the table without a verdict.
BENCHMARK_BARS ?= --min_speedup_vs_sdpa 1.0 --min_speedup_vs_fastest 0.95 --max_memory_ratio 1.05

.PHONY: install install-timm environments train teacher train-distilled lint test test-all test-fast test-integration test-timm test-slow benchmark clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) $(PIP) uv
	$(call UV_INSTALL,$(VENV),--compile-bytecode) $(TORCH_SPEC) -e ".[train,test]"
	touch $@

install-timm: $(TIMM_VENV)/.installed

$(TIMM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TIMM_VENV)
	$(TIMM_VENV)/bin/python $(PIP) uv
	$(call UV_INSTALL,$(TIMM_VENV),) $(TIMM_TORCH_SPEC) -e ".[train,test,timm,int8]"
	touch $@

train: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) scripts/train.py $(TRAIN_CONFIG) --output_dir $(OUTPUT_DIR) --seed $(SEED) $(TRAIN_ARGS)

teacher: $(TEACHER_DIR)/training_record.json

# written last into a model folder: once it exists the teacher is trained, and a second `make` reuses it
$(TEACHER_DIR)/training_record.json: $(VENV)/.installed
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) scripts/train.py $(TRAIN_CONFIG) --model $(TEACHER_CONFIG) \
		--num_train_epochs $(TEACHER_EPOCHS) --output_dir $(TEACHER_DIR) --seed $(SEED)

train-distilled: teacher
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) scripts/train.py $(TRAIN_CONFIG) --teacher $(TEACHER_DIR) \
		--output_dir $(DISTILLED_OUTPUT_DIR) --seed $(SEED) $(TRAIN_ARGS)

# `make test` (CI): everything but the slow tier, in one pytest run per environment (both built side by side first);
# `make test-fast` leaves out the integration tests, `make test-slow` runs the slow tier (the pins end to end, the long
# runs), `make test-all` all three
test: environments lint
	$(PY) $(PYTEST) -m "not slow and not timm and not int8" --durations=15 $(PYTEST_ARGS)
	$(TIMM_PY) $(PYTEST) -m "(timm or int8) and not slow" $(PYTEST_ARGS)

test-all: test test-slow

environments:
	$(MAKE) -j2 install install-timm

# ruff's rules and line length are in pyproject.toml; `ruff format .` fixes what the second check finds
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-fast: install
	$(PY) $(PYTEST) -m "not slow and not timm and not int8 and not integration" $(PYTEST_ARGS)

test-integration: install
	$(PY) $(PYTEST) -m "integration and not slow and not timm and not int8" --durations=15 $(PYTEST_ARGS)

test-timm: install-timm
	$(TIMM_PY) $(PYTEST) -m "(timm or int8) and not slow" $(PYTEST_ARGS)

test-slow: environments
	$(PY) $(PYTEST) -m "slow and not timm and not int8" $(PYTEST_ARGS)
	$(TIMM_PY) $(PYTEST) -m "slow and (timm or int8)" $(PYTEST_ARGS)

benchmark: install-timm
	$(TIMM_PY) scripts/benchmark.py $(BENCHMARK_BARS) $(BENCHMARK_ARGS)

clean:
	rm -rf $(VENV) $(TIMM_VENV) outputs .pytest_cache
