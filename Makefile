# The two commands of the README, plus a few conveniences. Everything goes through CMake/Ninja.
#   make demo   installs what is missing, builds, and runs the default job
#   make test   installs what is missing, then: Release build (gcc, -Werror) + every test,
#               ASan+UBSan build (clang, -Werror) + every test, a build without OpenMP + every
#               test, the loader under ThreadSanitizer, clang-format check
JOBS ?= 2

.PHONY: all deps build demo test test-release test-asan test-noomp test-tsan format-check bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)

demo: build
	./build/ctrain fit examples/fashion_mnist_mlp.yaml

test: deps test-release test-asan test-noomp test-tsan format-check

test-release:
	cmake -S . -B build-ci -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DCT_WERROR=ON
	cmake --build build-ci -j $(JOBS)
	ctest --test-dir build-ci --output-on-failure -j $(JOBS)

test-asan:
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
		-DCT_WERROR=ON -DCT_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS)

test-noomp:
	cmake -S . -B build-noomp -G Ninja -DCMAKE_BUILD_TYPE=Release -DCT_WERROR=ON -DCT_OPENMP=OFF
	cmake --build build-noomp -j $(JOBS)
	ctest --test-dir build-noomp --output-on-failure -j $(JOBS)

# ThreadSanitizer on the loader's prefetch thread (OpenMP runtimes are not instrumented, so
# only the pthread code is checked this way; the OpenMP loops are checked for determinism).
test-tsan:
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
		-DCT_WERROR=ON -DCT_TSAN=ON -DCT_OPENMP=OFF
	cmake --build build-tsan -j $(JOBS) --target test_loader
	TSAN_OPTIONS=halt_on_error=1 ./build-tsan/tests/test_loader

format-check:
	scripts/check-format.sh

bench:
	@scripts/install-deps.sh --bench
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)
	/usr/bin/python3 bench/run.py --build build

clean:
	rm -rf build build-ci build-asan build-noomp build-tsan
