# Two commands: `make demo` (the main job) and `make test` (the whole suite); on a CUDA machine `make bench-gpu`.
# Both create .venv when missing and install the project; running them again skips set-up.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU wheel of PyTorch on this machine and the torchvision release paired with it (SAM3 masking: PyPI's is a CUDA
# build whose compiled ops do not load beside the CPU wheel; simforcing/torchvision_ops.py stands in for the two SAM3
# can call). A GPU user installs a CUDA pair instead (see README).
# After pip, `python -m simforcing.torchvision_startup` checks whether torchvision imports in this environment and only
# where it does not (its compiled ops do not load beside torch) writes the startup file simforcing-torchvision.pth into
# site-packages, so every process of .venv imports torchvision, diffusers and transformers (nothing else changes).
TORCH_SPEC ?= torch==2.13.0
TORCHVISION_SPEC ?= torchvision==0.28.0
STAMP := $(VENV)/.installed
# LIBERO's extra needs MuJoCo < 4 (.venv runs MuJoCo 4): its tests run in an environment of their own
LIBERO_VENV := .venv-libero
LIBERO_STAMP := $(LIBERO_VENV)/.installed

.PHONY: demo test test-libero install clean bench-gpu

$(STAMP): pyproject.toml simforcing/torchvision_startup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH_SPEC)" "$(TORCHVISION_SPEC)" -e ".[test,sam3]"
	$(BIN)/python -m simforcing.torchvision_startup
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	MUJOCO_GL=$${MUJOCO_GL:-egl} $(BIN)/simforcing demo --out runs/demo

# one worker per core, each test file on one worker (its module fixtures built once); every test runs one torch thread;
# the 15 slowest tests are listed at the end (the suite's budget: 8 minutes on a 2-core machine)
test: $(STAMP)
	MUJOCO_GL=$${MUJOCO_GL:-egl} $(BIN)/python -m pytest -q -n auto --dist loadfile --durations=15 tests

$(LIBERO_STAMP): pyproject.toml
	test -x $(LIBERO_VENV)/bin/python || $(PY) -m venv $(LIBERO_VENV)
	$(LIBERO_VENV)/bin/pip install -q "$(TORCH_SPEC)" -e ".[libero,test]"
	touch $(LIBERO_STAMP)

# The LIBERO tests (a real libero_spatial env through the evaluation loop); SIMFORCING_TEST_LIBERO=1 makes a missing
# extra a failure there, not a skip
test-libero: $(LIBERO_STAMP)
	MUJOCO_GL=$${MUJOCO_GL:-egl} SIMFORCING_TEST_LIBERO=1 $(LIBERO_VENV)/bin/python -m pytest -q tests/test_policy.py -k libero

# GPU readiness on one CUDA GPU (under 4 minutes): the 5B bridge preset with random weights, eager / compiled / CUDA
# graphs -> runs/bench_gpu.{json,md};
# without CUDA it says so and exits with 69
bench-gpu: $(STAMP)
	$(BIN)/simforcing bench --gpu --out runs/bench_gpu.json

clean:
	rm -rf runs
