# Two commands for a newcomer: `make demo` and `make test`. Both set up what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast test-hardened test-main test-device-only test-coopmat test-ray \
	test-torch \
	lint bench bench-check soak clean

setup:
	@bash ci/setup.sh

demo: setup
	$(VENV)/bin/vkumd info
	$(PY) -m vkumd.demo

lint: setup
	$(VENV)/bin/ruff check .

# Tiers (docs/lanes.md, "Tiers"; which test is in which: tests/tiers.py):
#   make test-fast      on every change: device-free unit tests and a smoke test per kernel
#                       family (about 1300 tests, 30-60 s on the two shared cores here)
#   make test           what CI runs: every lane below
#   make test-hardened  soak, fuzz at FUZZ_SCALE times the examples, exhaustion, faults, bad
#                       inputs, threads; on both lanes (not part of make test, which runs
#                       these tests at scale 1 on the main lane)
# The main lane: the system lavapipe, validation layers on, every test but the Ray ones
# (coopmat ones skip there with the reason). Then the transfer tests and a smoke test per
# kernel family with device-only memory (discrete-GPU transfers) at 8-wide subgroups. Then
# the cooperative-matrix lane: Mesa 26's lavapipe, only the tests marked coopmat, and a
# missing capability fails instead of skipping. Last, the Ray tests (marked ray), which
# start Ray clusters in network namespaces, in a step of their own with a time budget. The
# tests that import torch (marked torch) run in a process of their own (test-torch): torch
# in the main lane's process would make every later gc.collect() scan its objects.
test: lint test-main test-torch test-device-only test-coopmat test-ray

test-fast: setup
	VKUMD_VALIDATION=1 $(PY) -m pytest -q \
		-m "(fast or smoke) and not ray and not coopmat and not torch" \
		$(PYTEST_ARGS)

# Fuzzing (hypothesis) at FUZZ_SCALE times each test's examples (522 tests, 7.8 minutes
# here, most of it fault injection and the bad-input corpus; the model-file fuzzer,
# tests/fuzz, adds 200 cases per format at scale 10, about 3 minutes), then the same tests with
# device-only memory at 8-wide subgroups, as the device-only lane runs. The long soak is
# `make soak`.
FUZZ_SCALE ?= 10
test-hardened: setup
	VKUMD_VALIDATION=1 $(PY) -m pytest -q -m "hardened and not ray and not torch" \
		--fuzz-scale=$(FUZZ_SCALE) $(PYTEST_ARGS)
	LP_NATIVE_VECTOR_WIDTH=256 VKUMD_DEVICE_ONLY_MEMORY=1 VKUMD_VALIDATION=1 \
		$(PY) -m pytest -q -m "hardened and not ray and not torch" $(PYTEST_ARGS)

test-main: setup
	VKUMD_VALIDATION=1 $(PY) -m pytest -q -m "not ray and not torch" $(PYTEST_ARGS)

# The torch.compile / torch.export tests and the other tests that import torch (about a
# minute here); they skip, saying why, where ci/setup.sh could not install torch.
test-torch: setup
	VKUMD_VALIDATION=1 $(PY) -m pytest -q -m torch $(PYTEST_ARGS)

# Tensors in memory the host never maps (VKUMD_DEVICE_ONLY_MEMORY=1), so every upload and
# read-back goes through staging copies as on a discrete GPU; lavapipe maps all of its memory
# and would otherwise never run those paths. Only the tests that move data between host and
# device (marked transfers) and a smoke test per kernel family (smoke) run here (667 tests,
# 72-140 s here, by load): the rest run the same code on both lanes and ran on the main
# lane already. It also pins lavapipe to 8-wide subgroups (LP_NATIVE_VECTOR_WIDTH=256): on
# AVX-512 hosts vkumd picks 16-wide for the main lane (vkumd/vk/driver_settings.py), so
# every kernel family runs at both widths.
# DEVICE_ONLY_TESTS="not ray" runs the whole suite this way.
DEVICE_ONLY_TESTS ?= (transfers or smoke) and not ray and not coopmat and not torch
test-device-only: setup
	LP_NATIVE_VECTOR_WIDTH=256 VKUMD_DEVICE_ONLY_MEMORY=1 VKUMD_VALIDATION=1 \
		$(PY) -m pytest -q -m "$(DEVICE_ONLY_TESTS)" $(PYTEST_ARGS)

# The Ray tests (tests/distributed/test_ray.py and tests/serve/test_ray_serve.py, marked
# ray): one-node clusters in a loopback-only namespace (the second with the server deployed
# on Ray Serve) and a two-node cluster over a veth pair (docs/scale-out.md). Each
# starts Ray, which takes 10-40 s on two shared cores; RAY_TEST_BUDGET caps the step (the
# timeout ends pytest, whose own cleanup stops the clusters by PID). They skip, with the
# reason, without ray, root or the model; with no test selected (exit 5) the step fails.
RAY_TEST_BUDGET ?= 900
test-ray: setup
	VKUMD_VALIDATION=1 timeout --signal=INT --kill-after=60 $(RAY_TEST_BUDGET) \
		$(PY) -m pytest -q -m ray $(PYTEST_ARGS)

# The coopmat lane fails -- never passes quietly -- when the lane cannot be provisioned
# (coopmat-lane.sh exits 1), when the device lacks VK_KHR_cooperative_matrix
# (VKUMD_REQUIRE_COOPMAT=1 turns require_coopmat's skip into a failure) and when -m coopmat
# selects no test at all (pytest's exit code 5 is left as a failure on purpose).
# Validation is on here as on the main lane (docs/lanes.md, "Validation on the coopmat lane"):
# the lane ships Debian 13's validation layer (vulkan-validationlayers 1.4.309, which knows
# VK_KHR_cooperative_matrix) and coopmat-lane.sh points VK_LAYER_PATH at it only; Debian 12's
# 1.3.239 layer would reject every coopmat shader. vkumd enables vulkanMemoryModel, which
# GL_KHR_cooperative_matrix shaders declare. COOPMAT_VALIDATION=0 turns it off for a run
# (conftest.py defaults VKUMD_VALIDATION to 1, so 0 has to be explicit).
# LP_NATIVE_VECTOR_WIDTH=256: Mesa 26.1's lavapipe crashes compiling cooperative-matrix
# shaders at 16-wide subgroups, so vkumd reports no cooperative matrices there (vk/caps.py).
COOPMAT_VALIDATION ?= 1
test-coopmat: setup
	LP_NATIVE_VECTOR_WIDTH=256 VKUMD_VALIDATION=$(COOPMAT_VALIDATION) VKUMD_REQUIRE_COOPMAT=1 \
		bash ci/coopmat-lane.sh run $(PY) -m pytest -q -m coopmat $(PYTEST_ARGS)

bench: setup
	$(PY) bench/transfer.py
	$(PY) bench/dispatch.py
	$(PY) bench/ceiling.py
	$(PY) bench/gemm.py
	$(PY) bench/transformer.py
	$(PY) bench/attention.py
	$(PY) bench/graph.py
	$(PY) bench/model.py

# The soak (tests/soak/soak.py, docs/reliability.md): 10^6 dispatches, 10^5 allocations,
# 10^4 graph replays and 10^3 contexts, failing if RSS, pool bytes or live objects grow.
# Validation is off here (it is a leak and endurance run; tests/test_soak_short.py runs the
# same code scaled down with validation on); SOAK_ARGS="--scale 0.1" runs a tenth of it.
SOAK_ARGS ?=
soak: setup
	VKUMD_VALIDATION=0 $(PY) tests/soak/soak.py $(SOAK_ARGS)

# Performance-regression gate (not part of make test): bench/check.py reruns the benchmarks
# in bench/baseline.json with --quick (a couple of minutes) and fails when a ratio (vkumd over
# its same-run peer) falls more than 25% below its baseline. Needs onnx and onnxruntime.
bench-check: setup
	$(PY) bench/check.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
