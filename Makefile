# cuvil-mcu: `make demo` and `make test` set up everything they need on a
# fresh Debian 12 machine (as root: apt toolchains + the Python package), then
# run. Setup is idempotent: it installs only what is missing (apt packages not
# installed; the package when pyproject.toml changed or it is not installed from
# this checkout), and shows pip's errors when it fails.

PYTHON ?= python3
APT_PKGS := gcc g++ clang libclang-rt-14-dev make gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm \
            gcc-arm-linux-gnueabihf libc6-dev-armhf-cross gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
            lld wasi-libc libclang-rt-14-dev-wasm32 nodejs chromium file
DEMO_MODEL := examples/kws_float.onnx
DEMO_OUT := build/demo
# pip runs again only when pyproject.toml, the Python or this checkout's place changed,
# or when `import cuvil_mcu` (from another folder) does not find this checkout
SETUP_STAMP := build/.setup-pip

.PHONY: setup demo test clean

setup:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip python3-venv; }
	@key="$$(sha256sum pyproject.toml | cut -c1-16) $$($(PYTHON) -c 'import sys; print(sys.executable)') $(CURDIR)"; \
	where="$$(cd / && $(PYTHON) -c 'import os, cuvil_mcu; print(os.path.dirname(os.path.dirname(os.path.realpath(cuvil_mcu.__file__))))' 2>/dev/null)"; \
	if [ "$$where" = "$(CURDIR)" ] && [ "$$(cat $(SETUP_STAMP) 2>/dev/null)" = "$$key" ]; then exit 0; fi; \
	echo "pip: installing this checkout (editable, with the test extras)"; \
	log="$$(mktemp)"; \
	if ! $(PYTHON) -m pip install -q --disable-pip-version-check -e '.[test]' >"$$log" 2>&1; then \
	  if grep -q externally-managed-environment "$$log"; then \
	    $(PYTHON) -m pip install -q --disable-pip-version-check --break-system-packages -e '.[test]' \
	      || { rm -f "$$log"; exit 1; }; \
	  else cat "$$log"; rm -f "$$log"; exit 1; fi; \
	fi; \
	rm -f "$$log"; mkdir -p $(dir $(SETUP_STAMP)) && echo "$$key" > $(SETUP_STAMP)

demo: setup
	cuvil-mcu boards
	cuvil-mcu gen $(DEMO_MODEL) --board nucleo-f746zg -o $(DEMO_OUT) --plan-out $(DEMO_OUT)/plan.json
	cc -std=c99 -O2 -Wall -Wextra -Werror -pedantic -I$(DEMO_OUT) firmware_examples/host/main.c -o $(DEMO_OUT)/kws_demo -lm
	$(DEMO_OUT)/kws_demo
	$(PYTHON) examples/check_demo.py $(DEMO_MODEL) examples/kws_input.npy
	$(MAKE) -C $(DEMO_OUT)
	cuvil-mcu sim $(DEMO_MODEL) --board qemu-mps2-an386 --input examples/kws_input.npy
	cuvil-mcu sim $(DEMO_MODEL) --board qemu-mps2-an386 --quantize int8 --calibration examples/kws_calib.npz --input examples/kws_input.npy
	cuvil-mcu sim $(DEMO_MODEL) --board qemu-mps3-an547 --quantize int8 --calibration examples/kws_calib.npz --input examples/kws_input.npy

# PyTorch-input tests (gen model.pt2, examples/qat) need torch: the CPU build
# pinned exactly (a range would let pip take a multi-GB CUDA build); where it
# cannot be installed those two test files skip with their reason.
TORCH_PIN := torch==2.13.0

test: setup
	@$(PYTHON) -c 'import torch' >/dev/null 2>&1 || $(PYTHON) -m pip install -q --disable-pip-version-check $(TORCH_PIN) >/dev/null 2>&1 \
	  || $(PYTHON) -m pip install -q --disable-pip-version-check --break-system-packages $(TORCH_PIN) >/dev/null 2>&1 \
	  || echo "make test: $(TORCH_PIN) could not be installed: tests/test_torch_in.py and tests/test_qat.py skip"
	$(PYTHON) -m pytest -n 2 -q -p no:cacheprovider tests

clean:
	rm -rf build out
