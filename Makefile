# softib: see README.md. `make test` is what CI runs.
GO       ?= go
PKGS     := ./...
# Packages whose code runs on several goroutines: tested under -race too.
RACE_PKGS := ./verbsd/... ./client/... ./vhca/link/... ./ebpf/... ./internal/impair

.PHONY: all build test deps vet unit race fuzz bench generate lint demo fastpath interop

all: build

build:
	$(GO) build $(PKGS)

deps:
	scripts/deps.sh

# Everything: the tools the tests need, vet, unit and end-to-end tests, a
# bounded fuzzing pass over every parser.
test: deps vet unit race fuzz

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test -count=1 $(PKGS)

race:
	$(if $(RACE_PKGS),$(GO) test -race -count=1 $(RACE_PKGS),@echo "race: no concurrent packages yet")

# Each target runs a count of inputs, about 5-15 s here, not a duration: with
# a duration, Go 1.26's fuzzing coordinator can report the end of -fuzztime as
# a failure, "context deadline exceeded" with no input (golang/go#75804, fixed
# in Go 1.27). Longer on demand: make fuzz FUZZTIME=10m
fuzztime = $(if $(FUZZTIME),$(FUZZTIME),$(1))
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseEthernet$$' -fuzztime $(call fuzztime,1000000x) -fuzzminimizetime 50x ./vhca/wire
	$(GO) test -run '^$$' -fuzz '^FuzzParseIB$$' -fuzztime $(call fuzztime,1000000x) -fuzzminimizetime 50x ./vhca/wire
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime $(call fuzztime,7000x) -fuzzminimizetime 50x ./vhca
	$(GO) test -run '^$$' -fuzz '^FuzzRingIndices$$' -fuzztime $(call fuzztime,400000x) ./verbsd/abi
	$(GO) test -run '^$$' -fuzz '^FuzzScribble$$' -fuzztime $(call fuzztime,3000x) -fuzzminimizetime 50x ./client
	$(GO) test -run '^$$' -fuzz '^FuzzNeighbour$$' -fuzztime $(call fuzztime,100000x) -fuzzminimizetime 50x ./verbsd
	$(GO) test -run '^$$' -fuzz '^FuzzFlowControl$$' -fuzztime $(call fuzztime,400000x) -fuzzminimizetime 50x ./vhca/wire
	$(GO) test -run '^$$' -fuzz '^FuzzPacket$$' -fuzztime $(call fuzztime,300000x) -fuzzminimizetime 50x ./vhca/link/cable

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# Regenerates generated code: the eBPF objects (ebpf/roce_bpfel.*, which
# are committed so that building needs no clang). Needs clang and the
# kernel's UAPI headers: apt-get install clang linux-libc-dev.
generate:
	$(GO) generate $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# The main job: a two-node RoCEv2 lab, perftest-style results, a capture.
demo:
	scripts/demo.sh

# The XDP fast path against the TAP path and the kernel's batched UDP, on
# one two-node lab, in one run (root).
fastpath:
	scripts/fastpath.sh

# softib against real Soft-RoCE (rdma_rxe), rdma-core and perftest in a
# qemu VM (root; downloads Debian's kernel and packages once).
interop:
	scripts/rxe-interop.sh
