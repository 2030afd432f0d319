# The two commands of the README, plus a few conveniences. Everything goes through CMake/Ninja.
#   make demo   installs what is missing, builds, and runs the default job
#   make test   installs what is missing, then: Release build (gcc, -Werror) + every test,
#               ASan+UBSan build (clang, -Werror) + every test, a build without OpenMP (and
#               with -march=native) + every test, the MPI tests again against MPICH, the loader under ThreadSanitizer,
#               clang-format check, 20 s fuzzing of the
#               config parser, of the checkpoint reader and of the report
#   make fuzz-config, make fuzz-checkpoint, make fuzz-report   libFuzzer for FUZZ_SECONDS (60)
#               in build-fuzz
JOBS ?= 2

.PHONY: all deps build demo test test-release test-asan test-noomp test-mpich test-tsan test-fuzz \
	fuzz-config fuzz-checkpoint fuzz-report fuzz-data format-check bench bench-pytorch chaos clean \
	bench-generate bench-async

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)

demo: build
	./build/ctrain fit examples/fashion_mnist_mlp.yaml

test: deps test-release test-asan test-noomp test-mpich test-tsan test-fuzz format-check

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
	cmake -S . -B build-noomp -G Ninja -DCMAKE_BUILD_TYPE=Release -DCT_WERROR=ON -DCT_OPENMP=OFF \
		-DCT_MPI=OFF -DCT_NATIVE=ON
	cmake --build build-noomp -j $(JOBS)
	ctest --test-dir build-noomp --output-on-failure -j $(JOBS)

# The MPI tests (label mpi) again against MPICH, installed beside Debian's default Open MPI
# (which keeps the mpicc/mpirun alternatives): MPICH's launcher (hydra, PMI_SIZE), its error
# returns and its way of ending a job when a rank dies are its own.
test-mpich:
	cmake -S . -B build-mpich -G Ninja -DCMAKE_BUILD_TYPE=Release -DCT_WERROR=ON -DCT_MPI=ON \
		-DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich
	cmake --build build-mpich -j $(JOBS) --target test_mpi ctrain_cli ctrain_broken_resume
	ctest --test-dir build-mpich -L mpi --output-on-failure

# ThreadSanitizer on the loader's prefetch thread (OpenMP runtimes are not instrumented, so
# only the pthread code is checked this way; the OpenMP loops are checked for determinism).
test-tsan:
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
		-DCT_WERROR=ON -DCT_TSAN=ON -DCT_OPENMP=OFF
	cmake --build build-tsan -j $(JOBS) --target test_loader
	TSAN_OPTIONS=halt_on_error=1 ./build-tsan/tests/test_loader

# libFuzzer (clang, ASan+UBSan, in build-fuzz) over a fresh copy of the committed seeds:
#   fuzz-config      the config parser, schema and writer (tests/fuzz/fuzz_config.c,
#                    seeds tests/fuzz/corpus)
#   fuzz-checkpoint  the checkpoint reader: safetensors, state.json, checksummed damage
#                    (tests/fuzz/fuzz_checkpoint.c, seeds tests/fuzz/corpus_checkpoint)
#   fuzz-report      the run report over any metrics.jsonl: it ends, its page is bounded
#                    (tests/fuzz/fuzz_report.c, seeds tests/fuzz/corpus_report)
#   fuzz-data        the dataset types that read files: idx, npy, csv, cifar10, text, tokens
#                    (tests/fuzz/fuzz_data.c, seeds tests/fuzz/corpus_data)
# A crash is saved as build-fuzz/artifacts-NAME/crash-* (reproduce:
# ./build-fuzz/tests/fuzz/fuzz_NAME FILE). Longer runs: `make fuzz-config FUZZ_SECONDS=3600`,
# or to keep growing the corpus a run left (a later make starts again from the seeds):
#     ./build-fuzz/tests/fuzz/fuzz_config -max_total_time=3600 -max_len=4096 build-fuzz/corpus-config
FUZZ_SECONDS ?= 60
FUZZ_FLAGS ?= -max_len=4096 -timeout=10 -rss_limit_mb=2048
CORPUS_config = tests/fuzz/corpus
CORPUS_checkpoint = tests/fuzz/corpus_checkpoint
CORPUS_report = tests/fuzz/corpus_report
CORPUS_data = tests/fuzz/corpus_data

fuzz-config fuzz-checkpoint fuzz-report fuzz-data: fuzz-%:
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
		-DCT_SANITIZE=ON -DCT_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS) --target fuzz_$*
	rm -rf build-fuzz/corpus-$* build-fuzz/artifacts-$*
	mkdir -p build-fuzz/corpus-$* build-fuzz/artifacts-$*
	cp $(CORPUS_$*)/* build-fuzz/corpus-$*/
	ASAN_OPTIONS=detect_leaks=1 ./build-fuzz/tests/fuzz/fuzz_$* $(FUZZ_FLAGS) \
		-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		-artifact_prefix=build-fuzz/artifacts-$*/ build-fuzz/corpus-$*

test-fuzz:
	$(MAKE) fuzz-config FUZZ_SECONDS=20
	$(MAKE) fuzz-checkpoint FUZZ_SECONDS=20
	$(MAKE) fuzz-report FUZZ_SECONDS=20
	$(MAKE) fuzz-data FUZZ_SECONDS=20

format-check:
	scripts/check-format.sh

# The fault tests of tests/chaos/ at CHAOS_SCALE times make test's counts (10: 320 kills,
# 400 flipped bits, 110 size limits and full disks, 90 signals, 80 races), in the Release build
# of make test. CHAOS_SEED repeats a run's random choices (each test prints its seed).
CHAOS_SCALE ?= 10
chaos: deps
	cmake -S . -B build-ci -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc -DCT_WERROR=ON
	cmake --build build-ci -j $(JOBS)
	CHAOS_SCALE=$(CHAOS_SCALE) ctest --test-dir build-ci -L chaos --output-on-failure

# The comparison with PyTorch in one invocation (about 13 minutes on the 2-core machine): the
# reference models' throughput and peak RSS (fp32 and bf16), the batch-1 step, the time to the
# target accuracy. `make bench` adds the micro-benchmarks and bench/dist.py.
bench-pytorch:
	@scripts/install-deps.sh --bench
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)
	/usr/bin/python3 bench/models.py --build build
	/usr/bin/python3 bench/run.py --build build --cases mlp32_step
	/usr/bin/python3 bench/time_to_accuracy.py --build build
	/usr/bin/python3 bench/eval_rss.py --build build

# Greedy generation from the char GPT: ctrain's key/value cache against nanoGPT's generate loop
# and a PyTorch key/value-cache twin (bench/generate.py; docs/benchmarks.md).
bench-generate:
	@scripts/install-deps.sh --bench
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS) --target bench_generate
	/usr/bin/python3 bench/generate.py --build build

# The strategies of combining the ranks' work (trainer.strategy): the accuracy each reaches in
# the same epochs, and the throughput each keeps with one worker at half speed
# (bench/async.py; docs/benchmarks.md).
bench-async:
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)
	/usr/bin/python3 bench/async.py --build build

bench:
	@scripts/install-deps.sh --bench
	cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)
	/usr/bin/python3 bench/run.py --build build
	/usr/bin/python3 bench/models.py --build build
	/usr/bin/python3 bench/dist.py --build build
	/usr/bin/python3 bench/time_to_accuracy.py --build build

clean:
	rm -rf build build-ci build-asan build-noomp build-tsan build-fuzz
