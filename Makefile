# Thin wrapper over CMake. `make run` and `make test` install missing Debian
# packages first, so both work on a fresh Debian 12 machine.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
WORKSPACE  ?= .
PREFIX     ?= /usr/local
DESTDIR    ?=

.PHONY: all deps build asan test test-plain test-asan run bench clean format install

all: build

deps:
	@sh scripts/install-deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/Makefile
	cmake --build $(BUILD) -j$(JOBS)

$(ASAN_BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DLUAGENT_SANITIZE=ON

asan: deps $(ASAN_BUILD)/Makefile
	cmake --build $(ASAN_BUILD) -j$(JOBS)

test-plain: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The sanitized build runs the whole suite again; any report fails the run.
test-asan: asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j$(JOBS)

test: test-plain test-asan

# Installs the binary, the man page, the bash completion and the prompts
# from the build folder (configured only if it has never been, so an
# existing build keeps its type); it installs no packages: `sudo make
# install`, or a staged `make install DESTDIR=/tmp/stage PREFIX=/usr`.
install:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j$(JOBS) --target luagent luagent_completion
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

run: build
	./$(BUILD)/luagent --workspace $(WORKSPACE) daemon

bench: build
	sh bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
