# Thin wrapper over CMake. `make demo` and `make test` install missing Debian packages first.
BUILD ?= build
JOBS ?= $(shell nproc)
# OpenMP threads (loading and quantizing; the CPU backend has its own pool) wait passively: tests run side by
# side on few cores (see src/cli/main.c)
export OMP_WAIT_POLICY ?= passive
CMAKE_FLAGS ?=

.PHONY: all setup configure build demo test soak bench-http asan tsan fuzz clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

# The server soak: 64 clients against `cinfer serve` for SOAK_SECONDS (tests/server/js/soak.mjs)
SOAK_SECONDS ?= 300
soak: build
	@CINFER_BIN=$(abspath $(BUILD))/cinfer node tests/server/js/soak.mjs --duration $(SOAK_SECONDS)

# Decode tokens/s streamed through HTTP against the library directly (bench/http_vs_lib.mjs)
bench-http: build
	@node bench/http_vs_lib.mjs --bin $(BUILD)/cinfer

asan: setup
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCINFER_CUDA=OFF -DCINFER_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ctest --output-on-failure -j $(JOBS) -LE slow $(CTEST_FLAGS)

# ThreadSanitizer on the tests labelled tsan (the engine's threads and the CPU backend's worker pool)
tsan: setup
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCINFER_CUDA=OFF -DCINFER_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@cd build-tsan && ctest --output-on-failure -j $(JOBS) -L tsan $(CTEST_FLAGS)

# libFuzzer runs (clang, ASan + UBSan): tokenizer encode and load, chat templates, safetensors headers, config.json
fuzz: setup
	@CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCINFER_CUDA=OFF -DCINFER_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_tokenizer fuzz_template fuzz_safetensors fuzz_config fuzz_tokenizer_load
	@cd build-fuzz && ctest --output-on-failure -L fuzz

clean:
	rm -rf $(BUILD) build-asan build-fuzz build-tsan
