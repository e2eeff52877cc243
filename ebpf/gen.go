package ebpf

// The generated roce_bpfel.go and roce_bpfel.o are committed so that a
// plain `go build` needs no clang (DESIGN.md); `make generate` rebuilds
// them where clang and the kernel's UAPI headers are installed.
//go:generate go tool bpf2go -tags linux -target bpfel roce roce.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu
